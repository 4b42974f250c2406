//! `Dispatcher`: the loops that take deliveries from the channel and run the handler.
//!
//! - [`Workers::Serial`]: one loop, one unit (record or batch) at a time, each shard in order
//!   (shards take turns, see `fair_lane`).
//! - [`Workers::Unordered`]`(n)`: n loops each take the next delivery from the shared channel
//!   themselves, so up to n run at once, in no particular order, and none waits behind a busy
//!   loop. For batch handlers the loops gather their batches from the shared channel one at a
//!   time (a loop holds the gather token from its wait for a first record to its batch's
//!   close), so batches fill one after another (from the channel's places and what readers send
//!   within the window: nothing is staged per loop), and a record that arrives while a loop
//!   runs a batch stays in the channel for the next loop to gather: it never waits behind a
//!   busy loop (a router that
//!   filled one loop's queue at a time did that: a record waited 13 s for another shard's
//!   slow batch while the other loop idled, simulation seed 145969).
//! - [`Workers::ByKey`]`(n)`: n lanes by [`lane_of`](crate::lane_of)`(partition key, n)`;
//!   each lane is one loop over its own bounded queue, so a key's records are handled one
//!   after another in order, across retries too, while other lanes run beside it. With a
//!   channel made by [`channel_for`](crate::channel_for) the readers send into the lanes
//!   directly; with a plain channel a router moves each record into its lane.
//!
//! Records travel through the channel (and lanes) as their [`Delivery`], one pointer, made by
//! the reader as it numbers the record. A loop that handled a record alone and saw it settle
//! hands the delivery's memory back to the lane it takes from next (`Spare`), and the reader
//! makes its next deliveries in it: no allocation per record, and none made on one thread and
//! freed on another, which costs glibc markedly more (see docs/benchmarks.md, "Records as
//! pointers").
//!
//! # Clean shutdown
//!
//! [`DispatchHandle::shutdown`] stops taking deliveries from the shared channel at once, but
//! for a batch being gathered, which goes on to its window's end (those still there are
//! dropped unsettled; the channel is in each shard's order, so they come after everything
//! taken and their shard's checkpoint stays before them). Lanes are closed instead
//! (sends into them fail) and handle what they hold. Units in flight and what lanes hold
//! finish within a deadline (failing ones keep being retried), and what is still running then
//! is abandoned, without settling it. A record parked for its next attempt (and what waits
//! behind it) was taken: the loop goes on retrying it after `close()`, so a shutdown with a
//! record that keeps failing waits for its deadline. Finishing what a lane holds matters: lanes complete a
//! shard's records out of order, and a record left unhandled in one would hold the checkpoint
//! before records other lanes completed after it, which the next owner would then handle
//! again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

