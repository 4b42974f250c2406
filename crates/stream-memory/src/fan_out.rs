//! Enhanced fan-out on [`MemoryStream`]: stream consumers and pushed shard subscriptions, so
//! users' tests (and this crate's) cover fan-out readers without AWS.
//!
//! As Kinesis does:
//! - a consumer is `CREATING` until it has been described once, then `ACTIVE`; subscribing
//!   through one that is not active is refused (`InUse`);
//! - one subscribe per second per consumer and shard (`Throttled` otherwise: LimitExceeded);
//!   a second subscription within 5 s of a successful one is refused (`InUse`), and one after
//!   that takes over: the first fails with `InUse` at its next event;
//! - a deregistered consumer is `DELETING` for a while (see [`ConsumerDeletion`]): described
//!   by name it still answers, with its ARN and status `DELETING`, and RegisterStreamConsumer
//!   of its name answers that description too (the AWS client finds it so, after
//!   ResourceInUse); once the deletion is over it is gone (`ConsumerNotFound`), and
//!   registering the name again makes a new consumer with a new ARN (AWS puts the creation
//!   time in it);
//! - a subscribe (or an event) through a consumer that is `DELETING` or gone answers
//!   ResourceNotFound, as Kinesis does, which readers cannot tell from a shard gone
//!   (`ShardNotFound`);
//! - a subscription ends after 5 minutes (tokio time, so paused clocks reach it);
//! - an event carries up to 10,000 records, the continuation sequence number and
//!   MillisBehindLatest; at the tip an empty event comes every 5 s;
//! - the last event of an ended shard carries no continuation and names its children.
//!
//! [`MemoryStream::cut_subscriptions`] drops every live connection: each subscription's next
//! event fails with `Transient`, as a reset connection does.
//! [`MemoryStream::deregister_consumer_for`] deregisters a consumer with a `DELETING` period of
//! the test's choice; [`MemoryStream::set_consumer_deletion`] sets the period of
//! `KinesisApi::deregister_consumer` (by default 5 s, as AWS takes seconds).

use std::time::Duration;

use kinesis_lease_core::BoxFuture;
use tokio::time::Instant;

use kinesis_stream_core::{
    ConsumerStatus, ReaderError, ShardEvent, ShardSubscription, StartAt, StreamConsumer,
};

use crate::consumers::{
    consumer_not_found, Consumer, ConsumerDeletion, Left, Life, TAKEOVER_AFTER,
};
use crate::op::Op;
use crate::state::{invalid, not_found, sequence_text, shard_not_found, State};
use crate::MemoryStream;

/// How long a subscription lasts, as in Kinesis.
const LIFETIME: Duration = Duration::from_secs(5 * 60);
/// How often an event comes at the tip when nothing arrives.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// The most records of one event.
const EVENT_RECORDS: usize = 10_000;
/// Subscribes allowed per consumer and shard: one a second.
const SUBSCRIBE_GAP: Duration = Duration::from_secs(1);

