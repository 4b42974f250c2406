//! Reading a shard by enhanced fan-out: SubscribeToShard instead of GetRecords.
//!
//! Everything after the read is the polling reader's: the same de-aggregation, skips, channel,
//! settlement, shard end and stop signals (`Reader::deliver`, `Reader::shard_ended`). What
//! differs is where records come from:
//!
//! - the first subscription opens where a polling reader would open its first iterator (the
//!   checkpoint, or the pinned start); later ones continue just after the last event's
//!   continuation sequence number, or, before any event moved it, where polling would reopen;
//! - events are pulled one at a time: the next is asked for only once the last one's records
//!   are all in the channel, so a slow handler never makes a reader hold more than one event;
//! - a subscription that ends (Kinesis ends each after 5 minutes) is renewed at once, one that
//!   fails (a dropped connection, `InUse` within 5 s of the previous subscribe, throttling)
//!   after the polling reader's backoff; at most one subscribe a second per shard, the Kinesis
//!   limit; one silent for 30 s (Kinesis sends an event at least every 5 s) is taken for a dead
//!   connection and renewed;
//! - ResourceNotFound on a subscription means the shard, or the consumer, is gone: the consumer
//!   is described first, and registered again (with its new ARN) if it is gone; only with the
//!   consumer in place does the reader ask ListShards whether the shard ended, as polling does;
//! - the last event of an ended shard has no continuation: the shard ends as with polling.
//!
//! The consumer itself is registered by the coordinator before it takes any shard
//! (`register_consumer`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use kinesis_lease_core::{ErrorChain, SequenceNumber};
use tokio::time::Instant;

use crate::keeper::KeeperCmd;
use crate::reader::{Delivered, Reader, Stop};
use crate::shared::Shared;
use crate::start::StartPlan;
use crate::{ReaderError, StartAt};
use kinesis_lease_core::Backoff;

/// Kinesis allows one SubscribeToShard a second per consumer and shard.
const SUBSCRIBE_GAP: Duration = Duration::from_secs(1);
/// A subscription with no event for this long is dead (Kinesis sends one every 5 s or less).
const EVENT_SILENCE: Duration = Duration::from_secs(30);

/// What to do about a failed subscribe or event.
enum Next {
    /// Subscribe again (after the pause the error called for).
    Resubscribe,
    /// The reader must stop.
    Stop,
}

impl Reader {
    pub(crate) async fn run_fan_out(mut self, plan: StartPlan, mut arn: String) {
        let StartPlan {
            open: start,
            reopen,
            skip,
            ..
        } = plan;
        let mut at = Delivered::new(start, reopen, skip);
        let kinesis = self.shared.kinesis.clone();
        let stream = self.shared.config.stream.clone();
        let shard = self.shard.clone();
        // Just after the last event's continuation, once an event moved it.
        let mut continuation: Option<SequenceNumber> = None;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut last_subscribe: Option<Instant> = None;
        loop {
            let position = match &continuation {
                Some(after) => StartAt::AfterSequence(after.clone()),
                None => at.resume(),
            };
            if let Some(last) = last_subscribe {
                let wait = (last + SUBSCRIBE_GAP).saturating_duration_since(Instant::now());
                if !wait.is_zero() && self.pause(wait).await.is_err() {
                    return;
                }
            }
            last_subscribe = Some(Instant::now());
            let subscribed = self
                .or_stop(kinesis.subscribe_to_shard(&stream, &arn, &shard, &position))
                .await;
            let mut subscription = match subscribed {
                Err(Stop::Stopped) => return,
                Ok(Ok(subscription)) => subscription,
                Ok(Err(error)) => match self
                    .subscription_failed(error, &mut arn, &mut backoff)
                    .await
                {
                    Next::Resubscribe => continue,
                    Next::Stop => return,
                },
            };
            tracing::debug!(?position, "subscribed to the shard");
            loop {
                let next = tokio::time::timeout(EVENT_SILENCE, subscription.next_event());
                let event = match self.or_stop(next).await {
                    Err(Stop::Stopped) => return,
                    Ok(Ok(Ok(Some(event)))) => event,
                    // The subscription's 5 minutes are up: subscribe again.
                    Ok(Ok(Ok(None))) => break,
                    Ok(Ok(Err(error))) => {
                        drop(subscription);
                        match self
                            .subscription_failed(error, &mut arn, &mut backoff)
                            .await
                        {
                            Next::Resubscribe => break,
                            Next::Stop => return,
                        }
                    }
                    Ok(Err(_silent)) => {
                        tracing::warn!(silent = ?EVENT_SILENCE, "no event on the subscription; taking it for a dead connection and subscribing again");
                        break;
                    }
                };
                backoff.reset();
                if let Some(behind) = event.millis_behind {
                    self.millis_behind.store(behind, Ordering::Relaxed);
                    self.metrics.behind(behind);
                }
                if self.deliver(event.records, &mut at).await.is_err() {
                    return;
                }
                if let Some(after) = event.continuation {
                    match SequenceNumber::new(&after, None) {
                        Ok(after) => continuation = Some(after),
                        Err(_) => {
                            tracing::warn!(%after, "ignoring a continuation that is not a sequence number")
                        }
                    }
                }
                if let Some(children) = event.shard_end {
                    drop(subscription);
                    return self.shard_ended(children).await;
                }
            }
        }
    }

