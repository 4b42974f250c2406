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
//!   fails (a dropped connection, `InUse` while the previous owner's subscription lingers,
//!   throttling) after the polling reader's backoff; at most one subscribe a second per shard,
//!   the Kinesis limit;
//! - the last event of an ended shard has no continuation: the shard ends as with polling.
//!
//! The consumer itself is registered by the coordinator before it takes any shard
//! (`register_consumer`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use kinesis_lease_core::SequenceNumber;
use tokio::time::Instant;

use crate::reader::{Delivered, Reader, Stop};
use crate::shared::{Backoff, Shared};
use crate::start::StartPlan;
use crate::{Position, ReaderError};

/// Kinesis allows one SubscribeToShard a second per consumer and shard.
const SUBSCRIBE_GAP: Duration = Duration::from_secs(1);

impl Reader {
    pub(crate) async fn run_fan_out(mut self, plan: StartPlan, arn: String) {
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
                Some(after) => Position::AfterSequence(after.clone()),
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
                Ok(Err(error)) => {
                    if self.failed(error, &mut backoff).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            tracing::debug!(?position, "subscribed to the shard");
            loop {
                let event = match self.or_stop(subscription.next_event()).await {
                    Err(Stop::Stopped) => return,
                    Ok(Ok(Some(event))) => event,
                    // The subscription's 5 minutes are up: subscribe again.
                    Ok(Ok(None)) => break,
                    Ok(Err(error)) => {
                        drop(subscription);
                        if self.failed(error, &mut backoff).await.is_err() {
                            return;
                        }
                        break;
                    }
                };
                backoff.reset();
                self.millis_behind
                    .store(event.millis_behind.unwrap_or(0), Ordering::Relaxed);
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
                    return self.shard_ended(children).await;
                }
            }
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
    let mut consumer = loop {
        match kinesis.register_consumer(stream, name).await {
            Ok(consumer) => break consumer,
            Err(error) if error.is_retryable() && Instant::now() < deadline => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %error, ?delay, consumer = name, "registering the fan-out consumer failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(error) => return Err(error),
        }
    };
    while !consumer.active {
        if Instant::now() >= deadline {
            return Err(ReaderError::InUse {
                operation: "DescribeStreamConsumer",
                resource: format!("{stream}/consumer/{name} (not ACTIVE within {ACTIVE_WITHIN:?})"),
            });
        }
        tokio::time::sleep(backoff.next_delay()).await;
        match kinesis.describe_consumer(stream, name).await {
            Ok(described) => consumer = described,
            Err(error) if error.is_retryable() => {
                tracing::warn!(error = %error, consumer = name, "describing the fan-out consumer failed; retrying");
            }
            Err(error) => return Err(error),
        }
    }
    tracing::info!(consumer = name, arn = %consumer.arn, "fan-out consumer active");
    Ok(consumer.arn)
}
