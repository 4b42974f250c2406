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
//!   is described first. Unless it is `ACTIVE` under the reader's ARN (after a
//!   DeregisterStreamConsumer AWS describes it, same ARN, as `DELETING` for a while), the
//!   reader waits for it and registers it again, one reader of the subscription at a time,
//!   retrying with backoff; the new ARN is shared, so readers started later subscribe with it
//!   at once. A consumer not in place never ends a shard. Only with the consumer in place does
//!   the reader ask ListShards, as polling does, and even then a shard ends only if ListShards
//!   no longer has it (aged out) or the reader delivered its ending sequence number;
//! - the last event of an ended shard has no continuation and names the children: the shard
//!   ends as with polling. That, or one of the two proofs above, is the only way it ends.
//!
//! The consumer itself is registered by the coordinator before it takes any shard
//! (`register_consumer`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use kinesis_lease_core::{ErrorChain, SequenceNumber};
use tokio::time::Instant;

use kinesis_lease_core::Backoff;
use kinesis_stream_core::{ConsumerStatus, ReaderError, StartAt};

use crate::control::KeeperCmd;
use crate::read_context::ReadContext;
use crate::reader::{Delivered, Reader, Stop};
use crate::start::StartPlan;

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
        let mut at = Delivered::new(start, reopen, skip, self.taken_at);
        let kinesis = self.context.kinesis.clone();
        let stream = self.context.config.stream.clone();
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
            self.refusal.opening(&position);
            let subscribed = self
                .or_stop(kinesis.subscribe_to_shard(&stream, &arn, &shard, &position))
                .await;
            let mut subscription = match subscribed {
                Err(Stop::Stopped) => return,
                Ok(Ok(subscription)) => {
                    at.first.opened();
                    subscription
                }
                Ok(Err(error)) => match self
                    .subscription_failed(error, &mut arn, &mut backoff, at.last_delivered.clone())
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
                        let last = at.last_delivered.clone();
                        match self
                            .subscription_failed(error, &mut arn, &mut backoff, last)
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
                self.read_succeeded();
                if let Some(behind) = event.millis_behind {
                    self.millis_behind.store(behind, Ordering::Relaxed);
                    self.metrics.behind(behind);
                }
                at.first
                    .page(event.records.len(), event.millis_behind.unwrap_or(0) == 0);
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
    /// subscription: the consumer may be what is gone (deregistered, still `DELETING`, or
    /// registered again with a new ARN). Unless the consumer is `ACTIVE` under this reader's
    /// ARN, the reader waits for it (registering it again, see `consumer_again`) and
    /// subscribes again; never does it take the error for the shard's end then. Only with the
    /// consumer in place is the error the polling reader's (`Reader::failed`), which still
    /// ends the shard only if ListShards no longer has it or it was read to its end.
    async fn subscription_failed(
        &mut self,
        error: ReaderError,
        arn: &mut String,
        backoff: &mut Backoff,
        last_delivered: Option<SequenceNumber>,
    ) -> Next {
        if let ReaderError::ShardNotFound { .. } = error {
            match self.consumer_in_place(arn, backoff).await {
                Err(Stop::Stopped) => return Next::Stop,
                Ok(false) => return Next::Resubscribe,
                Ok(true) => {}
            }
        }
        match self.failed(error, backoff, last_delivered).await {
            Ok(()) => Next::Resubscribe,
            Err(Stop::Stopped) => Next::Stop,
        }
    }

    /// After ResourceNotFound on a subscription: `Ok(true)` if the consumer is `ACTIVE` under
    /// `arn` (so the shard is what Kinesis did not find); `Ok(false)` once the reader has the
    /// consumer's current ARN in `arn` (another reader's re-registration, another instance's,
    /// or its own), or after a pause when the consumer could not be described: subscribe again.
    async fn consumer_in_place(
        &mut self,
        arn: &mut String,
        backoff: &mut Backoff,
    ) -> Result<bool, Stop> {
        let shared = self.context.clone();
        // Another reader of this subscription registered it again meanwhile.
        if let Some(known) = shared.consumer_arn.get().filter(|known| known != arn) {
            tracing::info!(arn = %known, "the fan-out consumer was registered again; subscribing with its new ARN");
            *arn = known;
            return Ok(false);
        }
        let name = shared.config.fan_out.clone().unwrap_or_default();
        let described = self
            .or_stop(
                shared
                    .kinesis
                    .describe_consumer(&shared.config.stream, &name),
            )
            .await?;
        match described {
            Ok(consumer) if consumer.status == ConsumerStatus::Active && consumer.arn == *arn => {
                Ok(true)
            }
            // Registered again by another instance: use it.
            Ok(consumer) if consumer.status == ConsumerStatus::Active => {
                tracing::info!(consumer = %name, arn = %consumer.arn, "the fan-out consumer was registered again; subscribing with its new ARN");
                shared.consumer_arn.replace(arn, consumer.arn.clone());
                *arn = consumer.arn;
                Ok(false)
            }
            // Being deleted, gone, or being created under a new ARN: wait for it.
            Ok(consumer) => {
                tracing::warn!(consumer = %name, status = ?consumer.status, arn = %consumer.arn, "the fan-out consumer is not ACTIVE; waiting for it and registering it again");
                self.consumer_again(arn).await.map(|()| false)
            }
            Err(ReaderError::ConsumerNotFound { .. }) => {
                tracing::warn!(consumer = %name, "the fan-out consumer is gone; registering it again");
                self.consumer_again(arn).await.map(|()| false)
            }
            Err(error @ ReaderError::StreamNotFound { .. }) => {
                self.failed(error, backoff, None).await.map(|()| false)
            }
            // Cannot tell now: never conclude that the shard ended; try again later.
            Err(other) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %ErrorChain(&other), ?delay, "subscription not found and the consumer could not be described; retrying");
                self.pause(delay).await.map(|()| false)
            }
        }
    }

    /// Registers the consumer again (waiting while it is `DELETING`, then until the new one is
    /// `ACTIVE`) and puts its ARN in `arn` and in the subscription's shared ARN, so readers
    /// started later subscribe with it at once. One reader of the subscription does it at a
    /// time; the others wait and take its ARN. A registration that fails is retried with
    /// backoff for as long as the reader runs; only a permanent error (the stream gone, a
    /// refusal such as access denied) fails the subscription.
    async fn consumer_again(&mut self, arn: &mut String) -> Result<(), Stop> {
        let shared = self.context.clone();
        let _one_at_a_time = self.or_stop(shared.consumer_arn.renewing()).await?;
        if let Some(known) = shared.consumer_arn.get().filter(|known| known != arn) {
            tracing::info!(arn = %known, "the fan-out consumer was registered again; subscribing with its new ARN");
            *arn = known;
            return Ok(());
        }
        let name = shared.config.fan_out.clone().unwrap_or_default();
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            match self.or_stop(register_consumer(&shared, &name)).await? {
                Ok(new) => {
                    tracing::info!(consumer = %name, arn = %new, "fan-out consumer registered again");
                    shared.consumer_arn.set(new.clone());
                    *arn = new;
                    return Ok(());
                }
                Err(error) if permanent(&error) => {
                    shared.fail(error);
                    let _ = self.keeper.send(KeeperCmd::Release).await;
                    return Err(Stop::Stopped);
                }
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %ErrorChain(&error), ?delay, consumer = %name, "registering the fan-out consumer again failed; retrying");
                    self.pause(delay).await?;
                }
            }
        }
    }
}

