//! `Dispatcher`: the loops that take deliveries from the channel and run the handler.
//!
//! - [`Workers::Serial`]: one loop, one unit (record or batch) at a time, in arrival order.
//! - [`Workers::Unordered`]`(n)`: n loops each take the next delivery from the shared channel
//!   themselves, so up to n run at once, in no particular order, and none waits behind a busy
//!   loop. For batch handlers a router fills one loop's queue (a batch's worth) at a time, so
//!   batches fill.
//! - [`Workers::ByKey`]`(n)`: n lanes by [`lane_of`](crate::lane_of)`(partition key, n)`;
//!   each lane is one loop over its own bounded queue, so a key's records are handled one
//!   after another in order, across retries too, while other lanes run beside it. With a
//!   channel made by [`channel_for`](crate::channel_for) the readers send into the lanes
//!   directly; with a plain channel a router moves each record into its lane.
//!
//! Records travel through the channel (and lanes) as they were numbered; each loop makes the
//! [`Delivery`] around a record when it takes it, so the delivery is allocated and freed on
//! the handler's thread (freeing what another thread allocated costs glibc markedly more; see
//! docs/benchmarks.md).
//!
//! # Clean shutdown
//!
//! [`DispatchHandle::shutdown`] stops taking deliveries from the shared channel at once (those
//! still there are dropped unsettled; the channel is in each shard's order, so they come after
//! everything taken and their shard's checkpoint stays before them). Lanes are closed instead
//! (sends into them fail) and handle what they hold. Units in flight and what lanes hold
//! finish within a deadline (failing ones keep being retried), and what is still running then
//! is abandoned, without settling it. Finishing what a lane holds matters: lanes complete a
//! shard's records out of order, and a record left unhandled in one would hold the checkpoint
//! before records other lanes completed after it, which the next owner would then handle
//! again.

use kinesis_lease_core::ErrorChain;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::handler::{BatchHandler, OneHandler};
use crate::retry::Exhausted;
use crate::{
    channel::Numbered, lane_of, Delivery, DeliveryReceiver, DispatchError, Handler, HandlerError,
    RetryPolicy,
};

/// How many handlers run at once, and in what order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workers {
    /// One at a time, in arrival order.
    #[default]
    Serial,
    /// Up to n at once, unordered.
    Unordered(usize),
    /// n lanes by partition key: each key in order, keys spread over lanes.
    ByKey(usize),
}

/// The dispatch settings of one subscription.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Serial, unordered workers or lanes by key.
    pub workers: Workers,
    /// The queue of each lane of [`Workers::ByKey`] (default 8).
    pub lane_capacity: usize,
    /// How long a batch waits for more records after its first (default 50 ms).
    pub batch_window: Duration,
    /// What happens when a handler fails.
    pub retry: RetryPolicy,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            workers: Workers::Serial,
            lane_capacity: 8,
            batch_window: Duration::from_millis(50),
            retry: RetryPolicy::default(),
        }
    }
}

/// Starts the dispatch loops of one subscription.
#[derive(Debug)]
pub struct Dispatcher;

