//! The one bounded channel a subscription's readers share, and each shard's feed into it.
//!
//! # Backpressure
//!
//! Every reader of a subscription sends into one channel of 64 deliveries (configurable).
//! When handlers fall behind it fills, and every reader's next [`ShardFeed::send`] waits: no
//! shard is read further ahead than the service can handle, and memory stays bounded by the
//! channel and the records handlers hold.
//!
//! # Receivers take for themselves
//!
//! Nothing stands between the readers and the handlers' loops:
//!
//! - For unordered workers ([`channel_for`] with [`Workers::Unordered`]) every worker takes
//!   the next delivery from the one lane itself, so none waits behind a busy one.
//! - For lanes by key ([`channel_for`] with [`Workers::ByKey`]) the channel is made of n
//!   lanes: each feed sends a record straight into the lane of its partition key
//!   ([`lane_of`]), and each lane's loop takes from its own. A slow key then holds back only
//!   the readers whose next record is for its lane, and memory is bounded by n lanes of
//!   `lane_capacity`.
//! - Otherwise (serial, a [`DeliveryStream`](crate::DeliveryStream)) one loop takes from the
//!   one lane.
//!
//! # Shards take turns
//!
//! A lane hands its records out by shard in turn, not first in, first out (see `fair_lane`):
//! a shard just taken over, whose first record arrives behind another shard's backlog, waits
//! for one record of each busy shard (and, for its place, one freed place per reader already
//! waiting), not the lane's whole capacity. Each shard's records keep
//! their order. Places are handed out in turn too: a freed place goes to the reader that has
//! waited longest. Without that, a reader that just sent could take the freed place again and
//! again, and a shard could starve behind the others (`readers_waiting_for_room_take_turns`
//! saw two of four shards get nothing). A record is numbered only once it has a place, so a
//! send cancelled while it waits leaves nothing behind.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::watch;

use crate::fair_lane::{fair_lane, LaneRx, LaneTx};
pub(crate) use crate::numbered::Numbered;
use crate::{lane_of, Delivery, DispatchConfig, DispatchError, Record, ShardSettlement, Workers};

/// The default capacity of a subscription's channel.
pub const DEFAULT_CAPACITY: usize = 64;

/// Creates a subscription's channel of `capacity` deliveries (at least 1).
///
/// # Examples
///
/// ```
/// use kinesis_dispatch::{channel, Record, ShardSettlement};
/// use kinesis_lease_core::SequenceNumber;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let (sender, mut receiver) = channel(64);
/// let feed = sender.feed(ShardSettlement::new("orders", "shardId-000000000000"));
/// feed.send(Record::new("hello", "customer-1", SequenceNumber::new("1", None)?)).await?;
/// let delivery = receiver.recv().await.expect("a delivery");
/// assert_eq!(delivery.partition_key(), "customer-1");
/// delivery.ack();
/// assert_eq!(feed.settlement().progress().in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub fn channel(capacity: usize) -> (DeliverySender, DeliveryReceiver) {
    build((0..1).map(|_| fair_lane(capacity)))
}

/// Creates the channel a [`Dispatcher`](crate::Dispatcher) with `config` takes from
/// directly: for [`Workers::ByKey`]`(n)`, n lanes of `config.lane_capacity` each, fed by
/// partition key; otherwise one lane of `capacity` deliveries (which unordered workers take
/// from side by side).
///
/// # Examples
///
/// ```
/// use kinesis_dispatch::{channel_for, DispatchConfig, Workers};
///
/// let config = DispatchConfig { workers: Workers::ByKey(4), ..Default::default() };
/// let (sender, receiver) = channel_for(64, &config);
/// assert_eq!(receiver.lanes(), 4);
/// # drop(sender);
/// ```
pub fn channel_for(capacity: usize, config: &DispatchConfig) -> (DeliverySender, DeliveryReceiver) {
    match config.workers {
        Workers::ByKey(n) if n > 0 => build((0..n).map(|_| fair_lane(config.lane_capacity))),
        _ => channel(capacity),
    }
}

