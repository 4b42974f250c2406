//! The fan-out consumers of a `MemoryStream` and their lives (`CREATING`, `ACTIVE`,
//! `DELETING`, gone), kept apart from the subscriptions so the stream's state can hold them
//! without importing the subscription code.

use std::collections::BTreeMap;
use std::time::Duration;

use kinesis_stream_core::{ConsumerStatus, ReaderError, StreamConsumer};
use tokio::time::Instant;

/// How long a deregistered consumer of a [`MemoryStream`](crate::MemoryStream) stays `DELETING` (described, with
/// its ARN, but not usable) before it is gone and its name can be registered again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerDeletion {
    /// For this many answers describing it: DescribeStreamConsumer, and RegisterStreamConsumer
    /// of its name (which answers with its description). `Describes(3)`: the first three
    /// answer `DELETING`, the fourth finds it gone. `Describes(0)`: gone at once.
    Describes(u32),
    /// For this long, in tokio time (so paused clocks reach the end).
    For(Duration),
}

impl Default for ConsumerDeletion {
    /// 5 s: AWS takes seconds to delete a consumer.
    fn default() -> Self {
        Self::For(Duration::from_secs(5))
    }
}

/// Where a registered consumer is in its life.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Life {
    /// Until it is first described.
    Creating,
    Active,
    /// Answers `DELETING` while describes are left, or until the instant.
    Deleting(Left),
}

/// What is left of a deletion.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Left {
    Describes(u32),
    Until(Instant),
}

/// A registered consumer.
#[derive(Debug, Clone)]
pub(crate) struct Consumer {
    pub(crate) arn: String,
    pub(crate) life: Life,
}

impl Consumer {
    /// True once a deletion is over: the consumer is gone.
    pub(crate) fn gone(&self) -> bool {
        match self.life {
            Life::Deleting(Left::Describes(n)) => n == 0,
            Life::Deleting(Left::Until(at)) => Instant::now() >= at,
            Life::Creating | Life::Active => false,
        }
    }

    /// How it is described now; one describe of a deletion counted by describes is used up.
    pub(crate) fn describe(&mut self, name: &str) -> StreamConsumer {
        let status = match &mut self.life {
            // CREATING the first time it is seen, ACTIVE from then on.
            life @ Life::Creating => {
                *life = Life::Active;
                ConsumerStatus::Creating
            }
            Life::Active => ConsumerStatus::Active,
            Life::Deleting(left) => {
                if let Left::Describes(n) = left {
                    *n = n.saturating_sub(1);
                }
                ConsumerStatus::Deleting
            }
        };
        StreamConsumer::with_status(name, self.arn.clone(), status)
    }
}

/// Consumers and live subscriptions of a [`MemoryStream`](crate::MemoryStream).
#[derive(Debug, Default)]
pub(crate) struct FanOutState {
    /// (stream, consumer name) -> consumer, `DELETING` ones included until they are gone.
    pub(crate) consumers: BTreeMap<(String, String), Consumer>,
    /// The creation stamp of the last registration: each new consumer's ARN ends with a larger
    /// one.
    pub(crate) last_creation: u64,
    /// How long `KinesisApi::deregister_consumer` leaves a consumer `DELETING`.
    pub(crate) deletion: ConsumerDeletion,
    /// (consumer ARN, shard) of live subscriptions, with the id of the one that holds it.
    pub(crate) live: BTreeMap<(String, String), u64>,
    /// The id of the next subscription.
    pub(crate) next_id: u64,
    /// When each (consumer ARN, shard) was last subscribed.
    pub(crate) last_subscribe: BTreeMap<(String, String), Instant>,
    /// Moved by `cut_subscriptions`: subscriptions of an older generation fail.
    pub(crate) generation: u64,
}

impl FanOutState {
    /// The usable (not `DELETING`) consumer of ARN `arn`.
    pub(crate) fn consumer_by_arn(&self, arn: &str) -> Option<&Consumer> {
        self.consumers
            .values()
            .find(|c| c.arn == arn && !matches!(c.life, Life::Deleting(_)))
    }

    /// The consumer `name` of `stream`, dropping it first if its deletion is over.
    pub(crate) fn consumer(&mut self, stream: &str, name: &str) -> Option<&mut Consumer> {
        let key = (stream.to_owned(), name.to_owned());
        if self.consumers.get(&key).is_some_and(Consumer::gone) {
            self.consumers.remove(&key);
        }
        self.consumers.get_mut(&key)
    }
}

/// ConsumerNotFound for `name` of `stream`.
pub(crate) fn consumer_not_found(stream: &str, name: &str, operation: &'static str) -> ReaderError {
    ReaderError::ConsumerNotFound {
        stream: stream.to_owned(),
        consumer: name.to_owned(),
        operation,
    }
}

/// How long after a successful subscribe another one is refused rather than taking over.
pub(crate) const TAKEOVER_AFTER: Duration = Duration::from_secs(5);