impl Dispatcher {
    /// Spawns the loops on the current tokio runtime; they run until the channel is closed and
    /// drained, or until [`DispatchHandle::shutdown`].
    ///
    /// # Errors
    ///
    /// [`DispatchError::InvalidConfig`] for zero workers or lanes, or a zero lane capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_dispatch::{channel, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, Workers};
    /// use kinesis_lease_core::SequenceNumber;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let (sender, receiver) = channel(64);
    /// let handler = Handler::one(|d: kinesis_dispatch::Delivery| async move {
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// let config = DispatchConfig { workers: Workers::ByKey(4), ..Default::default() };
    /// let handle = Dispatcher::spawn(receiver, handler, config)?;
    /// let settlement = ShardSettlement::new("orders", "shardId-000000000000");
    /// let feed = sender.feed(settlement.clone());
    /// feed.send(Record::new("x", "k", SequenceNumber::new("7", None)?)).await?;
    /// settlement.all_settled().await;
    /// assert_eq!(settlement.progress().checkpoint, Some(SequenceNumber::new("7", None)?));
    /// drop((sender, feed));
    /// handle.join().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn spawn(
        receiver: DeliveryReceiver,
        handler: Handler,
        config: DispatchConfig,
    ) -> Result<DispatchHandle, DispatchError> {
        let invalid = |setting, reason| DispatchError::InvalidConfig { setting, reason };
        match config.workers {
            Workers::Unordered(0) => return Err(invalid("workers", "at least one worker")),
            Workers::ByKey(0) => return Err(invalid("workers", "at least one lane")),
            _ => {}
        }
        if config.lane_capacity == 0 {
            return Err(invalid("lane_capacity", "at least one delivery per lane"));
        }
        let lanes = receiver.lanes();
        if lanes > 1 && config.workers != Workers::ByKey(lanes) {
            // Taking from several lanes in turn would not keep each shard's order, and what a
            // shutdown leaves would not come after what was handled.
            return Err(invalid(
                "workers",
                "a channel of lanes by key (`channel_for`) needs as many lanes by key",
            ));
        }
        let (closing_tx, closing) = watch::channel(false);
        let ctx = Arc::new(Ctx {
            handler,
            retry: config.retry,
            window: config.batch_window,
            closing,
            room: Notify::new(),
        });
        let mut tasks = JoinSet::new();
        match config.workers {
            Workers::Serial => {
                tasks.spawn(worker(Source::Own(receiver), ctx));
            }
            // One delivery at a time in no order: each worker takes the next delivery from the
            // shared channel itself (no router hop, nothing queued behind a busy worker).
            Workers::Unordered(n)
                if ctx.handler.batch_size() <= 1 && receiver.share().is_some() =>
            {
                for _ in 0..n {
                    if let Some(share) = receiver.share() {
                        tasks.spawn(worker(Source::Own(share), ctx.clone()));
                    }
                }
            }
            // Lanes by key fed straight by the readers: each lane's loop takes from its own.
            Workers::ByKey(n) if receiver.lanes() == n => {
                for lane in receiver.into_lanes() {
                    let ctx = ctx.clone();
                    tasks.spawn(async move {
                        // A lane that ends (or dies) ends the subscription's intake: readers of
                        // records for it could never send again.
                        let _closes_all = lane.closes_all_when_dropped();
                        worker(Source::Drains(lane), ctx).await;
                    });
                }
            }
            Workers::Unordered(n) | Workers::ByKey(n) => {
                let batch = ctx.handler.batch_size();
                let (pick, capacity) = match config.workers {
                    // Batch handlers in no order: any worker with room takes the next delivery,
                    // a batch's worth filled one worker at a time.
                    Workers::Unordered(_) => (Pick::AnyFree { sticky: true }, batch),
                    _ => (Pick::ByKey, config.lane_capacity),
                };
                // Workers in no order tell the router when they take (it may wait for any of
                // them); a lane by key has its router wait on that lane alone.
                let signals = matches!(pick, Pick::AnyFree { .. });
                let mut lanes = Vec::with_capacity(n);
                for _ in 0..n {
                    let (tx, rx) = mpsc::channel(capacity);
                    lanes.push(tx);
                    tasks.spawn(worker(Source::Lane { rx, signals }, ctx.clone()));
                }
                tasks.spawn(route(receiver, lanes, pick, ctx.clone()));
            }
        }
        Ok(DispatchHandle {
            closing: closing_tx,
            tasks,
        })
    }
}

