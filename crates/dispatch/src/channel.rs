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
//! - The channel is multi-consumer (`async-channel`): unordered workers each take the next
//!   delivery from it themselves, so none waits behind a busy one.
//! - For lanes by key ([`channel_for`] with [`Workers::ByKey`]) the channel is made of n
//!   lanes: each feed sends a record straight into the lane of its partition key
//!   ([`lane_of`]), and each lane's loop takes from its own. A slow key then holds back only
//!   the readers whose next record is for its lane, and memory is bounded by n lanes of
//!   `lane_capacity`.
//!
//! # Places are handed out in turn
//!
//! While no reader waits, a send takes a free place at once. Once one waits, later senders
//! queue behind it (a FIFO turnstile) and the one at the front takes the next place a
//! receiver frees. Without that, a reader that just sent could take the freed place again
//! and again, and a shard could starve behind the others (`readers_waiting_for_room_take_turns`
//! saw two of four shards get nothing). A record is numbered only when it goes into the
//! queue, so a send cancelled while it waits leaves nothing behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::{watch, Notify};

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
    laned(1, capacity)
}

/// Creates the channel a [`Dispatcher`](crate::Dispatcher) with `config` takes from
/// directly: for [`Workers::ByKey`]`(n)`, n lanes of `config.lane_capacity` each, fed by
/// partition key; otherwise one channel of `capacity` deliveries.
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
        Workers::ByKey(n) if n > 0 => laned(n, config.lane_capacity),
        _ => channel(capacity),
    }
}

fn laned(lanes: usize, capacity: usize) -> (DeliverySender, DeliveryReceiver) {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..lanes.max(1))
        .map(|_| {
            let (tx, rx) = async_channel::bounded(capacity.max(1));
            let turns = Arc::new(Turns::default());
            (
                LaneTx {
                    tx,
                    turns: turns.clone(),
                },
                LaneRx {
                    rx: Box::pin(rx),
                    turns,
                },
            )
        })
        .unzip();
    let (open, watch) = watch::channel(true);
    let turns = receivers.iter().map(|l| l.turns.clone()).collect();
    (
        DeliverySender {
            lanes: senders.into(),
            open: watch,
        },
        DeliveryReceiver {
            lanes: receivers,
            open: Arc::new(Open { open, turns }),
            next: 0,
        },
    )
}

/// Held by every share of the receiving side. Dropped with the last one, or closed by
/// [`DeliveryReceiver::close`], it tells senders waiting in [`DeliverySender::closed`] and
/// wakes those waiting for a place (their queue is closed by then, so they fail).
#[derive(Debug)]
struct Open {
    open: watch::Sender<bool>,
    turns: Vec<Arc<Turns>>,
}

impl Open {
    fn close(&self) {
        self.open.send_replace(false);
        for turns in &self.turns {
            turns.wake();
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.close();
    }
}

/// How a lane's senders wait for a place in turn.
#[derive(Debug, Default)]
struct Turns {
    /// Senders waiting for a place; while any does, new senders queue behind them.
    waiting: AtomicUsize,
    /// FIFO (tokio's mutex is fair): the sender holding it takes the next free place.
    turnstile: tokio::sync::Mutex<()>,
    /// Told by receivers, when someone waits, that a place is free (or the lane closed).
    room: Notify,
}

impl Turns {
    fn wake(&self) {
        self.room.notify_waiters();
        self.room.notify_one();
    }
}

/// Counts a sender as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A lane's sending side: its queue and its turns.
#[derive(Debug)]
struct LaneTx {
    tx: async_channel::Sender<Numbered>,
    turns: Arc<Turns>,
}

/// A lane's receiving side. The receiver is pinned once (it keeps its wait registration in
/// place) so that it can move.
#[derive(Debug)]
struct LaneRx {
    rx: std::pin::Pin<Box<async_channel::Receiver<Numbered>>>,
    turns: Arc<Turns>,
}

impl LaneRx {
    /// A record was taken: tells the sender at the front, if one waits, that a place is free.
    fn took(&self, record: Numbered) -> Numbered {
        if self.turns.waiting.load(Ordering::SeqCst) > 0 {
            self.turns.room.notify_one();
        }
        record
    }

    fn close(&self) {
        self.rx.close();
        self.turns.wake();
    }
}

/// A record numbered for settlement, on its way through the channel. The [`Delivery`] around
/// it is made by the receiving side: its allocation is then made and freed on the same thread
/// (the handler's), which costs markedly less than freeing on another thread what the reader's
/// thread allocated.
#[derive(Debug)]
pub(crate) struct Numbered {
    record: Record,
    settlement: Arc<ShardSettlement>,
    ordinal: u64,
}

impl Numbered {
    /// The delivery around the record (an allocation: make it on the handler's thread).
    pub(crate) fn into_delivery(self) -> Delivery {
        Delivery::new(self.record, self.settlement, self.ordinal)
    }