fn build(lanes: impl Iterator<Item = (LaneTx, LaneRx)>) -> (DeliverySender, DeliveryReceiver) {
    let (senders, receivers): (Vec<_>, Vec<_>) = lanes.unzip();
    let (open, watch) = watch::channel(true);
    (
        DeliverySender {
            lanes: senders.into(),
            open: watch,
        },
        DeliveryReceiver {
            lanes: receivers,
            open: Arc::new(Open { open }),
            next: 0,
        },
    )
}

/// Held by every share of the receiving side. Dropped with the last one, or closed by
/// [`DeliveryReceiver::close`], it tells senders waiting in [`DeliverySender::closed`] (each
/// lane fails the senders waiting for a place by itself once closed or without receivers).
#[derive(Debug)]
struct Open {
    open: watch::Sender<bool>,
}

impl Open {
    fn close(&self) {
        self.open.send_replace(false);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.close();
    }
}

/// The sending side of a subscription's channel; clone it for each reader.
#[derive(Debug, Clone)]
pub struct DeliverySender {
    /// One lane, or one per lane by key.
    lanes: Arc<[LaneTx]>,
    /// False, or gone, once the receiving side is.
    open: watch::Receiver<bool>,
}

impl DeliverySender {
    /// A feed for one shard, numbering its deliveries in `settlement`.
    pub fn feed(&self, settlement: Arc<ShardSettlement>) -> ShardFeed {
        ShardFeed {
            lanes: self.lanes.clone(),
            turns: settlement.turns(self.lanes.len()),
            settlement,
        }
    }

    /// True once the receiving side is gone.
    pub fn is_closed(&self) -> bool {
        self.open.has_changed().is_err() || !*self.open.borrow()
    }

    /// Resolves once the receiving side is gone (dispatch ended, or a `DeliveryStream` was
    /// dropped).
    pub async fn closed(&self) {
        let mut open = self.open.clone();
        // An error: the last share of the receiving side was dropped.
        let _ = open.wait_for(|open| !*open).await;
    }
}

/// The receiving side of a subscription's channel.
#[derive(Debug)]
pub struct DeliveryReceiver {
    lanes: Vec<LaneRx>,
    open: Arc<Open>,
    /// The lane to look at first, so that lanes take turns.
    next: usize,
}