/// The running loops of one subscription.
#[derive(Debug)]
pub struct DispatchHandle {
    closing: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl DispatchHandle {
    /// Stops taking deliveries; units in flight go on (see [`shutdown`](Self::shutdown)).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Waits until every loop has ended (after the channel closed and drained, or after
    /// [`close`](Self::close) and the units in flight).
    pub async fn join(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }

    /// Closes, waits up to `deadline` for the units in flight, then abandons the rest unsettled.
    /// Returns true when everything finished in time.
    pub async fn shutdown(mut self, deadline: Duration) -> bool {
        self.close();
        let drained = tokio::time::timeout(deadline, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !drained {
            tracing::warn!(
                ?deadline,
                "handlers still running at the shutdown deadline; abandoned without checkpoint"
            );
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
        }
        drained
    }
}

struct Ctx {
    handler: Handler,
    retry: RetryPolicy,
    window: Duration,
    closing: watch::Receiver<bool>,
    /// Signalled each time a worker takes from its queue: a router whose every candidate
    /// queue was full tries again (a permit is kept when it is not waiting yet).
    room: Notify,
}

enum Source {
    /// The shared channel, this loop's alone (serial) or taken from side by side (unordered):
    /// the loop stops taking at `close()`.
    Own(DeliveryReceiver),
    /// One lane by key of the channel, fed by the readers: at `close()` the loop closes the
    /// lane and handles what is already in it.
    Drains(DeliveryReceiver),
    /// A worker's or lane's queue, fed by the router; `signals`: each take is signalled to the
    /// router (workers in no order).
    Lane {
        rx: mpsc::Receiver<Numbered>,
        signals: bool,
    },
}

/// The two kinds of queue a loop reads.
trait Rx: Send {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<Delivery>> + Send;
    fn try_recv(&mut self) -> Option<Delivery>;
}

impl Rx for DeliveryReceiver {
    async fn recv(&mut self) -> Option<Delivery> {
        DeliveryReceiver::recv(self).await
    }
    fn try_recv(&mut self) -> Option<Delivery> {
        DeliveryReceiver::try_recv(self)
    }
}

impl Rx for mpsc::Receiver<Numbered> {
    async fn recv(&mut self) -> Option<Delivery> {
        mpsc::Receiver::recv(self)
            .await
            .map(Numbered::into_delivery)
    }
    fn try_recv(&mut self) -> Option<Delivery> {
        mpsc::Receiver::try_recv(self)
            .ok()
            .map(Numbered::into_delivery)
    }
}

enum Unit {
    One(Delivery),
    Batch(Vec<Delivery>),
}

impl Source {
    /// The next delivery, waiting for it; cancel-safe (nothing is taken until it resolves).
    async fn first(&mut self) -> Option<Delivery> {
        match self {
            Source::Own(rx) | Source::Drains(rx) => Rx::recv(rx).await,
            Source::Lane { rx, .. } => Rx::recv(rx).await,
        }
    }

    /// A unit from `first`: itself, or a batch of up to `max` gathered within `window` of it.
    /// Not watched by `close()`: what was taken is handled.
    async fn unit(&mut self, first: Delivery, max: Option<usize>, window: Duration) -> Unit {
        match self {
            Source::Own(rx) | Source::Drains(rx) => gather(rx, first, max, window).await,
            Source::Lane { rx, .. } => gather(rx, first, max, window).await,
        }
    }

    /// A delivery already waiting, if any: the hot path takes it without a `select!`.
    fn try_first(&mut self) -> Option<Delivery> {
        match self {
            Source::Own(rx) | Source::Drains(rx) => rx.try_recv(),
            Source::Lane { rx, .. } => Rx::try_recv(rx),
        }
    }

    /// True when the loop stops taking deliveries at `close()`: it reads the shared channel,
    /// whose waiting deliveries are dropped unsettled (they come after everything taken).
    fn stops_at_close(&self) -> bool {
        matches!(self, Source::Own(_))
    }

    /// At `close()`, a lane fed by the readers is closed (their sends fail from then on) and
    /// what it already holds is handled.
    fn stop_taking(&mut self) {
        if let Source::Drains(rx) = self {
            rx.stop_taking();
        }
    }
}

/// The unit beginning with `first`: itself, or a batch of up to `max` gathered within
/// `window` of it.
async fn gather<R: Rx>(rx: &mut R, first: Delivery, max: Option<usize>, window: Duration) -> Unit {
    let Some(max) = max else {
        return Unit::One(first);
    };
    let deadline = Instant::now() + window;
    let mut batch = Vec::with_capacity(max.min(1024));
    batch.push(first);
    while batch.len() < max {
        if let Some(d) = rx.try_recv() {
            batch.push(d);
            continue;
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(d)) => batch.push(d),
            Ok(None) | Err(_) => break,
        }
    }
    Unit::Batch(batch)
}

async fn worker(mut source: Source, ctx: Arc<Ctx>) {
    let mut closing = ctx.closing.clone();
    let max = match &ctx.handler {
        Handler::One(_) => None,
        Handler::Batch(b) => Some(b.max),
    };
    // A lane keeps going after `close()`: the router stops at once and drops its senders, so
    // the lane ends once what was already routed to it is handled. Those records may come
    // before records other lanes completed; handling them keeps each shard's settled prefix
    // free of gaps, so a graceful shutdown re-delivers nothing. The shared channel itself
    // (serial mode) is in order: it stops at once.
    let own = source.stops_at_close();
    let mut stopped = false;
    loop {
        // `closing` only ever goes from false to true: its version moving (one atomic load) is
        // the cheap sign to look at its value (a read lock).
        if !stopped && closing.has_changed().unwrap_or(true) && *closing.borrow() {
            if own {
                return;
            }
            source.stop_taking();
            stopped = true;
        }
        // Hot path: a delivery is waiting, so nothing needs waking up by `closing` (registering
        // a waker on it for every record costs a lock). Yield to the scheduler now and then all
        // the same, since this path may never wait.
        // (Batches gather for a window, during which `closing` must be watched: not here.)
        let waiting = match max {
            None => source.try_first(),
            Some(_) => None,
        };
        let unit = match waiting {
            Some(first) => {
                tokio::task::consume_budget().await;
                Some(Unit::One(first))
            }
            None => {
                // Only the wait for a first delivery is cut short by `close()`: a batch being
                // gathered was taken, and is handled (dropping it would leave a gap before
                // records other loops handled).
                let first = tokio::select! {
                    biased;
                    _ = closing.wait_for(|c| *c), if !stopped => {
                        if own {
                            return;
                        }
                        source.stop_taking();
                        stopped = true;
                        continue;
                    }
                    first = source.first() => first,
                };
                match first {
                    Some(first) => Some(source.unit(first, max, ctx.window).await),
                    None => None,
                }
            }
        };
        if unit.is_some() && matches!(source, Source::Lane { signals: true, .. }) {
            ctx.room.notify_one();
        }
        match (unit, &ctx.handler) {
            (None, _) => return,
            (Some(Unit::One(d)), Handler::One(h)) => ctx.run_one(h, d).await,
            (Some(Unit::Batch(b)), Handler::Batch(h)) => ctx.run_batch(h, b).await,
            // `max` follows the handler, so these two do not occur; handled all the same.
            (Some(Unit::One(d)), Handler::Batch(h)) => ctx.run_batch(h, vec![d]).await,
            (Some(Unit::Batch(b)), Handler::One(h)) => {
                for d in b {
                    ctx.run_one(h, d).await;
                }
            }
        }
    }
}

/// How the router picks a lane.
#[derive(Clone, Copy)]
enum Pick {
    /// The lane of the partition key.
    ByKey,
    /// Any lane with room, round robin (staying on a lane while it has room when `sticky`,
    /// so batches fill); the first to free up when all are full.
    AnyFree {
        /// Keep filling the same lane while it has room.
        sticky: bool,
    },
}

/// Hands each record on to a lane as it travels: its delivery is made by the lane's worker,
/// on the thread that handles and frees it.
async fn route(
    mut rx: DeliveryReceiver,
    lanes: Vec<mpsc::Sender<Numbered>>,
    pick: Pick,
    ctx: Arc<Ctx>,
) {
    let mut closing = ctx.closing.clone();
    let mut next = 0;
    loop {
        let delivery = tokio::select! {
            biased;
            _ = closing.wait_for(|c| *c) => return,
            d = rx.recv_numbered() => d,
        };
        let Some(delivery) = delivery else { return };
        if delivery.is_revoked() {
            continue;
        }
        let candidates: &[mpsc::Sender<Numbered>] = match pick {
            Pick::ByKey => {
                let lane = lane_of(delivery.partition_key(), lanes.len());
                &lanes[lane..=lane]
            }
            Pick::AnyFree { .. } => &lanes,
        };
        let advance = usize::from(!matches!(pick, Pick::AnyFree { sticky: true }));
        // Fast path: a lane with room, starting after the last one used.
        let mut delivery = match place(candidates, next, delivery) {
            Placement::Placed(i) => {
                next = (next + i + advance) % candidates.len();
                continue;
            }
            Placement::Closed => return,
            Placement::AllFull(delivery) => delivery,
        };
        // Every candidate is full. One lane (by key): wait for its own place.
        if let [lane] = candidates {
            tokio::select! {
                biased;
                _ = closing.wait_for(|c| *c) => return,
                permit = lane.reserve() => match permit {
                    Ok(permit) => permit.send(delivery),
                    Err(_) => return,
                },
            }
            continue;
        }
        // Several: try again each time a worker takes from its queue, watching for that before
        // trying, so that a take in between is not missed.
        loop {
            let room = ctx.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            delivery = match place(candidates, next, delivery) {
                Placement::Placed(i) => {
                    next = (next + i + advance) % candidates.len();
                    break;
                }
                Placement::Closed => return,
                Placement::AllFull(delivery) => delivery,
            };
            tokio::select! {
                biased;
                _ = closing.wait_for(|c| *c) => return,
                () = room => {}
            }
        }
    }
}

enum Placement {
    /// Sent to the candidate `start + i`.
    Placed(usize),
    /// A lane is closed: dispatch is ending.
    Closed,
    /// Every candidate is full; the delivery comes back.
    AllFull(Numbered),
}

/// Tries each candidate once, from `start` round, without waiting.
fn place(candidates: &[mpsc::Sender<Numbered>], start: usize, mut delivery: Numbered) -> Placement {
    for i in 0..candidates.len() {
        match candidates[(start + i) % candidates.len()].try_send(delivery) {
            Ok(()) => return Placement::Placed(i),
            Err(mpsc::error::TrySendError::Closed(_)) => return Placement::Closed,
            Err(mpsc::error::TrySendError::Full(d)) => delivery = d,
        }
    }
    Placement::AllFull(delivery)
}

fn panic_error(panic: Box<dyn std::any::Any + Send>) -> HandlerError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("handler panicked: {message}").into()
}

