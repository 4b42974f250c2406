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
//! - For unordered workers ([`channel_for`] with [`Workers::Unordered`]) the channel is
//!   multi-consumer (`async-channel`): each worker takes the next delivery from it itself, so
//!   none waits behind a busy one.
//! - For lanes by key ([`channel_for`] with [`Workers::ByKey`]) the channel is made of n
//!   lanes: each feed sends a record straight into the lane of its partition key
//!   ([`lane_of`]), and each lane's loop takes from its own. A slow key then holds back only
//!   the readers whose next record is for its lane, and memory is bounded by n lanes of
//!   `lane_capacity`.
//! - Otherwise (serial, a [`DeliveryStream`](crate::DeliveryStream)) it is one tokio mpsc
//!   channel, whose single receiver is the cheapest.
//!
//! # Places are handed out in turn
//!
//! Every kind of lane hands a freed place to the reader that has waited longest (tokio's mpsc
//! and semaphore are fair). Without that, a reader that just sent could take the freed place
//! again and again, and a shard could starve behind the others
//! (`readers_waiting_for_room_take_turns` saw two of four shards get nothing). A record is
//! numbered only once it has a place, so a send cancelled while it waits leaves nothing
//! behind.

use std::sync::Arc;
use std::task::Poll;

use tokio::sync::{mpsc, watch, Semaphore, TryAcquireError};

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
    build((0..1).map(|_| one_lane(capacity)))
}

/// Creates the channel a [`Dispatcher`](crate::Dispatcher) with `config` takes from
/// directly: for [`Workers::ByKey`]`(n)`, n lanes of `config.lane_capacity` each, fed by
/// partition key; for [`Workers::Unordered`], one channel of `capacity` deliveries that the
/// workers take from side by side; otherwise one channel of `capacity` deliveries.
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
        Workers::ByKey(n) if n > 0 => build((0..n).map(|_| one_lane(config.lane_capacity))),
        Workers::Unordered(_) => {
            let (tx, rx) = async_channel::unbounded();
            let room = Arc::new(Semaphore::new(capacity.clamp(1, Semaphore::MAX_PERMITS)));
            build(std::iter::once((
                LaneTx::Shared {
                    tx,
                    room: room.clone(),
                },
                LaneRx::Shared {
                    rx: Box::pin(rx),
                    room,
                },
            )))
        }
        _ => channel(capacity),
    }
}

fn one_lane(capacity: usize) -> (LaneTx, LaneRx) {
    let (tx, rx) = mpsc::channel(capacity.clamp(1, Semaphore::MAX_PERMITS));
    (LaneTx::One(tx), LaneRx::One(rx))
}

fn build(lanes: impl Iterator<Item = (LaneTx, LaneRx)>) -> (DeliverySender, DeliveryReceiver) {
    let (senders, receivers): (Vec<_>, Vec<_>) = lanes.unzip();
    let (open, watch) = watch::channel(true);
    let rooms = receivers
        .iter()
        .filter_map(|l| match l {
            LaneRx::Shared { room, .. } => Some(room.clone()),
            LaneRx::One(_) => None,
        })
        .collect();
    (
        DeliverySender {
            lanes: senders.into(),
            open: watch,
        },
        DeliveryReceiver {
            lanes: receivers,
            open: Arc::new(Open { open, rooms }),
            next: 0,
        },
    )
}

/// Held by every share of the receiving side. Dropped with the last one, or closed by
/// [`DeliveryReceiver::close`], it tells senders waiting in [`DeliverySender::closed`] and
/// fails those waiting for a place in a shared lane (a tokio lane fails them by itself once
/// its receiver is closed or gone).
#[derive(Debug)]
struct Open {
    open: watch::Sender<bool>,
    rooms: Vec<Arc<Semaphore>>,
}

impl Open {
    fn close(&self) {
        for room in &self.rooms {
            room.close();
        }
        self.open.send_replace(false);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.close();
    }
}