    /// A subscribe or an event failed. ResourceNotFound (`ShardNotFound`) is ambiguous on a
    /// subscription: the consumer may be what is gone (deregistered, or registered again with
    /// a new ARN). It is described first; gone, it is registered again and the reader goes on
    /// with its new ARN. Only with the consumer in place is the error the polling reader's.
    async fn subscription_failed(
        &mut self,
        error: ReaderError,
        arn: &mut String,
        backoff: &mut Backoff,
    ) -> Next {
        if let ReaderError::ShardNotFound { .. } = error {
            let shared = self.shared.clone();
            let name = shared.config.fan_out.clone().unwrap_or_default();
            let described = self
                .or_stop(
                    shared
                        .kinesis
                        .describe_consumer(&shared.config.stream, &name),
                )
                .await;
            match described {
                Err(Stop::Stopped) => return Next::Stop,
                Ok(Ok(consumer)) if consumer.arn == *arn => {}
                Ok(Ok(_)) | Ok(Err(ReaderError::ConsumerNotFound { .. })) => {
                    tracing::warn!(consumer = %name, "the fan-out consumer is gone or was replaced; registering it again");
                    let registered = self.or_stop(register_consumer(&shared, &name)).await;
                    return match registered {
                        Err(Stop::Stopped) => Next::Stop,
                        Ok(Ok(new)) => {
                            *arn = new;
                            Next::Resubscribe
                        }
                        Ok(Err(error)) => {
                            shared.fail(error);
                            let _ = self.keeper.send(KeeperCmd::Release).await;
                            Next::Stop
                        }
                    };
                }
                // Cannot tell now: never conclude that the shard ended; try again later.
                Ok(Err(other)) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %ErrorChain(&other), ?delay, "subscription not found and the consumer could not be described; retrying");
                    return match self.pause(delay).await {
                        Ok(()) => Next::Resubscribe,
                        Err(Stop::Stopped) => Next::Stop,
                    };
                }
            }
        }
        match self.failed(error, backoff).await {
            Ok(()) => Next::Resubscribe,
            Err(Stop::Stopped) => Next::Stop,
        }
    }
}

/// How long the coordinator waits for a new consumer to become `ACTIVE`.
const ACTIVE_WITHIN: Duration = Duration::from_secs(180);

/// Registers the subscription's fan-out consumer `name` (or finds the one already registered:
/// other instances share it) and waits until it is `ACTIVE`, with bounded backoff. Returns its
/// ARN.
pub(crate) async fn register_consumer(shared: &Shared, name: &str) -> Result<String, ReaderError> {
    let stream = shared.config.stream.as_str();
    let kinesis = shared.kinesis.clone();
    let deadline = Instant::now() + ACTIVE_WITHIN;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let late = || ReaderError::InUse {
        operation: "DescribeStreamConsumer",
        resource: format!("{stream}/consumer/{name} (not ACTIVE within {ACTIVE_WITHIN:?})"),
    };
    // Register (or find), then describe until ACTIVE; a consumer that vanishes meanwhile (it
    // was being deleted) is registered again.
    'register: loop {
        if Instant::now() >= deadline {
            return Err(late());
        }
        let mut consumer = match kinesis.register_consumer(stream, name).await {
            Ok(consumer) => consumer,
            Err(error @ ReaderError::ConsumerNotFound { .. }) => {
                tracing::warn!(error = %ErrorChain(&error), consumer = name, "the fan-out consumer is being deleted; registering it again");
                tokio::time::sleep(backoff.next_delay()).await;
                continue 'register;
            }
            Err(error) if error.is_retryable() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %ErrorChain(&error), ?delay, consumer = name, "registering the fan-out consumer failed; retrying");
                tokio::time::sleep(delay).await;
                continue 'register;
            }
            Err(error) => return Err(error),
        };
        while !consumer.active {
            if Instant::now() >= deadline {
                return Err(late());
            }
            tokio::time::sleep(backoff.next_delay()).await;
            match kinesis.describe_consumer(stream, name).await {
                Ok(described) => consumer = described,
                Err(ReaderError::ConsumerNotFound { .. }) => continue 'register,
                Err(error) if error.is_retryable() => {
                    tracing::warn!(error = %ErrorChain(&error), consumer = name, "describing the fan-out consumer failed; retrying");
                }
                Err(error) => return Err(error),
            }
        }
        tracing::info!(consumer = name, arn = %consumer.arn, "fan-out consumer active");
        return Ok(consumer.arn);
    }
}