impl Ctx {
    /// Sleeps `delay` before a retry. Shutdown does not cut it short: a record handed to a
    /// handler is retried until it settles or the shutdown deadline abandons it, so that what
    /// completed after it is not re-delivered by the next owner.
    async fn pause(&self, delay: Duration) -> bool {
        tokio::time::sleep(delay).await;
        true
    }

    async fn run_one(&self, handler: &OneHandler, delivery: Delivery) {
        if delivery.is_revoked() {
            return;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Counted as running first, then checked: a hand-over that revokes the shard and
            // then waits for it to be idle either sees this attempt or stops it here.
            let running = delivery.running_ref();
            // A lease lost or handed over while this record waited: the next owner handles it.
            if delivery.is_revoked() {
                return;
            }
            // Timed (with metrics on) for one call in 64, and for every call that waits.
            let mut started = (crate::metrics::ON
                && fastrand::u32(..crate::metrics::SAMPLE_EVERY) == 0)
                .then(Instant::now);
            // One span per call: what the handler logs names its record.
            let span = tracing::info_span!(
                "handle",
                stream = delivery.stream(),
                shard = delivery.shard(),
                sequence = delivery.sequence_text(),
                partition_key = delivery.partition_key(),
                attempt,
            );
            let mut call = {
                let _entered = span.enter();
                AssertUnwindSafe((handler.0)(delivery.clone()))
                    .catch_unwind()
                    .instrument(span.clone())
            };
            // The hot path: a handler done at its first poll needs no watch on the lease (the
            // shard was checked just above).
            let first = std::future::poll_fn(|cx| Poll::Ready(call.poll_unpin(cx))).await;
            let outcome = match first {
                Poll::Ready(outcome) => outcome,
                // A handler that waits: from now on the lease is checked before every poll.
                Poll::Pending => {
                    if crate::metrics::ON && started.is_none() {
                        started = Some(Instant::now());
                    }
                    tokio::select! {
                        biased;
                        // The lease is lost: stop the attempt now, the next owner handles the
                        // record.
                        () = delivery.abandoned() => return,
                        outcome = &mut call => outcome,
                    }
                }
            };
            if let Some(started) = started {
                delivery.metrics().handled(started.elapsed());
            }
            let result = outcome.unwrap_or_else(|panic| Err(panic_error(panic)));
            drop(running);
            let error = match result {
                Ok(()) => {
                    delivery.ack();
                    return;
                }
                Err(error) => error,
            };
            delivery.attempt_failed();
            if delivery.is_revoked() {
                return;
            }
            if self.retry.exhausted_after(attempt) {
                self.exhaust(delivery, error, attempt).await;
                return;
            }
            let delay = self.retry.delay(attempt);
            tracing::warn!(
                stream = delivery.stream(),
                shard = delivery.shard(),
                sequence = %delivery.sequence(),
                attempt,
                ?delay,
                error = %ErrorChain(&*error),
                "handler failed; retrying the record in place"
            );
            if !self.pause(delay).await {
                return;
            }
        }
    }