/// A lane's sending side.
#[derive(Debug)]
enum LaneTx {
    /// A tokio mpsc channel: one receiver.
    One(mpsc::Sender<Numbered>),
    /// A multi-consumer queue, unbounded, whose places are the permits of `room`.
    Shared {
        tx: async_channel::Sender<Numbered>,
        room: Arc<Semaphore>,
    },
}

/// A lane's receiving side. A shared receiver is pinned once (it keeps its wait registration
/// in place) so that it can move.
#[derive(Debug)]
enum LaneRx {
    One(mpsc::Receiver<Numbered>),
    Shared {
        rx: std::pin::Pin<Box<async_channel::Receiver<Numbered>>>,
        room: Arc<Semaphore>,
    },
}

impl LaneRx {
    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Numbered>> {
        use futures_util::Stream;
        match self {
            LaneRx::One(rx) => rx.poll_recv(cx),
            LaneRx::Shared { rx, room } => rx.as_mut().poll_next(cx).map(|r| {
                // The record's place is free again.
                room.add_permits(usize::from(r.is_some()));
                r
            }),
        }
    }

    async fn recv(&mut self) -> Option<Numbered> {
        match self {
            LaneRx::One(rx) => rx.recv().await,
            LaneRx::Shared { rx, room } => {
                let r = rx.recv().await.ok();
                room.add_permits(usize::from(r.is_some()));
                r
            }
        }
    }

    fn try_recv(&mut self) -> Option<Numbered> {
        match self {
            LaneRx::One(rx) => rx.try_recv().ok(),
            LaneRx::Shared { rx, room } => {
                let r = rx.try_recv().ok();
                room.add_permits(usize::from(r.is_some()));
                r
            }
        }
    }

    fn close(&mut self) {
        match self {
            LaneRx::One(rx) => rx.close(),
            LaneRx::Shared { rx, room } => {
                rx.close();
                room.close();
            }
        }
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

    /// Another receiver of the same channel, if it is multi-consumer (made by [`channel_for`]
    /// for unordered workers): each delivery goes to one of them.
    pub(crate) fn share(&self) -> Option<Self> {
        let lanes = self
            .lanes
            .iter()
            .map(|lane| match lane {
                LaneRx::Shared { rx, room } => Some(LaneRx::Shared {
                    rx: Box::pin(async_channel::Receiver::clone(rx)),
                    room: room.clone(),
                }),
                LaneRx::One(_) => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            lanes,
            open: self.open.clone(),
            next: 0,
        })
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
        // A place first, so a record is numbered only once it has one (a send cancelled while
        // it waits leaves nothing behind).
        match lane {
            LaneTx::One(tx) => {
                let place = tx.reserve().await.map_err(|_| closed())?;
                let ordinal = self
                    .settlement
                    .register_with(record.sequence.clone(), record.arrival);
                place.send(Numbered {
                    record,
                    settlement: self.settlement.clone(),
                    ordinal,
                });
                Ok(())
            }
            LaneTx::Shared { tx, room } => {
                // The receiver gives the place back when it takes the record.
                match room.try_acquire() {
                    Ok(place) => place.forget(),
                    Err(TryAcquireError::NoPermits) => match room.acquire().await {
                        Ok(place) => place.forget(),
                        Err(_) => return Err(closed()),
                    },
                    Err(TryAcquireError::Closed) => return Err(closed()),
                }
                let ordinal = self
                    .settlement
                    .register_with(record.sequence.clone(), record.arrival);
                let numbered = Numbered {
                    record,
                    settlement: self.settlement.clone(),
                    ordinal,
                };
                // The queue itself is unbounded (the places bound it): this fails only once
                // closed.
                if tx.try_send(numbered).is_err() {
                    self.settlement.unregister(ordinal);
                    return Err(closed());
                }
                Ok(())
            }
        }
    }

    /// The shard's settlement.
    pub fn settlement(&self) -> &Arc<ShardSettlement> {
        &self.settlement
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
