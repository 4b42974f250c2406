//! `ShardSubscription` and `ShardEvent`: a live SubscribeToShard subscription, pulled one event
//! at a time.

use std::fmt;

use kinesis_lease_core::BoxFuture;

use crate::{ReaderError, Record};

/// One event of a shard subscription.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ShardEvent {
    /// The records, in sequence order (possibly none: Kinesis sends an event every few
    /// seconds even when nothing arrived).
    pub records: Vec<Record>,
    /// Where a later subscription continues (just after this sequence number); `None` when
    /// the event does not move it.
    pub continuation: Option<String>,
    /// How far the event is behind the tip of the shard.
    pub millis_behind: Option<u64>,
    /// Set once the shard has ended (split or merged) and everything in it was sent: the
    /// shards that replaced it.
    pub shard_end: Option<Vec<String>>,
}

impl ShardEvent {
    /// An event carrying `records`, continuing after `continuation`.
    pub fn new(records: Vec<Record>, continuation: Option<String>) -> Self {
        Self {
            records,
            continuation,
            ..Self::default()
        }
    }

    /// The same event, `millis_behind` the tip.
    pub fn behind(mut self, millis_behind: u64) -> Self {
        self.millis_behind = Some(millis_behind);
        self
    }

    /// The same event, the last of an ended shard whose children are `children`.
    pub fn ending(mut self, children: Vec<String>) -> Self {
        self.shard_end = Some(children);
        self
    }
}

/// A live SubscribeToShard subscription. Events are pulled one at a time: nothing more is
/// read from it until the reader asks, so a slow handler never makes it buffer more than one
/// event. Dropping it ends the subscription.
pub trait ShardSubscription: Send + fmt::Debug {
    /// The next event; `Ok(None)` once the subscription has ended (Kinesis ends each after
    /// 5 minutes): subscribe again from the last continuation.
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<ShardEvent>, ReaderError>>;
}
