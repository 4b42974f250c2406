//! Subscriptions: how one stream's records reach a handler or a stream of deliveries.

use std::future::Future;
use std::time::Duration;

use kinesis_dispatch::{
    channel, channel_for, BatchFailure, Delivery, DeliveryReceiver, DeliverySender, DeliveryStream,
    DispatchConfig, Handler, HandlerError, RetryPolicy, Workers, DEFAULT_CAPACITY,
};
use kinesis_fleet::Hooks;
use kinesis_stream_core::StartAt;

use crate::registered::Subscription;
use crate::{Broker, BrokerError};

impl Broker {
    /// Starts a subscription to `stream`; finish it with `handle(..)` or `stream()`.
    pub fn subscribe(&mut self, stream: impl Into<String>) -> SubscriptionBuilder<'_> {
        SubscriptionBuilder::new(self, stream.into())
    }
}

/// Configures a subscription; finish with [`handle`](Self::handle), [`batch`](Self::batch) or
/// [`stream`](Self::stream).
#[derive(Debug)]
#[must_use = "a subscription does nothing until `handle(..)` or `stream()`"]
pub struct SubscriptionBuilder<'b> {
    broker: &'b mut Broker,
    stream: String,
    start_at: StartAt,
    reposition: Option<StartAt>,
    reposition_marker: Option<String>,
    capacity: usize,
    records_per_call: Option<usize>,
    max_unsettled: usize,
    fan_out: Option<String>,
    hooks: Hooks,
    quiet_idle: bool,
    /// This instance's capacity for the stream, relative to the default 1.0.
    instance_capacity: f64,
    balance_by_load: bool,
    #[cfg(feature = "kcl-import")]
    kcl_import: Option<kinesis_kcl_import::KclImport>,
    dispatch: DispatchConfig,
}

impl<'b> SubscriptionBuilder<'b> {
    pub(crate) fn new(broker: &'b mut Broker, stream: String) -> Self {
        Self {
            broker,
            stream,
            start_at: StartAt::Latest,
            reposition: None,
            reposition_marker: None,
            capacity: DEFAULT_CAPACITY,
            records_per_call: None,
            max_unsettled: 10_000,
            fan_out: None,
            hooks: Hooks::new(),
            quiet_idle: false,
            instance_capacity: 1.0,
            balance_by_load: false,
            #[cfg(feature = "kcl-import")]
            kcl_import: None,
            dispatch: DispatchConfig::default(),
        }
    }