    async fn run_batch(&self, handler: &BatchHandler, batch: Vec<Delivery>) {
        let mut batch: Vec<Delivery> = batch.into_iter().filter(|d| !d.is_revoked()).collect();
        let mut attempt = 0;
        while !batch.is_empty() {
            attempt += 1;
            let running: Vec<_> = batch.iter().map(Delivery::running).collect();
            batch.retain(|d| !d.is_revoked());
            if batch.is_empty() {
                return;
            }
            let started = crate::metrics::ON.then(Instant::now);
            let span = tracing::info_span!(
                "handle_batch",
                stream = batch[0].stream(),
                shards = batch
                    .iter()
                    .map(Delivery::shard)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                first_sequence = batch[0].sequence_text(),
                records = batch.len(),
                attempt,
            );
            let call = {
                let _entered = span.enter();
                (handler.f)(batch.clone())
            }
            .instrument(span.clone());
            let abandoned =
                futures_util::future::select_all(batch.iter().map(|d| Box::pin(d.abandoned())));
            let outcome = tokio::select! {
                biased;
                // A shard of the batch lost its lease: stop the attempt, and run it again
                // without that shard's records (the others are still this instance's).
                _ = abandoned => continue,
                outcome = AssertUnwindSafe(call).catch_unwind() => outcome,
            };
            if let (Some(started), Some(first)) = (started, batch.first()) {
                first.metrics().handled(started.elapsed());
            }
            drop(running);
            let (failed, error) = match outcome {
                Ok(Ok(())) => {
                    batch.iter().for_each(Delivery::ack);
                    return;
                }
                Ok(Err(failure)) => (failure.failed, failure.error),
                Err(panic) => (None, panic_error(panic)),
            };
            let failed = failed_with_followers(&batch, failed.as_deref());
            let mut retry = Vec::new();
            for (delivery, failed) in batch.into_iter().zip(failed) {
                if failed {
                    delivery.attempt_failed();
                    retry.push(delivery);
                } else {
                    delivery.ack();
                }
            }
            batch = retry.into_iter().filter(|d| !d.is_revoked()).collect();
            if batch.is_empty() {
                return;
            }
            if self.retry.exhausted_after(attempt) {
                for delivery in batch {
                    self.exhaust(delivery, error.to_string().into(), attempt)
                        .await;
                }
                return;
            }
            let delay = self.retry.delay(attempt);
            tracing::warn!(
                stream = batch[0].stream(),
                records = batch.len(),
                attempt,
                ?delay,
                error = %ErrorChain(&*error),
                "batch handler failed; retrying the failed records in place"
            );
            if !self.pause(delay).await {
                return;
            }
        }
    }