/// Errors of registering a consumer that no retry can mend: they fail the subscription.
fn permanent(error: &ReaderError) -> bool {
    matches!(
        error,
        ReaderError::StreamNotFound { .. }
            | ReaderError::Refused { .. }
            | ReaderError::Invalid { .. }
    )
}

/// How long the coordinator waits for a new consumer to become `ACTIVE`.
const ACTIVE_WITHIN: Duration = Duration::from_secs(180);

/// Registers the subscription's fan-out consumer `name` (or finds the one already registered:
/// other instances share it) and waits until it is `ACTIVE`, with bounded backoff. Returns its
/// ARN.
///
/// # Errors
///
/// A [`ReaderError`] no retry mends (the stream is gone, Kinesis refused), or `InUse` when the
/// consumer is not `ACTIVE` within 180 s.
pub async fn register_consumer(shared: &ReadContext, name: &str) -> Result<String, ReaderError> {
    let stream = shared.config.stream.as_str();
    let kinesis = shared.kinesis.clone();
    let deadline = Instant::now() + ACTIVE_WITHIN;
    // Described at most every 2 s: one reader per instance does it (`consumer_again`), and
    // every second of the wait past the consumer's `ACTIVE` is a second no shard is read.
    let fresh = || Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    let mut backoff = fresh();
    let late = || ReaderError::InUse {
        operation: "DescribeStreamConsumer",
        resource: format!("{stream}/consumer/{name} (not ACTIVE within {ACTIVE_WITHIN:?})"),
    };
    // Register (or find), then describe until ACTIVE. One still `DELETING` (registering its
    // name finds it so) is described until it is gone, then registered again: a new consumer,
    // with a new ARN.
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
                // Gone at last after `DELETING`: register the new one, and wait for it from
                // short delays again. (Not found otherwise, say just after registering on a
                // lagging endpoint: register again on the same backoff, never in a tight loop.)
                Err(ReaderError::ConsumerNotFound { .. }) => {
                    if consumer.status == ConsumerStatus::Deleting {
                        backoff = fresh();
                    }
                    continue 'register;
                }
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