    /// The record's partition key.
    pub(crate) fn partition_key(&self) -> &str {
        &self.record.partition_key
    }

    /// True once its shard's lease was lost or let go.
    pub(crate) fn is_revoked(&self) -> bool {
        self.settlement.is_revoked()
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
        if let [lane] = &self.lanes[..] {
            return lane.rx.recv().await.ok().map(|r| lane.took(r));
        }
        std::future::poll_fn(|cx| self.poll_numbered(cx)).await
    }

    /// A delivery if one is waiting now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let n = self.lanes.len();
        (0..n).find_map(|i| {
            let index = (self.next + i) % n;
            let lane = &self.lanes[index];
            let record = lane.took(lane.rx.try_recv().ok()?);
            self.next = (index + 1) % n;
            Some(record.into_delivery())
        })
    }

    /// Stops the channel: senders fail from now on; waiting deliveries can still be received.
    pub fn close(&mut self) {
        for lane in &self.lanes {
            lane.rx.close();
        }
        self.open.close();
    }

    /// Closes the lanes this receiver takes from, so their senders fail from now on, without
    /// telling [`DeliverySender::closed`] (the receiving side is still draining).
    pub(crate) fn stop_taking(&self) {
        for lane in &self.lanes {
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

    /// Another receiver of the same channel: each delivery goes to one of them (unordered
    /// workers take from the channel side by side).
    pub(crate) fn share(&self) -> Self {
        Self {
            lanes: self
                .lanes
                .iter()
                .map(|lane| LaneRx {
                    rx: Box::pin(async_channel::Receiver::clone(&lane.rx)),
                    turns: lane.turns.clone(),
                })
                .collect(),
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
        use futures_util::Stream;
        let n = self.lanes.len();
        let mut ended = 0;
        for i in 0..n {
            let index = (self.next + i) % n;
            let lane = &mut self.lanes[index];
            match lane.rx.as_mut().poll_next(cx) {
                Poll::Ready(Some(record)) => {
                    self.next = (index + 1) % n;
                    return Poll::Ready(Some(self.lanes[index].took(record)));
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
            return Err(DispatchError::Revoked {
                stream: self.settlement.stream().to_owned(),
                shard: self.settlement.shard().to_owned(),
            });
        }
        let lane = match &self.lanes[..] {
            [lane] => lane,
            lanes => &lanes[lane_of(&record.partition_key, lanes.len())],
        };
        let closed = || DispatchError::Closed {
            stream: self.settlement.stream().to_owned(),
            shard: self.settlement.shard().to_owned(),
        };
        let mut record = record;
        // Nobody waits: take a free place at once.
        if lane.turns.waiting.load(Ordering::SeqCst) == 0 {
            record = match self.try_place(lane, record) {
                Placed::Yes => return Ok(()),
                Placed::Closed => return Err(closed()),
                Placed::Full(record) => record,
            };
        }
        // Wait in turn: behind the senders already waiting, then for a free place.
        lane.turns.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&lane.turns.waiting);
        let _turn = lane.turns.turnstile.lock().await;
        loop {
            let room = lane.turns.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            record = match self.try_place(lane, record) {
                Placed::Yes => return Ok(()),
                Placed::Closed => return Err(closed()),
                Placed::Full(record) => record,
            };
            room.await;
        }
    }

    /// Numbers the record and puts it in the lane if it has a free place; no await, so the
    /// number is taken back at once when it has none.
    fn try_place(&self, lane: &LaneTx, record: Record) -> Placed {
        let ordinal = self.settlement.register(record.sequence.clone());
        let numbered = Numbered {
            record,
            settlement: self.settlement.clone(),
            ordinal,
        };
        match lane.tx.try_send(numbered) {
            Ok(()) => Placed::Yes,
            Err(async_channel::TrySendError::Full(numbered)) => {
                self.settlement.unregister(ordinal);
                Placed::Full(numbered.record)
            }
            Err(async_channel::TrySendError::Closed(_)) => {
                self.settlement.unregister(ordinal);
                Placed::Closed
            }
        }
    }

    /// The shard's settlement.
    pub fn settlement(&self) -> &Arc<ShardSettlement> {
        &self.settlement
    }
}

enum Placed {
    Yes,
    Closed,
    Full(Record),
}

/// See [`DeliveryReceiver::closes_all_when_dropped`].
#[derive(Debug)]
pub(crate) struct ClosesAll(Arc<Open>);

impl Drop for ClosesAll {
    fn drop(&mut self) {
        self.0.close();
    }
}