    /// Imports a Java KCL application's checkpoints of this stream at `start()`, before the
    /// first take (feature `kcl-import`): every shard resumes just after the last record the
    /// KCL processed, inside a KPL aggregate too. `start()` first watches the KCL's lease
    /// counters for its failover time (10 s by default, [`KclImport::failover_time`]) and
    /// fails with [`BrokerError::KclImport`] while KCL workers still renew. Rows already at
    /// or past the KCL's checkpoints are left alone, so once imported, later starts read the
    /// KCL table once and write nothing (and do not wait). See docs/migrating-from-kcl.md.
    ///
    /// [`KclImport`]: crate::KclImport
    /// [`KclImport::failover_time`]: crate::KclImport::failover_time
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, KclImport, TableSetup};
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    /// let mut broker = Broker::builder()
    ///     .sdk_config(&aws)
    ///     .dynamo_lease_table(DynamoLeaseStore::new(&aws, "orders-leases"), TableSetup::CreateIfMissing)
    ///     .build()?;
    /// broker
    ///     .subscribe("orders")
    ///     .import_kcl(KclImport::dynamo(&aws, "orders-kcl-app"))
    ///     .handle(|order: Delivery| async move { Ok::<(), std::io::Error>(()) })?;
    /// broker.start().await?.run_until_signal().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "kcl-import")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kcl-import")))]
    pub fn import_kcl(mut self, import: kinesis_kcl_import::KclImport) -> Self {
        self.kcl_import = Some(import);
        self
    }

    /// Where the subscription begins (default: the tip, `LATEST`): `TrimHorizon`, `Latest` or
    /// `AtTimestamp`. It applies once: the first take of each row pins a real position into
    /// it (a `LATEST` start as the time just before the first reader opened, less 30 s of
    /// slack for clock differences), so every later owner resumes from there. At `LATEST`,
    /// shards already closed when the subscription begins are skipped and their open children
    /// start at the tip. Never applies over a checkpoint; see [`reposition`](Self::reposition).
    pub fn start_at(mut self, position: StartAt) -> Self {
        self.start_at = position;
        self
    }

    /// Moves every shard to `position` over its stored checkpoint, once per subscription: the
    /// take that applies it writes a marker (the position's name) into the row, and a row with
    /// the marker is never repositioned again, whichever instance takes it later. Leaving it
    /// in the configuration across deploys is harmless. Logged at `warn`.
    pub fn reposition(mut self, position: StartAt) -> Self {
        self.reposition = Some(position);
        self
    }

    /// As [`reposition`](Self::reposition), under a marker of your own: use a new marker to
    /// reposition again to a position used before (say, a second replay from
    /// `TRIM_HORIZON`).
    pub fn reposition_as(mut self, marker: impl Into<String>, position: StartAt) -> Self {
        self.reposition = Some(position);
        self.reposition_marker = Some(marker.into());
        self
    }

    /// Up to `n` handlers at once, in no particular order; add [`by_key`](Self::by_key) (before
    /// or after: the order of the calls does not matter) for `n` lanes that keep each
    /// partition key in order.
    pub fn workers(mut self, n: usize) -> Self {
        self.dispatch.workers = match self.dispatch.workers {
            Workers::ByKey(_) => Workers::ByKey(n),
            Workers::Serial | Workers::Unordered(_) => Workers::Unordered(n),
        };
        self
    }

    /// Makes [`workers`](Self::workers)`(n)` n lanes by partition key: records of one key are
    /// handled one at a time, in order, keys spread over lanes. Alone, one lane.
    pub fn by_key(mut self) -> Self {
        self.dispatch.workers = match self.dispatch.workers {
            Workers::Unordered(n) | Workers::ByKey(n) => Workers::ByKey(n),
            Workers::Serial => Workers::ByKey(1),
        };
        self
    }

    /// What happens when a handler fails (default: retry forever, the failing record parked
    /// between attempts, holding back only its key or shard; docs/lanes.md).
    ///
    /// # Examples
    ///
    /// A dead-letter stream: a record still failing after five attempts, or failing for good
    /// ([`Permanent`](crate::Permanent), a payload that does not parse) at once, is put to
    /// another stream; the callback's `Ok` settles it, and a failed put leaves it unsettled
    /// (read again later: nothing is lost).
    ///
    /// ```
    /// use kinesis_broker::testing::MemoryStream;
    /// use kinesis_broker::{Broker, Delivery, Permanent, Publisher, RetryPolicy};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let kinesis = MemoryStream::new();
    /// kinesis.create_stream("orders", 1)?;
    /// kinesis.create_stream("orders-dead-letter", 1)?;
    /// let dead_letters = Publisher::new(kinesis.clone(), "orders-dead-letter");
    /// let mut broker = Broker::builder().kinesis(kinesis).build()?;
    /// let policy = RetryPolicy::default()
    ///     .max_attempts(5)
    ///     .then_dead_letter(move |d: Delivery, _error| {
    ///         let dead_letters = dead_letters.clone();
    ///         async move { dead_letters.put(d.partition_key(), d.payload().clone()).await.map(|_| ()) }
    ///     });
    /// broker.subscribe("orders").retry(policy).handle(|d: Delivery| async move {
    ///     if d.payload().is_empty() {
    ///         return Err(Permanent::new("an empty order").into());
    ///     }
    ///     Ok::<(), kinesis_broker::HandlerError>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.dispatch.retry = policy;
        self
    }

    /// The shared channel's capacity (64 deliveries). Under `by_key` the channel is made of the
    /// lanes themselves instead, each of [`lane_capacity`](Self::lane_capacity).
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Each lane's queue under `by_key` (8 deliveries): readers send each record straight into
    /// its key's lane, so at most lanes x this many records wait for handlers.
    pub fn lane_capacity(mut self, capacity: usize) -> Self {
        self.dispatch.lane_capacity = capacity;
        self
    }

    /// The most records of one shard read and not yet settled, counted from its oldest
    /// unsettled record (default 10,000): a record that keeps failing holds its shard's
    /// checkpoint, and once that many records wait behind it the shard (only that one) stops
    /// reading until it settles. This bounds what a poisoned shard holds in memory. 0 is taken
    /// as 1.
    pub fn max_unsettled(mut self, records: usize) -> Self {
        self.max_unsettled = records.max(1);
        self
    }

    /// Records asked for per GetRecords call (default 1,000; a batch handler's size between
    /// 1,000 and 10,000).
    pub fn records_per_call(mut self, n: usize) -> Self {
        self.records_per_call = Some(n.clamp(1, 10_000));
        self
    }

    /// Reads by enhanced fan-out through the stream consumer `consumer` instead of polling:
    /// each shard is pushed to this subscription at its own 2 MB/s, about 70 ms after it was
    /// put. The consumer is registered if it does not exist (or reused: every instance of the
    /// service names the same one) and is never deregistered by the library; see
    /// `docs/operations.md` for its IAM actions and cost. Leases, checkpoints, hand-overs and
    /// KPL de-aggregation work as with polling.
    pub fn fan_out(mut self, consumer: impl Into<String>) -> Self {
        self.fan_out = Some(consumer.into());
        self
    }

    /// Code to run when a shard is taken, before its final checkpoint (hand-over, shutdown,
    /// shard end), when its lease is lost and when it has ended; each call bounded (5 s by
    /// default). See [`Hooks`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_broker::testing::MemoryStream;
    /// use kinesis_broker::{Broker, Delivery, Hooks, Release};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let kinesis = MemoryStream::new();
    /// kinesis.create_stream("orders", 2)?;
    /// let mut broker = Broker::builder().kinesis(kinesis).build()?;
    /// broker
    ///     .subscribe("orders")
    ///     .hooks(
    ///         Hooks::new()
    ///             .on_taken(|shard| async move { println!("took {}", shard.shard) })
    ///             .before_final_checkpoint(|shard, why: Release| async move {
    ///                 println!("flush {} ({why:?})", shard.shard)
    ///             }),
    ///     )
    ///     .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })?;
    /// broker.start().await?.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Idle shards that cost nothing (off by default): a held lease row is written only when
    /// its checkpoint moved, when it is taken, handed over, released or ended, and when another
    /// party wrote it (an operator's `release` or `reset`, a hand-over request, which poke this
    /// instance's member row); this instance's member row, renewed every 3 s, stands for the
    /// rest. On a mostly idle stream that removes nearly every lease write (at 10,000 shards
    /// over 100 instances, 3,367 write units a second fall to the 33 of the member rows).
    /// Takeover, hand-over and the guarantees do not change. Every instance of the stream, and
    /// the `kinesis-broker` command line used on its table, must run a release with pokes
    /// (this one or later) before the option is turned on: an older command line's `release`
    /// does not poke. See `docs/leases.md` ("Quiet idle shards").
    pub fn quiet_idle_shards(mut self) -> Self {
        self.quiet_idle = true;
        self
    }

    /// This instance's capacity for the stream's shards, relative to the others' (1.0 by
    /// default, for every instance alike): an instance with twice the CPU of the others says
    /// 2.0. It is published on the instance's member row beside the load it carries
    /// ([`StreamStats::load`](crate::StreamStats::load)), so that load over capacity compares
    /// instances of different sizes. The process's own CPU use is not read: the handlers' time
    /// on each shard's records is measured instead (see `docs/leases.md`, "Loads").
    ///
    /// # Errors
    ///
    /// The subscription's `handle` returns [`BrokerError::InvalidConfig`] naming `capacity`
    /// unless it is more than zero and at most 1,000 (thousandths are kept).
    pub fn capacity(mut self, capacity: f64) -> Self {
        self.instance_capacity = capacity;
        self
    }

    /// Balances the stream's shards among instances by load instead of by count (off by
    /// default). Every 10 s each instance reads one other instance's member row in turn (a
    /// single small read, whatever the number of shards) and weighs its handler time over its
    /// [`capacity`](Self::capacity) against what it knows of the others; the heaviest make
    /// one move at a time (up to 4 shards, those after the first only while the taker stays at
    /// or below the fleet's mean), gracefully (nothing is delivered twice), to the instance the
    /// move relieves most, when that leaves it more than 8 % below the giver and beyond the
    /// noise of the two figures (at most another 8 %). A shard moves at most
    /// once in three minutes; on a stream whose shards cost alike, the shares come out as by
    /// count within 8 % (idle, or many records a minute; a few slow records a minute, within
    /// 16 %). Turn it on for every instance of the stream: an instance without it
    /// asks for shards by count and undoes moves by load. See `docs/leases.md`, "Balancing by
    /// load".
    pub fn balance_by_load(mut self) -> Self {
        self.balance_by_load = true;
        self
    }

    /// Batches of up to `size` records (or what arrived within 50 ms of the first); finish
    /// with [`BatchSubscriptionBuilder::handle`].
    pub fn batch(self, size: usize) -> BatchSubscriptionBuilder<'b> {
        BatchSubscriptionBuilder {
            inner: self,
            size: size.max(1),
        }
    }

    /// Handles one delivery at a time: `Ok` settles it; `Err` or a panic retries it.
    ///
    /// # Errors
    ///
    /// [`BrokerError::DuplicateSubscription`] when the stream already has a subscription on
    /// this broker; [`BrokerError::Stream`] for an invalid stream name;
    /// [`BrokerError::InvalidConfig`] for a start or reposition at a sequence number.
    pub fn handle<F, Fut, E>(self, handler: F) -> Result<(), BrokerError>
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.register(Handler::one(handler))
    }

    /// Handles each payload parsed as JSON into `T`, with its delivery (feature `serde`). A
    /// payload that does not parse is a handler error naming the stream, shard, sequence
    /// number and type ([`DispatchError::InvalidPayload`](kinesis_dispatch::DispatchError)).
    /// It fails the same way on every attempt: with a dead-letter callback in the
    /// [`retry`](Self::retry) policy it goes there at once, without retries; without one it
    /// is retried like any failure (never dropped), holding back its key or shard.
    ///
    /// # Errors
    ///
    /// As [`handle`](Self::handle).
    #[cfg(feature = "serde")]
    pub fn handle_json<T, F, Fut, E>(self, handler: F) -> Result<(), BrokerError>
    where
        T: serde::de::DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.handle(
            move |delivery: Delivery| -> kinesis_lease_core::BoxFuture<'static, Result<(), HandlerError>> {
                match delivery.json::<T>() {
                    Ok(value) => {
                        let call = handler(value, delivery);
                        Box::pin(async move { call.await.map_err(Into::into) })
                    }
                    Err(error) => Box::pin(std::future::ready(Err(error.into()))),
                }
            },
        )
    }

    /// The deliveries as a stream, one at a time whichever shard they come from; call
    /// [`Delivery::ack`] on each once processed. Reading starts at `start()`.
    ///
    /// # Errors
    ///
    /// As [`handle`](Self::handle).
    pub fn stream(self) -> Result<DeliveryStream, BrokerError> {
        let (sender, receiver) = channel(self.capacity);
        self.register_parts(sender, None, 1)?;
        Ok(DeliveryStream::new(receiver))
    }

    fn register(self, handler: Handler) -> Result<(), BrokerError> {
        let (sender, receiver) = channel_for(self.capacity, &self.dispatch);
        let batch_size = handler.batch_size();
        self.register_parts(sender, Some((receiver, handler)), batch_size)
    }

    fn register_parts(
        self,
        sender: DeliverySender,
        handler: Option<(DeliveryReceiver, Handler)>,
        batch_size: usize,
    ) -> Result<(), BrokerError> {
        let records_per_call = self.records_per_call.unwrap_or(if batch_size > 1 {
            kinesis_fleet::ReaderConfig::records_per_call_for(batch_size)
        } else {
            1_000
        });
        let dispatch = self.dispatch;
        let capacity_milli = (self.instance_capacity * 1_000.0).round();
        if !(1.0..=1_000_000.0).contains(&capacity_milli) {
            return Err(BrokerError::InvalidConfig {
                setting: "capacity",
                reason: format!(
                    "stream `{}`: an instance's capacity is more than zero and at most 1,000 (1.0 is the default); {} is not",
                    self.stream, self.instance_capacity
                ),
            });
        }
        for (setting, position) in [
            ("start_at", Some(&self.start_at)),
            ("reposition", self.reposition.as_ref()),
        ] {
            if let Some(position) = position {
                if matches!(position, StartAt::AtSequence(_) | StartAt::AfterSequence(_)) {
                    return Err(BrokerError::InvalidConfig {
                        setting,
                        reason: format!(
                            "stream `{}`: a subscription starts at TrimHorizon, Latest or AtTimestamp; {position:?} names a record of one shard",
                            self.stream
                        ),
                    });
                }
            }
        }
        self.broker.add(Subscription {
            stream: self.stream,
            start_at: self.start_at,
            reposition: self.reposition,
            reposition_marker: self.reposition_marker,
            records_per_call,
            max_unsettled: self.max_unsettled,
            fan_out: self.fan_out,
            hooks: self.hooks,
            quiet_idle: self.quiet_idle,
            capacity_milli: capacity_milli as u64,
            balance_by_load: self.balance_by_load,
            #[cfg(feature = "kcl-import")]
            kcl_import: self.kcl_import,
            sender,
            dispatch: handler.map(|(receiver, handler)| (receiver, handler, dispatch)),
        })
    }
}

/// A subscription whose handler takes batches; see [`SubscriptionBuilder::batch`].
#[derive(Debug)]
#[must_use = "a subscription does nothing until `handle(..)`"]
pub struct BatchSubscriptionBuilder<'b> {
    inner: SubscriptionBuilder<'b>,
    size: usize,
}

impl BatchSubscriptionBuilder<'_> {
    /// How long a batch waits for more records after its first (50 ms).
    pub fn window(mut self, window: Duration) -> Self {
        self.inner.dispatch.batch_window = window;
        self
    }

    /// Handles batches: `Ok` settles all; [`BatchFailure`] names the failed records.
    ///
    /// # Errors
    ///
    /// As [`SubscriptionBuilder::handle`].
    pub fn handle<F, Fut>(self, handler: F) -> Result<(), BrokerError>
    where
        F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BatchFailure>> + Send + 'static,
    {
        self.inner.register(Handler::batch(self.size, handler))
    }
}