    async fn exhaust(&self, delivery: Delivery, error: HandlerError, attempts: u32) {
        let (stream, shard, sequence) = (
            delivery.stream().to_owned(),
            delivery.shard().to_owned(),
            delivery.sequence().to_string(),
        );
        // A dead-letter callback is user code on the record: a hand-over waits for it too.
        let _running = delivery.running();
        match &self.retry.exhausted {
            Exhausted::Skip => {
                tracing::error!(%stream, %shard, %sequence, attempts, error = %ErrorChain(&*error), "attempts used up; skipping the record");
                delivery.ack();
            }
            Exhausted::DeadLetter(callback) => {
                let call = callback(delivery.clone(), error);
                match AssertUnwindSafe(call).catch_unwind().await {
                    Ok(Ok(())) => {
                        tracing::warn!(%stream, %shard, %sequence, attempts, "attempts used up; record sent to the dead-letter callback");
                        delivery.metrics().dead_lettered();
                        delivery.ack();
                    }
                    Ok(Err(e)) => {
                        tracing::error!(%stream, %shard, %sequence, error = %ErrorChain(&*e), "dead-letter callback failed; the record stays unsettled");
                    }
                    Err(panic) => {
                        tracing::error!(%stream, %shard, %sequence, error = %panic_error(panic), "dead-letter callback panicked; the record stays unsettled");
                    }
                }
            }
        }
    }
}

