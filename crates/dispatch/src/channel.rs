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
//! for one record of each busy shard, not the lane's whole capacity. Each shard's records keep
//! their order. Places are handed out in turn too (see `room`): a shard with nothing queued
//! waits for one place, ahead of the shards that have records queued, which wait for a batch
//! of places each in the order they began to wait, and newcomers may pass them only a batch's
//! worth of times before queuing behind. Without turns for places, a reader that just sent
//! could take the freed place again and again, and a shard could starve behind the others
//! (`readers_waiting_for_room_take_turns` saw two of four shards get nothing). A record is
//! numbered only once it has a place, so a send cancelled while it waits leaves nothing
//! behind.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::watch;

use crate::delivery::Spare;
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
        self.try_recv_reusing(None)
    }

    /// As [`try_recv`](Self::try_recv), handing `spare` (the memory of a delivery handled) to
    /// the first lane looked at, for its senders' next records.
    pub(crate) fn try_recv_reusing(&mut self, mut spare: Option<Spare>) -> Option<Delivery> {
        let n = self.lanes.len();
        for i in 0..n {
            let index = (self.next + i) % n;
            if let Some(record) = self.lanes[index].try_recv(spare.take()) {
                self.next = (index + 1) % n;
                return Some(record.into_delivery());
            }
        }
        None
    }

    /// The loop is about to wait: `spare` (the memory of a delivery handled) goes to the first
    /// lane, which frees the spares of shards let go (see `LaneRx::idle`).
    pub(crate) fn idle(&mut self, mut spare: Option<Spare>) {
        if let Some(lane) = self.lanes.first_mut() {
            lane.idle(spare.take());
        }
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
    /// Sends one record, waiting while the channel (or its lane) is full for one place (see
    /// the module docs for who gets a freed place first).
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
                Numbered::new(record, settlement.clone(), ordinal, None)
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
            held: (0..self.lanes.len()).map(|_| Vec::new()).collect(),
            spare: vec![0; self.lanes.len()],
            spares: Vec::new(),
            expected: 0,
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
///
/// A feed told how many records it still has also takes places for them a batch at a time
/// while they are free (a lane's share of them, by key, and at most a batch), not one lock per
/// record against the loop taking from the lane.
///
/// The other way round, when the channel is full: a feed told how many records it still has
/// ([`expecting`](Self::expecting)) and whose shard already has records queued waits for a
/// batch of places (a quarter of the lane; half of a small one, at most 4), not one, so the loop wakes the reader once
/// per batch rather than once per record handled; a shard with nothing queued waits for one
/// place, ahead of the busy ones, so a shard just taken is not held back by the batches.
///
/// Places taken for a batch and not used yet stay taken until the next flush: a caller must
/// flush (or drop the feed) before it awaits anything else, as the reader does, or the
/// channel runs short of places while it waits.
#[derive(Debug)]
pub struct QuietFeed {
    feed: ShardFeed,
    /// Records with a place and a number, not yet queued, per lane.
    held: Vec<Vec<Numbered>>,
    /// Places taken per lane and not used yet (given back at the flush).
    spare: Vec<usize>,
    /// Memory of deliveries handled, taken from the lanes with places, for the records held
    /// next (see `Spare`).
    spares: Vec<Spare>,
    /// Records the caller said it still has to send, this one included.
    expected: usize,
}

impl QuietFeed {
    /// Says that `records` more are coming (a page's length, say), so a send that finds the
    /// channel full waits for places for several of them at once. Without it a feed waits for
    /// one place at a time.
    #[must_use]
    pub fn expecting(mut self, records: usize) -> Self {
        self.expect(records);
        self
    }

    /// Says, as [`expecting`](Self::expecting) does, how many records are still to come (this
    /// one included) from here on: a reader that unpacks aggregates says so once it knows how
    /// many sub-records one holds. The count is a hint, summed over the lanes: a feed waits for
    /// at most a batch of places in one lane, and gives back at the flush what it did not use.
    pub fn expect(&mut self, records: usize) {
        self.expected = records;
    }

    /// Takes a place for `record` if one is free now, and holds it until the next flush.
    ///
    /// # Errors
    ///
    /// [`DispatchError::Revoked`] once the shard's lease was lost; [`DispatchError::Closed`]
    /// when dispatch has shut down. Nothing is sent then.
    #[inline]
    pub fn try_send(&mut self, record: Record) -> Result<TrySend, DispatchError> {
        let feed = &self.feed;
        if feed.settlement.is_revoked() {
            return Err(feed.refused(true));
        }
        let index = feed.lane_for(&record);
        if self.spare[index] == 0 {
            // Places for what is still to come in one go (a lane's share of it, by key), not
            // a lock per record against the loop taking from the lane.
            let wanted = self.expected.div_ceil(feed.lanes.len());
            match feed.lanes[index].try_places_lending(wanted, Some(&mut self.spares)) {
                Ok(0) => return Ok(TrySend::Full(record)),
                Ok(taken) => self.spare[index] = taken,
                Err(_) => return Err(feed.refused(false)),
            }
        }
        self.spare[index] -= 1;
        self.hold(index, record);
        Ok(TrySend::Sent)
    }

    /// Numbers `record`, which has a place in lane `index`, and holds it.
    fn hold(&mut self, index: usize, record: Record) {
        let feed = &self.feed;
        let ordinal = feed
            .settlement
            .register_with(record.sequence.clone(), record.arrival);
        let spare = self.spares.pop();
        self.held[index].push(Numbered::new(
            record,
            feed.settlement.clone(),
            ordinal,
            spare,
        ));
        self.expected = self.expected.saturating_sub(1);
    }

    /// Queues the records held, lane by lane under one lock each, and wakes those lanes'
    /// loops; gives back places taken and not used. Records a closed lane refuses are
    /// unnumbered again (the newest first).
    pub fn flush(&mut self) {
        for (lane, spare) in self.spare.iter_mut().enumerate() {
            self.feed.lanes[lane].give_back(std::mem::take(spare));
        }
        // Spares taken with places not used go back too (any lane's serve as well).
        if !self.spares.is_empty() {
            self.feed.lanes[0].return_spares(&mut self.spares);
        }
        let feed = &self.feed;
        let mut refused = Vec::new();
        for (lane, held) in self.held.iter_mut().enumerate() {
            if held.is_empty() {
                continue;
            }
            // The buffer's memory stays for the next page.
            refused.extend(feed.lanes[lane].push_all(&feed.turns[lane], held.drain(..)));
        }
        if refused.is_empty() {
            return;
        }
        refused.sort_by_key(|n| std::cmp::Reverse(n.ordinal()));
        for numbered in refused {
            feed.settlement.unregister(numbered.ordinal());
        }
    }

    /// Sends `record`: held if a place is free, else flushes what is held and waits for
    /// places (see the type's docs), then holds it.
    ///
    /// # Errors
    ///
    /// As [`ShardFeed::send`].
    pub async fn send(&mut self, record: Record) -> Result<(), DispatchError> {
        let record = match self.try_send(record)? {
            TrySend::Sent => return Ok(()),
            TrySend::Full(record) => record,
        };
        self.flush();
        let index = self.feed.lane_for(&record);
        let wanted = self.expected.max(1);
        let feed = &self.feed;
        let places = feed.lanes[index]
            .places(&feed.turns[index], wanted)
            .await
            .map_err(|_| feed.refused(false))?;
        if feed.settlement.is_revoked() {
            feed.lanes[index].give_back(places);
            return Err(feed.refused(true));
        }
        feed.lanes[index].take_spares(places, &mut self.spares);
        self.spare[index] += places - 1;
        self.hold(index, record);
        Ok(())
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