impl DeliveryReceiver {
    /// The next delivery, `None` once every sender is gone and the channel is empty.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.recv_numbered().await.map(Numbered::into_delivery)
    }

    /// The next record as it travels, for a router that hands it on to a lane.
    pub(crate) async fn recv_numbered(&mut self) -> Option<Numbered> {
        if let [lane] = &mut self.lanes[..] {
            return lane.recv().await;
        }
        std::future::poll_fn(|cx| self.poll_numbered(cx)).await
    }

    /// A delivery if one is waiting now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let n = self.lanes.len();
        for i in 0..n {
            let index = (self.next + i) % n;
            if let Some(record) = self.lanes[index].try_recv() {
                self.next = (index + 1) % n;
                return Some(record.into_delivery());
            }
        }
        None
    }

    /// Stops the channel: senders fail from now on; waiting deliveries can still be received.
    pub fn close(&mut self) {
        for lane in &mut self.lanes {
            lane.close();
        }
        self.open.close();
    }

    /// Closes the lanes this receiver takes from, so their senders fail from now on, without
    /// telling [`DeliverySender::closed`] (the receiving side is still draining).
    pub(crate) fn stop_taking(&mut self) {
        for lane in &mut self.lanes {
            lane.close();
        }
    }

    /// While the returned guard lives nothing changes; once it is dropped (its lane's loop
    /// ended, even by a panic) senders are told the receiving side is gone, so the readers of a
    /// subscription whose lane died stop instead of waiting on a lane no one takes from.
    pub(crate) fn closes_all_when_dropped(&self) -> ClosesAll {
        ClosesAll(self.open.clone())
    }

    /// How many lanes the channel has (1 unless made by [`channel_for`] for lanes by key).
    /// A receiver of several lanes takes from them in turn, which keeps each key's order but
    /// not each shard's: only a dispatcher of as many lanes by key may take from it.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Another receiver of the same channel: each delivery goes to one of them.
    pub(crate) fn share(&self) -> Self {
        Self {
            lanes: self.lanes.iter().map(LaneRx::share).collect(),
            open: self.open.clone(),
            next: 0,
        }
    }

    /// One receiver per lane (each lane's loop takes from its own).
    pub(crate) fn into_lanes(self) -> Vec<Self> {
        let open = self.open;
        self.lanes
            .into_iter()
            .map(|lane| Self {
                lanes: vec![lane],
                open: open.clone(),
                next: 0,
            })
            .collect()
    }

    fn poll_numbered(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Numbered>> {
        let n = self.lanes.len();
        let mut ended = 0;
        for i in 0..n {
            let index = (self.next + i) % n;
            match self.lanes[index].poll_next(cx) {
                Poll::Ready(Some(record)) => {
                    self.next = (index + 1) % n;
                    return Poll::Ready(Some(record));
                }
                Poll::Ready(None) => ended += 1,
                Poll::Pending => {}
            }
        }
        if ended == n {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }

    pub(crate) fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Delivery>> {
        self.poll_numbered(cx)
            .map(|n| n.map(Numbered::into_delivery))
    }
}

/// One shard's way into the channel: numbers each record for settlement, then sends it (into
/// the lane of its partition key, when the channel has lanes).
#[derive(Debug, Clone)]
pub struct ShardFeed {
    lanes: Arc<[LaneTx]>,
    /// The shard's last turn in each lane (see `fair_lane`).
    turns: Arc<[AtomicU64]>,
    settlement: Arc<ShardSettlement>,
}

impl ShardFeed {
    /// Sends one record, waiting while the channel (or its lane) is full; readers waiting for
    /// a place get one in the order they began to wait.
    ///
    /// # Errors
    ///
    /// [`DispatchError::Revoked`] once the shard's lease was lost (nothing is sent);
    /// [`DispatchError::Closed`] when dispatch has shut down.
    pub async fn send(&self, record: Record) -> Result<(), DispatchError> {
        if self.settlement.is_revoked() {
            return Err(self.refused(true));
        }
        let index = self.lane_for(&record);
        let (lane, turn) = (&self.lanes[index], &self.turns[index]);
        let closed = || self.refused(false);
        // A place first, so a record is numbered only once it has one (a send cancelled while
        // it waits leaves nothing behind).
        let settlement = &self.settlement;
        lane.send_with(
            turn,
            || {
                let ordinal = settlement.register_with(record.sequence.clone(), record.arrival);
                Numbered::new(record, settlement.clone(), ordinal)
            },
            |numbered| settlement.unregister(numbered.ordinal()),
        )
        .await
        .map_err(|_| closed())
    }

    /// The shard's settlement.
    pub fn settlement(&self) -> &Arc<ShardSettlement> {
        &self.settlement
    }

    /// A way to send a page of records without a wake-up per record: see [`QuietFeed`].
    pub fn quietly(&self) -> QuietFeed {
        QuietFeed {
            feed: self.clone(),
            held: Vec::new(),
        }
    }

    fn lane_for(&self, record: &Record) -> usize {
        match self.lanes.len() {
            1 => 0,
            n => lane_of(&record.partition_key, n),
        }
    }

    fn refused(&self, revoked: bool) -> DispatchError {
        let (stream, shard) = (
            self.settlement.stream().to_owned(),
            self.settlement.shard().to_owned(),
        );
        if revoked {
            DispatchError::Revoked { stream, shard }
        } else {
            DispatchError::Closed { stream, shard }
        }
    }
}

/// What [`QuietFeed::try_send`] did with a record.
#[derive(Debug)]
pub enum TrySend {
    /// Given a place and a number; queued at the next flush.
    Sent,
    /// No place was free: the record, back (send it with [`QuietFeed::send`], which waits).
    Full(Record),
}

/// A shard's feed that takes places for a page's records as it goes and hands them to the
/// channel together, waking the handlers' loops once, when it is flushed or dropped.
///
/// A reader that hands over a page one record at a time, to a loop that handles each faster
/// than the next arrives, wakes that loop (on another thread) once per record, and takes the
/// channel's lock once per record against the loop taking from it: a thread hop and a
/// contended lock per record, which cost more CPU than the rest of the record's way (`drain`'s
/// CPU figures). Here a record takes its place (and its number) at once, so backpressure and
/// settlement are as with [`ShardFeed::send`]; the records held are queued, in order and in
/// their turns, under one lock per lane when the batch is [flushed](Self::flush) or dropped,
/// which the reader does before anything it waits for. A record so waits at most as long as the
/// reader takes to number the rest of its page, or the channel's capacity, when that comes
/// first.
#[derive(Debug)]
pub struct QuietFeed {
    feed: ShardFeed,
    /// Records with a place and a number, not yet queued, with their lanes.
    held: Vec<(usize, Numbered)>,
}

impl QuietFeed {
    /// Takes a place for `record` if one is free now, and holds it until the next flush.
    ///
    /// # Errors
    ///
    /// [`DispatchError::Revoked`] once the shard's lease was lost; [`DispatchError::Closed`]
    /// when dispatch has shut down. Nothing is sent then.
    pub fn try_send(&mut self, record: Record) -> Result<TrySend, DispatchError> {
        let feed = &self.feed;
        if feed.settlement.is_revoked() {
            return Err(feed.refused(true));
        }
        let index = feed.lane_for(&record);
        match feed.lanes[index].try_place() {
            Ok(true) => {}
            Ok(false) => return Ok(TrySend::Full(record)),
            Err(_) => return Err(feed.refused(false)),
        }
        let ordinal = feed
            .settlement
            .register_with(record.sequence.clone(), record.arrival);
        self.held.push((
            index,
            Numbered::new(record, feed.settlement.clone(), ordinal),
        ));
        Ok(TrySend::Sent)
    }

    /// Queues the records held, lane by lane under one lock each, and wakes those lanes'
    /// loops. Records a closed lane refuses are unnumbered again (the newest first).
    pub fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut self.held);
        let feed = &self.feed;
        let mut refused = Vec::new();
        if feed.lanes.len() == 1 {
            refused = feed.lanes[0].push_all(&feed.turns[0], held.drain(..).map(|(_, n)| n));
        } else {
            for lane in 0..feed.lanes.len() {
                let mine = held.iter().any(|(l, _)| *l == lane);
                if !mine {
                    continue;
                }
                let (these, rest): (Vec<_>, Vec<_>) = held.drain(..).partition(|(l, _)| *l == lane);
                held = rest;
                refused.extend(
                    feed.lanes[lane].push_all(&feed.turns[lane], these.into_iter().map(|(_, n)| n)),
                );
            }
        }
        refused.sort_by_key(|n| std::cmp::Reverse(n.ordinal()));
        for numbered in refused {
            feed.settlement.unregister(numbered.ordinal());
        }
        // Reuse the buffer's memory for the next page.
        held.clear();
        self.held = held;
    }

    /// Sends `record`: held if a place is free, else flushes what is held and waits for a
    /// place as [`ShardFeed::send`] does.
    ///
    /// # Errors
    ///
    /// As [`ShardFeed::send`].
    pub async fn send(&mut self, record: Record) -> Result<(), DispatchError> {
        match self.try_send(record)? {
            TrySend::Sent => Ok(()),
            TrySend::Full(record) => {
                self.flush();
                self.feed.send(record).await
            }
        }
    }
}

impl Drop for QuietFeed {
    fn drop(&mut self) {
        self.flush();
    }
}

/// See [`DeliveryReceiver::closes_all_when_dropped`].
#[derive(Debug)]
pub(crate) struct ClosesAll(Arc<Open>);

impl Drop for ClosesAll {
    fn drop(&mut self) {
        self.0.close();
    }
}