use crate::batch::{gather, Unit};
use crate::channel::Numbered;
use crate::ctx::Ctx;
use crate::delivery::Spare;
use crate::parking::{Hold, Parking};
use crate::router::route;
use crate::rx::Rx;
use crate::{Delivery, DeliveryReceiver, DispatchConfig, DispatchError, Handler, Workers};

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
        });
        let mut tasks = JoinSet::new();
        match config.workers {
            Workers::Serial => {
                tasks.spawn(worker(Source::Own(receiver), ctx, Hold::Shard));
            }
            // One delivery at a time in no order: each worker takes the next delivery from the
            // shared channel itself (no router hop, nothing queued behind a busy worker).
            Workers::Unordered(n) if ctx.handler.batch_size() <= 1 => {
                for _ in 0..n {
                    let share = receiver.share();
                    tasks.spawn(worker(Source::Own(share), ctx.clone(), Hold::Nothing));
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
                        worker(Source::Drains(lane), ctx, Hold::Key).await;
                    });
                }
            }
            // Batch handlers in no order: each loop gathers its own batch from the shared
            // channel, one loop at a time.
            Workers::Unordered(n) => {
                let token = Arc::new(tokio::sync::Mutex::new(()));
                for _ in 0..n {
                    let source = Source::Gathering {
                        rx: receiver.share(),
                        token: token.clone(),
                    };
                    tasks.spawn(worker(source, ctx.clone(), Hold::Nothing));
                }
            }
            // Lanes by key behind a plain channel: a router moves each record into its lane.
            Workers::ByKey(n) => {
                let mut lanes = Vec::with_capacity(n);
                for _ in 0..n {
                    let (tx, rx) = mpsc::channel(config.lane_capacity);
                    lanes.push(tx);
                    tasks.spawn(worker(Source::Lane(rx), ctx.clone(), Hold::Key));
                }
                tasks.spawn(route(receiver, lanes, ctx.clone()));
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

enum Source {
    /// The shared channel, this loop's alone (serial) or taken from side by side (unordered):
    /// the loop stops taking at `close()`.
    Own(DeliveryReceiver),
    /// As `Own`, for batch handlers in no order: the loops gather their batches one at a
    /// time, each holding `token` from its wait for a first record to its batch's close.
    Gathering {
        rx: DeliveryReceiver,
        token: Arc<tokio::sync::Mutex<()>>,
    },
    /// One lane by key of the channel, fed by the readers: at `close()` the loop closes the
    /// lane and handles what is already in it.
    Drains(DeliveryReceiver),
    /// A lane's queue, fed by the router (lanes by key behind a plain channel).
    Lane(mpsc::Receiver<Numbered>),
}

/// The gather token a loop holds while it gathers a batch (`None`: no token to hold).
type Gathering = Option<tokio::sync::OwnedMutexGuard<()>>;

impl Source {
    /// The next delivery, waiting for it, with the gather token when the loops gather one at
    /// a time; cancel-safe (nothing is taken until it resolves, the token is let go).
    async fn first(&mut self) -> (Option<Delivery>, Gathering) {
        match self {
            Source::Own(rx) | Source::Drains(rx) => (Rx::recv(rx).await, None),
            Source::Gathering { rx, token } => {
                let held = token.clone().lock_owned().await;
                (Rx::recv(rx).await, Some(held))
            }
            Source::Lane(rx) => (Rx::recv(rx).await, None),
        }
    }

    /// A unit from `first`: itself, or a batch of up to `max` gathered within `window` of it
    /// (records held back by `parking` queued behind instead). Not watched by `close()`: what
    /// was taken is handled.
    async fn unit(
        &mut self,
        first: Delivery,
        max: Option<usize>,
        window: Duration,
        parking: &mut Parking,
    ) -> Unit {
        match self {
            Source::Own(rx) | Source::Drains(rx) | Source::Gathering { rx, .. } => {
                gather(rx, first, max, window, parking).await
            }
            Source::Lane(rx) => gather(rx, first, max, window, parking).await,
        }
    }

    /// A delivery already waiting, if any: the hot path takes it without a `select!`. The
    /// memory of a delivery handled goes to the lane taken from, for its senders' next records
    /// (a queue fed by the router has no use for it: dropped).
    fn try_first(&mut self, spare: Option<Spare>) -> Option<Delivery> {
        match self {
            Source::Own(rx) | Source::Drains(rx) | Source::Gathering { rx, .. } => {
                rx.try_recv_reusing(spare)
            }
            Source::Lane(rx) => Rx::try_recv(rx),
        }
    }

    /// The loop is about to wait: the memory of the delivery handled last goes to the lane
    /// (see [`try_first`](Self::try_first)), and the lane frees the spares of shards let go.
    fn idle(&mut self, spare: Option<Spare>) {
        if let Source::Own(rx) | Source::Drains(rx) | Source::Gathering { rx, .. } = self {
            rx.idle(spare);
        }
    }

    /// True when the loop stops taking deliveries at `close()`: it reads the shared channel,
    /// whose waiting deliveries are dropped unsettled (they come after everything taken).
    fn stops_at_close(&self) -> bool {
        matches!(self, Source::Own(_) | Source::Gathering { .. })
    }

    /// At `close()`, a lane fed by the readers is closed (their sends fail from then on) and
    /// what it already holds is handled.
    fn stop_taking(&mut self) {
        if let Source::Drains(rx) = self {
            rx.stop_taking();
        }
    }
}

async fn worker(mut source: Source, ctx: Arc<Ctx>, hold: Hold) {
    let mut closing = ctx.closing.clone();
    let max = match &ctx.handler {
        Handler::One(_) => None,
        Handler::Batch(b) => Some(b.max),
    };
    // A lane keeps going after `close()`: the router stops at once and drops its senders, so
    // the lane ends once what was already routed to it is handled. Those records may come
    // before records other lanes completed; handling them keeps each shard's settled prefix
    // free of gaps, so a graceful shutdown re-delivers nothing. The shared channel itself
    // (serial and unordered loops) is in order: it stops at once.
    let own = source.stops_at_close();
    // Failed records wait here for their next attempt, and what they hold back behind them;
    // they were taken, so the loop goes on until they are done, after `close()` too (the
    // shutdown deadline abandons what still fails then).
    let mut parking = Parking::new(hold);
    // No more taking from the source (`close()`), and the source is closed and drained.
    let (mut stopped, mut ended) = (false, false);
    // Whether a new record goes next while released records wait (see below).
    let mut fresh_turn = false;
    // The memory of the last delivery handled and settled, for the next take to hand to the
    // lane (see `Spare`); handed to it before the loop waits.
    let mut spare: Option<Spare> = None;
    loop {
        // `closing` only ever goes from false to true: its version moving (one atomic load) is
        // the cheap sign to look at its value (a read lock).
        if !stopped && closing.has_changed().unwrap_or(true) && *closing.borrow() {
            stopped = true;
            if own {
                ended = true;
            } else {
                source.stop_taking();
            }
        }
        if !parking.is_idle() {
            if let Some(parked) = parking.take_due(Instant::now()) {
                // A retry may be due the moment it is parked (a zero backoff, a handler that
                // fails at once): give the scheduler its turn, or this loop never waits.
                tokio::task::consume_budget().await;
                ctx.retry(parked, &mut parking).await;
                continue;
            }
            // Records released from behind a parked one take turns with new ones: a ready
            // record, then a new one if one is waiting, so neither a shard released with a
            // long queue behind it nor a shard that never failed waits for all the others.
            if parking.has_ready() {
                let fresh = if fresh_turn && !ended {
                    source.try_first(spare.take())
                } else {
                    None
                };
                fresh_turn = fresh.is_none();
                let first = match fresh {
                    Some(delivery) => parking.admit(delivery),
                    None => parking.next_ready(),
                };
                tokio::task::consume_budget().await;
                if let Some(first) = first {
                    let unit = match max {
                        Some(max) => Unit::Batch(parking.ready_batch(first, max)),
                        None => Unit::One(first),
                    };
                    spare = ctx.run(unit, &mut parking).await;
                }
                continue;
            }
        }
        if ended {
            spare = None;
            match parking.next_due() {
                Some(due) => sleep_until(due).await,
                None => return,
            }
            continue;
        }
        // Hot path: a delivery is waiting, so nothing needs waking up by `closing` (registering
        // a waker on it for every record costs a lock). Yield to the scheduler now and then all
        // the same, since this path may never wait.
        // (Batches gather for a window, during which `closing` must be watched: not here.)
        let waiting = match max {
            None => source.try_first(spare.take()),
            Some(_) => None,
        };
        let unit = match waiting {
            Some(first) => {
                tokio::task::consume_budget().await;
                Unit::One(first)
            }
            None => {
                // Only the wait for a first delivery is cut short by `close()` or a parked
                // record's next attempt: a batch being gathered was taken, and is handled
                // (dropping it would leave a gap before records other loops handled).
                source.idle(spare.take());
                let due = parking.next_due();
                let first = tokio::select! {
                    biased;
                    _ = closing.wait_for(|c| *c), if !stopped => {
                        stopped = true;
                        if own {
                            ended = true;
                        } else {
                            source.stop_taking();
                        }
                        continue;
                    }
                    () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => continue,
                    first = source.first() => first,
                };
                let (Some(first), gathering) = first else {
                    ended = true;
                    continue;
                };
                let Some(first) = parking.admit(first) else {
                    continue;
                };
                let unit = source.unit(first, max, ctx.window, &mut parking).await;
                // The batch is closed: the next loop may gather while this one handles it.
                drop(gathering);
                unit
            }
        };
        let unit = match unit {
            Unit::One(d) => match parking.admit(d) {
                Some(d) => Unit::One(d),
                None => continue,
            },
            batch => batch,
        };
        spare = ctx.run(unit, &mut parking).await;
    }
}

impl Ctx {
    /// Runs a unit taken for the first time; what fails is parked. A record handled alone and
    /// settled gives back its delivery's memory, for the loop to hand to its lane with its next
    /// take (see `Spare`).
    async fn run(&self, unit: Unit, parking: &mut Parking) -> Option<Spare> {
        match (unit, &self.handler) {
            (Unit::One(d), Handler::One(h)) => self.run_one(h, d, parking).await,
            (Unit::Batch(b), Handler::Batch(h)) => {
                self.run_batch(h, b, parking).await;
                None
            }
            // `max` follows the handler, so these two do not occur; handled all the same.
            (Unit::One(d), Handler::Batch(h)) => {
                self.run_batch(h, vec![d], parking).await;
                None
            }
            (Unit::Batch(b), Handler::One(h)) => {
                for d in b {
                    if let Some(d) = parking.still_free(d) {
                        self.run_one(h, d, parking).await;
                    }
                }
                None
            }
        }
    }
}
