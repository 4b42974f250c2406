//! The one bounded channel a subscription's readers share, and each shard's feed into it.
//!
//! # Backpressure
//!
//! Every reader of a subscription sends into one channel of 64 deliveries (configurable).
//! When handlers fall behind it fills, and every reader's next [`ShardFeed::send`] waits: no
//! shard is read further ahead than the service can handle, and memory stays bounded by the
//! channel, the lanes' queues and the records handlers hold.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::{Delivery, DispatchError, Record, ShardSettlement};

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
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (DeliverySender { tx }, DeliveryReceiver { rx })
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
    tx: mpsc::Sender<Numbered>,
}

impl DeliverySender {
    /// A feed for one shard, numbering its deliveries in `settlement`.
    pub fn feed(&self, settlement: Arc<ShardSettlement>) -> ShardFeed {
        ShardFeed {
            tx: self.tx.clone(),
            settlement,
        }
    }

    /// True once the receiving side is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves once the receiving side is gone (dispatch ended, or a `DeliveryStream` was
    /// dropped).
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// The receiving side of a subscription's channel.
#[derive(Debug)]
pub struct DeliveryReceiver {
    rx: mpsc::Receiver<Numbered>,
}

impl DeliveryReceiver {
    /// The next delivery, `None` once every sender is gone and the channel is empty.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await.map(Numbered::into_delivery)
    }

    /// The next record as it travels, for a router that hands it on to a lane.
    pub(crate) async fn recv_numbered(&mut self) -> Option<Numbered> {
        self.rx.recv().await
    }

    /// A delivery if one is waiting now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok().map(Numbered::into_delivery)
    }

    /// Stops the channel: senders fail from now on; waiting deliveries can still be received.
    pub fn close(&mut self) {
        self.rx.close();
    }

    pub(crate) fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Delivery>> {
        self.rx
            .poll_recv(cx)
            .map(|n| n.map(Numbered::into_delivery))
    }
}

/// One shard's way into the channel: numbers each record for settlement, then sends it.
#[derive(Debug, Clone)]
pub struct ShardFeed {
    tx: mpsc::Sender<Numbered>,
    settlement: Arc<ShardSettlement>,
}

impl ShardFeed {
    /// Sends one record, waiting while the channel is full.
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
        // Reserve first, so a record is numbered only once it has a place in the channel.
        let permit = self.tx.reserve().await.map_err(|_| DispatchError::Closed {
            stream: self.settlement.stream().to_owned(),
            shard: self.settlement.shard().to_owned(),
        })?;
        let ordinal = self.settlement.register(record.sequence.clone());
        permit.send(Numbered {
            record,
            settlement: self.settlement.clone(),
            ordinal,
        });
        Ok(())
    }

    /// The shard's settlement.
    pub fn settlement(&self) -> &Arc<ShardSettlement> {
        &self.settlement
    }
}