impl MemoryStream {
    pub(crate) fn register_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<StreamConsumer, ReaderError> {
        if name.is_empty()
            || name.len() > 128
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(invalid(
                "consumer name",
                name,
                "1 to 128 of a-z, A-Z, 0-9, `_`, `.` and `-`",
            ));
        }
        let mut state = self.state();
        self.enter(&mut state, Op::Consumers, stream)?;
        if !state.streams.contains_key(stream) {
            return Err(not_found(stream, "RegisterStreamConsumer"));
        }
        let fan_out = &mut state.fan_out;
        if let Some(consumer) = fan_out.consumer(stream, name) {
            // Registered already (or still being deleted): its description, as the AWS client
            // answers after ResourceInUse.
            return Ok(match consumer.life {
                Life::Deleting(_) => consumer.describe(name),
                Life::Creating => StreamConsumer::with_status(
                    name,
                    consumer.arn.clone(),
                    ConsumerStatus::Creating,
                ),
                Life::Active => {
                    StreamConsumer::with_status(name, consumer.arn.clone(), ConsumerStatus::Active)
                }
            });
        }
        // A new consumer: its ARN carries its creation stamp (seconds, as in AWS, made unique).
        let creation = (self.clock.now_ms() / 1_000).max(fan_out.last_creation + 1);
        fan_out.last_creation = creation;
        let arn = format!(
            "arn:aws:kinesis:us-east-1:000000000000:stream/{stream}/consumer/{name}:{creation}"
        );
        fan_out.consumers.insert(
            (stream.to_owned(), name.to_owned()),
            Consumer {
                arn: arn.clone(),
                life: Life::Creating,
            },
        );
        Ok(StreamConsumer::with_status(
            name,
            arn,
            ConsumerStatus::Creating,
        ))
    }

    pub(crate) fn describe_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<StreamConsumer, ReaderError> {
        let mut state = self.state();
        self.enter(&mut state, Op::Consumers, stream)?;
        let consumer = state
            .fan_out
            .consumer(stream, name)
            .ok_or_else(|| consumer_not_found(stream, name, "DescribeStreamConsumer"))?;
        Ok(consumer.describe(name))
    }

    pub(crate) fn deregister_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<(), ReaderError> {
        let deletion = self.state().fan_out.deletion;
        self.deregister_consumer_for(stream, name, deletion)
    }

    /// Deregisters the consumer `name` of `stream`, as DeregisterStreamConsumer does, leaving
    /// it `DELETING` for `deletion`: meanwhile it is described (and RegisterStreamConsumer of
    /// its name answers) with its ARN and status `DELETING`, and subscribes and live
    /// subscriptions through it answer ResourceNotFound (`ShardNotFound`); then it is gone,
    /// and registering the name again makes a consumer with a new ARN. Lets tests (and
    /// simulations) take the consumer away from running readers.
    ///
    /// # Errors
    ///
    /// [`ReaderError::ConsumerNotFound`] when no such consumer is registered;
    /// [`ReaderError::InUse`] when it is already being deleted.
    pub fn deregister_consumer_for(
        &self,
        stream: &str,
        name: &str,
        deletion: ConsumerDeletion,
    ) -> Result<(), ReaderError> {
        let mut state = self.state();
        let consumer = state
            .fan_out
            .consumer(stream, name)
            .ok_or_else(|| consumer_not_found(stream, name, "DeregisterStreamConsumer"))?;
        if matches!(consumer.life, Life::Deleting(_)) {
            return Err(ReaderError::InUse {
                operation: "DeregisterStreamConsumer",
                resource: consumer.arn.clone(),
            });
        }
        consumer.life = Life::Deleting(match deletion {
            ConsumerDeletion::Describes(n) => Left::Describes(n),
            ConsumerDeletion::For(deleting) => Left::Until(Instant::now() + deleting),
        });
        drop(state);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Sets how long `KinesisApi::deregister_consumer` leaves a consumer `DELETING` (by
    /// default [`ConsumerDeletion::For`] 5 s).
    pub fn set_consumer_deletion(&self, deletion: ConsumerDeletion) {
        self.state().fan_out.deletion = deletion;
    }

    /// Drops every live subscription's connection: each one's next event fails with
    /// [`ReaderError::Transient`], as after a connection reset.
    pub fn cut_subscriptions(&self) {
        let mut state = self.state();
        state.fan_out.generation += 1;
        state.fan_out.live.clear();
        state.fan_out.last_subscribe.clear();
        drop(state);
        self.changed.notify_waiters();
    }

    /// Live subscriptions now.
    pub fn live_subscriptions(&self) -> usize {
        self.state().fan_out.live.len()
    }

    pub(crate) fn subscribe_now(
        &self,
        stream: &str,
        arn: &str,
        shard: &str,
        position: &StartAt,
    ) -> Result<Box<dyn ShardSubscription>, ReaderError> {
        let resource = format!("{stream}/{shard}");
        let mut state = self.state();
        self.enter(&mut state, Op::SubscribeToShard, &resource)?;
        let Some(consumer) = state.fan_out.consumer_by_arn(arn) else {
            // ResourceNotFoundException, as for a shard gone.
            return Err(shard_not_found(stream, shard, "SubscribeToShard"));
        };
        if !matches!(consumer.life, Life::Active)
            || !arn.contains(&format!(":stream/{stream}/consumer/"))
        {
            return Err(ReaderError::InUse {
                operation: "SubscribeToShard",
                resource: arn.to_owned(),
            });
        }
        let s = state
            .streams
            .get(stream)
            .ok_or_else(|| not_found(stream, "SubscribeToShard"))?;
        let sh = s
            .shards
            .iter()
            .find(|sh| sh.id == shard)
            .ok_or_else(|| shard_not_found(stream, shard, "SubscribeToShard"))?;
        let next = sh.index_at(stream, "SubscribeToShard", position)?;
        // Where a later subscription continues before any event: just after the record before.
        let continuation = next
            .checked_sub(1)
            .map(|i| sequence_text(sh.records[i].sequence));
        let key = (arn.to_owned(), shard.to_owned());
        let now = Instant::now();
        let since = state
            .fan_out
            .last_subscribe
            .get(&key)
            .map(|at| now.duration_since(*at));
        if since.is_some_and(|since| since < SUBSCRIBE_GAP) {
            return Err(ReaderError::Throttled {
                operation: "SubscribeToShard",
                resource,
            });
        }
        // A live one subscribed less than 5 s ago holds the shard; an older one is taken over.
        if state.fan_out.live.contains_key(&key) && since.is_some_and(|s| s < TAKEOVER_AFTER) {
            return Err(ReaderError::InUse {
                operation: "SubscribeToShard",
                resource,
            });
        }
        state.fan_out.last_subscribe.insert(key.clone(), now);
        let id = state.fan_out.next_id;
        state.fan_out.next_id += 1;
        state.fan_out.live.insert(key, id);
        let generation = state.fan_out.generation;
        Ok(Box::new(MemorySubscription {
            kinesis: self.clone(),
            stream: stream.to_owned(),
            shard: shard.to_owned(),
            arn: arn.to_owned(),
            next,
            continuation,
            ends_at: now + LIFETIME,
            generation,
            id,
            done: false,
        }))
    }
}

/// One live subscription of a [`MemoryStream`] shard.
#[derive(Debug)]
struct MemorySubscription {
    kinesis: MemoryStream,
    stream: String,
    shard: String,
    arn: String,
    /// The index of the next record to push.
    next: usize,
    /// The sequence number the last event continued after.
    continuation: Option<String>,
    ends_at: Instant,
    generation: u64,
    /// This subscription's id: another one holding the shard took it over.
    id: u64,
    done: bool,
}

impl Drop for MemorySubscription {
    fn drop(&mut self) {
        let mut state = self.kinesis.state();
        let key = (self.arn.clone(), self.shard.clone());
        if state.fan_out.generation == self.generation
            && state.fan_out.live.get(&key) == Some(&self.id)
        {
            state.fan_out.live.remove(&key);
        }
    }
}

impl MemorySubscription {
    /// The next event if one is ready now, or `None` to wait.
    fn ready(&mut self, state: &mut State) -> Result<Option<ShardEvent>, ReaderError> {
        let resource = format!("{}/{}", self.stream, self.shard);
        if state.fan_out.generation != self.generation {
            self.done = true;
            return Err(ReaderError::Transient {
                operation: "SubscribeToShard",
                resource,
                source: "connection reset (injected)".into(),
            });
        }
        if state.fan_out.consumer_by_arn(&self.arn).is_none() {
            // Deregistered (being deleted or gone): ResourceNotFoundException, as for a shard
            // gone.
            self.done = true;
            return Err(shard_not_found(
                &self.stream,
                &self.shard,
                "SubscribeToShard",
            ));
        }
        if state
            .fan_out
            .live
            .get(&(self.arn.clone(), self.shard.clone()))
            != Some(&self.id)
        {
            // Another subscription took the shard over.
            self.done = true;
            return Err(ReaderError::InUse {
                operation: "SubscribeToShard",
                resource,
            });
        }
        let s = state
            .streams
            .get(&self.stream)
            .ok_or_else(|| not_found(&self.stream, "SubscribeToShard"))?;
        let sh = s
            .shards
            .iter()
            .find(|sh| sh.id == self.shard)
            .ok_or_else(|| shard_not_found(&self.stream, &self.shard, "SubscribeToShard"))?;
        let len = sh.records.len();
        if self.next >= len && sh.ending.is_none() {
            return Ok(None);
        }
        let end = (self.next + EVENT_RECORDS).min(len);
        let records: Vec<_> = (self.next..end).map(|i| sh.record(i)).collect();
        if let Some(last) = records.last() {
            self.continuation = Some(last.sequence.number().to_owned());
        }
        self.next = end;
        let behind = sh.millis_behind(end, self.kinesis.clock.now_ms());
        if end == len && sh.ending.is_some() {
            self.done = true;
            let children = s.children_of(&self.shard);
            return Ok(Some(
                ShardEvent::new(records, None).behind(0).ending(children),
            ));
        }
        Ok(Some(
            ShardEvent::new(records, self.continuation.clone()).behind(behind),
        ))
    }
}

impl ShardSubscription for MemorySubscription {
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<ShardEvent>, ReaderError>> {
        Box::pin(async move {
            if self.done {
                return Ok(None);
            }
            let heartbeat = (Instant::now() + HEARTBEAT).min(self.ends_at);
            loop {
                if Instant::now() >= self.ends_at {
                    self.done = true;
                    return Ok(None);
                }
                let changed = self.kinesis.changed.clone();
                let notified = changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let kinesis = self.kinesis.clone();
                    let mut state = kinesis.state();
                    if let Some(event) = self.ready(&mut state)? {
                        return Ok(Some(event));
                    }
                }
                // The heartbeat first: it is due once, while puts to any shard of the stream
                // may notify at every turn of this loop.
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(heartbeat) => {
                        if Instant::now() >= self.ends_at {
                            self.done = true;
                            return Ok(None);
                        }
                        return Ok(Some(
                            ShardEvent::new(Vec::new(), self.continuation.clone()).behind(0),
                        ));
                    }
                    () = notified => {}
                }
            }
        })
    }
}
