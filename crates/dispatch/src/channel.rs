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

use std::sync::Arc;
use std::task::Poll;

use tokio::sync::watch;

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
        Workers::ByKey(n) if n > 1 => laned(n, config.lane_capacity),
        _ => channel(capacity),
    }
}

fn laned(lanes: usize, capacity: usize) -> (DeliverySender, DeliveryReceiver) {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..lanes.max(1))
        .map(|_| async_channel::bounded(capacity.max(1)))
        .unzip();
    let (open, watch) = watch::channel(true);
    (
        DeliverySender {
            lanes: senders.into(),
            open: watch,
        },
        DeliveryReceiver {
            lanes: receivers.into_iter().map(Box::pin).collect(),
            open: Arc::new(Open(open)),
            next: 0,
        },
    )
}

/// Held by every share of the receiving side: dropped with the last one (or set false by
/// [`DeliveryReceiver::close`]), it tells senders waiting in [`DeliverySender::closed`].
#[derive(Debug)]
struct Open(watch::Sender<bool>);

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
    lanes: Arc<[async_channel::Sender<Numbered>]>,
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

type Lane = std::pin::Pin<Box<async_channel::Receiver<Numbered>>>;

/// The receiving side of a subscription's channel.
#[derive(Debug)]
pub struct DeliveryReceiver {
    /// Pinned once (a receiver keeps its wait registration in place) so that the receiver
    /// itself can move.
    lanes: Vec<Lane>,
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
            return lane.recv().await.ok();
        }
        std::future::poll_fn(|cx| self.poll_numbered(cx)).await
    }

    /// A delivery if one is waiting now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        let n = self.lanes.len();
        (0..n).find_map(|i| {
            let lane = (self.next + i) % n;
            let record = self.lanes[lane].try_recv().ok()?;
            self.next = (lane + 1) % n;
            Some(record.into_delivery())
        })
    }

    /// Stops the channel: senders fail from now on; waiting deliveries can still be received.
    pub fn close(&mut self) {
        for lane in &self.lanes {
            lane.close();
        }
        self.open.0.send_replace(false);
    }

    /// Closes the lanes this receiver takes from, so their senders fail from now on, without
    /// telling [`DeliverySender::closed`] (the receiving side is still draining).
    pub(crate) fn stop_taking(&self) {
        for lane in &self.lanes {
            lane.close();
        }
    }

    /// How many lanes the channel has (1 unless made by [`channel_for`] for lanes by key).
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
                .map(|lane| Box::pin(async_channel::Receiver::clone(lane)))
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
            let lane = (self.next + i) % n;
            match self.lanes[lane].as_mut().poll_next(cx) {
                Poll::Ready(Some(record)) => {
                    self.next = (lane + 1) % n;
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
    lanes: Arc<[async_channel::Sender<Numbered>]>,
    settlement: Arc<ShardSettlement>,
}

impl ShardFeed {
    /// Sends one record, waiting while the channel (or its lane) is full.
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
        let ordinal = self.settlement.register(record.sequence.clone());
        // Numbered before it has a place: a send that fails, or is cancelled while the channel
        // is full (the reader stopping), takes its number back, so nothing waits on a record
        // that was never delivered.
        let numbered = Numbering {
            settlement: &self.settlement,
            ordinal,
        };
        let record = Numbered {
            record,
            settlement: self.settlement.clone(),
            ordinal,
        };
        let sent = match lane.try_send(record) {
            Ok(()) => Ok(()),
            Err(async_channel::TrySendError::Full(record)) => lane.send(record).await.map_err(drop),
            Err(async_channel::TrySendError::Closed(_)) => Err(()),
        };
        match sent {
            Ok(()) => {
                std::mem::forget(numbered);
                Ok(())
            }
            Err(()) => Err(DispatchError::Closed {
                stream: self.settlement.stream().to_owned(),
                shard: self.settlement.shard().to_owned(),
            }),
        }
    }

    /// The shard's settlement.
    pub fn settlement(&self) -> &Arc<ShardSettlement> {
        &self.settlement
    }
}

/// A number given to a record not yet in the channel: dropped (the send failed or was
/// cancelled), it is taken back.
struct Numbering<'a> {
    settlement: &'a ShardSettlement,
    ordinal: u64,
}

impl Drop for Numbering<'_> {
    fn drop(&mut self) {
        self.settlement.unregister(self.ordinal);
    }
}