/// Which records of a batch to retry: the failed ones (all when `failed` is `None`) and every
/// later record with the key of a failed one, so each key keeps its order.
///
/// An index outside the batch means the handler's bookkeeping is wrong, so no record of the
/// batch can be trusted as handled: the whole batch is retried, and the error names the
/// indices.
fn failed_with_followers(batch: &[Delivery], failed: Option<&[usize]>) -> Vec<bool> {
    let mut marks = match failed {
        None => return vec![true; batch.len()],
        Some(indices) if indices.iter().any(|&i| i >= batch.len()) => {
            let outside: Vec<usize> = indices
                .iter()
                .copied()
                .filter(|&i| i >= batch.len())
                .collect();
            tracing::error!(
                stream = batch.first().map(Delivery::stream),
                shard = batch.first().map(Delivery::shard),
                batch = batch.len(),
                ?outside,
                "BatchFailure::items named records outside the batch; retrying the whole batch"
            );
            return vec![true; batch.len()];
        }
        Some(indices) => {
            let mut marks = vec![false; batch.len()];
            for &i in indices {
                if let Some(mark) = marks.get_mut(i) {
                    *mark = true;
                }
            }
            marks
        }
    };
    let mut keys = HashSet::new();
    for (delivery, mark) in batch.iter().zip(marks.iter_mut()) {
        if *mark {
            keys.insert(delivery.partition_key());
        } else if keys.contains(delivery.partition_key()) {
            *mark = true;
        }
    }
    marks
}
