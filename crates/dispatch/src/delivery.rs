//! `Delivery`: what a handler gets, one [`Record`] (what a reader hands in) with its place in
//! its shard's settlement.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use kinesis_lease_core::SequenceNumber;

use crate::settlement::ShardSettlement;
use kinesis_stream_core::Record;

struct Data {
    record: Record,
    /// `number[/subsequence]`, made the first time it is asked for.
    sequence_text: std::sync::OnceLock<String>,
    settlement: Arc<ShardSettlement>,
    ordinal: u64,
    /// While a stream consumer holds the delivery (from `DeliveryStream` until its ack or its
    /// drop), it counts as a handler attempt running on its shard.
    held: std::sync::Mutex<Option<crate::settlement::Running>>,
    /// Set once [`Delivery::hand_out`] ran: an ack then has a guard to release (the hot path,
    /// a handler's `Ok`, skips the lock).
    handed_out: std::sync::atomic::AtomicBool,
}

/// The memory of a delivery its handler is done with, handed back to the reader's side of its
/// lane for the next record the reader numbers there.
///
/// # Why
///
/// The reader makes the delivery as it numbers a record, so that the record travels through
/// the channel as one pointer (see `numbered.rs`). Made on the reader's thread and freed on
/// the handler's, each delivery took the allocator's slow path on both (in `drain`'s count,
/// more than the copies it saved); handed back through the lane's lock, which both sides take
/// anyway, the same memory serves record after record.
pub(crate) struct Spare(Arc<Data>);

impl Spare {
    /// True once the shard of the record it last held was let go.
    pub(crate) fn is_revoked(&self) -> bool {
        self.0.settlement.is_revoked()
    }
}

impl fmt::Debug for Spare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Spare")
    }
}

/// One record on its way to a handler, cheap to clone (clones are the same delivery).
///
/// A delivery settles when its handler returns `Ok`, or, from a stream of deliveries, when
/// [`ack`](Delivery::ack) is called. Its shard's checkpoint never passes a delivery that has
/// not settled.
#[derive(Clone)]
pub struct Delivery {
    data: Arc<Data>,
}

impl Delivery {
    pub(crate) fn new(record: Record, settlement: Arc<ShardSettlement>, ordinal: u64) -> Self {
        Self {
            data: Arc::new(Data {
                record,
                sequence_text: std::sync::OnceLock::new(),
                settlement,
                ordinal,
                held: std::sync::Mutex::new(None),
                handed_out: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// As [`new`](Self::new), in the memory of `spare` when one is given (see [`Spare`]).
    pub(crate) fn new_in(
        spare: Option<Spare>,
        record: Record,
        settlement: Arc<ShardSettlement>,
        ordinal: u64,
    ) -> Self {
        let Some(Spare(mut data)) = spare else {
            return Self::new(record, settlement, ordinal);
        };
        match Arc::get_mut(&mut data) {
            Some(d) => {
                d.record = record;
                d.settlement = settlement;
                d.ordinal = ordinal;
                *d.handed_out.get_mut() = false;
                Self { data }
            }
            // A spare is never shared (`into_spare`); made anew all the same.
            None => Self::new(record, settlement, ordinal),
        }
    }

    /// The delivery's memory for another record, once its handler is done with it and nobody
    /// holds a clone: its record's data and keys are dropped now (their memory freed here, as
    /// when a delivery is dropped), the rest is written over by [`new_in`](Self::new_in).
    /// `None` when a clone is still held (a handler kept it): it is freed when that goes.
    pub(crate) fn into_spare(self) -> Option<Spare> {
        let mut data = self.data;
        let d = Arc::get_mut(&mut data)?;
        d.record.payload = Bytes::new();
        d.record.partition_key = String::new();
        d.record.explicit_hash_key = None;
        d.sequence_text = std::sync::OnceLock::new();
        match d.held.get_mut() {
            Ok(held) => *held = None,
            Err(poisoned) => *poisoned.into_inner() = None,
        }
        Some(Spare(data))
    }

    /// The record's data.
    pub fn payload(&self) -> &Bytes {
        &self.data.record.payload
    }

    /// The partition key.
    pub fn partition_key(&self) -> &str {
        &self.data.record.partition_key
    }

    /// The sequence number; for a sub-record of a KPL aggregate, the aggregate's sequence
    /// number with the sub-record's position as subsequence.
    pub fn sequence(&self) -> &SequenceNumber {
        &self.data.record.sequence
    }

    /// The position of a de-aggregated KPL sub-record within its aggregate (0 to n - 1);
    /// `None` for a plain record.
    pub fn subsequence(&self) -> Option<u64> {
        self.data.record.sequence.subsequence()
    }

    /// The explicit hash key of a de-aggregated KPL sub-record, when its producer gave one.
    pub fn explicit_hash_key(&self) -> Option<&str> {
        self.data.record.explicit_hash_key.as_deref()
    }

    /// Its number in its shard's settlement.
    pub(crate) fn ordinal(&self) -> u64 {
        self.data.ordinal
    }

    /// The shard the record was read from.
    pub fn shard(&self) -> &str {
        self.data.settlement.shard()
    }

    /// The stream the record was read from.
    pub fn stream(&self) -> &str {
        self.data.settlement.stream()
    }

    /// When Kinesis received the record (ApproximateArrivalTimestamp); `None` when the source
    /// gave none.
    pub fn arrival(&self) -> Option<SystemTime> {
        self.data.record.arrival
    }

    /// The sequence number as text, `number[/subsequence]`, made once per delivery.
    pub fn sequence_text(&self) -> &str {
        self.data
            .sequence_text
            .get_or_init(|| self.data.record.sequence.to_string())
    }

    /// The payload parsed as JSON into `T` (feature `serde`).
    ///
    /// # Errors
    ///
    /// [`DispatchError::InvalidPayload`](crate::DispatchError::InvalidPayload) naming the
    /// stream, shard, sequence number and expected type, with serde's message (line and
    /// column) as its source. Returned from a handler (`?` converts it), it fails the same way
    /// on every attempt: with a dead-letter callback it goes there at once, without one it is
    /// retried like any handler error (never dropped silently).
    ///
    /// # Examples
    ///
    /// ```
    /// # use kinesis_dispatch::{Delivery, HandlerError};
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// async fn handle(delivery: Delivery) -> Result<(), HandlerError> {
    ///     let order: Order = delivery.json()?;
    ///     println!("order {}", order.id);
    ///     Ok(())
    /// }
    /// ```
    #[cfg(feature = "serde")]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::DispatchError> {
        serde_json::from_slice(self.payload()).map_err(|source| {
            crate::DispatchError::InvalidPayload {
                stream: self.stream().to_owned(),
                shard: self.shard().to_owned(),
                sequence: self.sequence_text().to_owned(),
                expected: std::any::type_name::<T>(),
                source: Box::new(source),
            }
        })
    }

    /// Marks the delivery settled (idempotent). Handlers don't call this: their `Ok` does.
    /// From a stream of deliveries, call it once the record is processed.
    pub fn ack(&self) {
        self.data
            .settlement
            .settle_with(self.data.ordinal, self.data.record.payload.len());
        if self
            .data
            .handed_out
            .load(std::sync::atomic::Ordering::Acquire)
        {
            self.data
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
        }
    }

    /// Counts the delivery as running on its shard until it is acked or dropped: a stream
    /// consumer holds it, and a hand-over of its shard waits for it (at most a lease).
    pub(crate) fn hand_out(&self) {
        let mut held = self.data.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            *held = Some(self.data.settlement.running());
            self.data
                .handed_out
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Counts a handler attempt on this delivery as running on its shard while the guard
    /// lives.
    pub(crate) fn running(&self) -> crate::settlement::Running {
        self.data.settlement.running()
    }

    /// As [`running`](Self::running), borrowing the delivery (no reference count touched).
    pub(crate) fn running_ref(&self) -> crate::settlement::RunningRef<'_> {
        self.data.settlement.running_ref()
    }

    /// Resolves once the delivery's shard lease is lost (not released or handed over).
    pub(crate) async fn abandoned(&self) {
        self.data.settlement.abandoned().await;
    }

    /// Counts a failed handler attempt, for the stuck-record report of its shard.
    pub(crate) fn attempt_failed(&self) {
        self.data
            .settlement
            .attempted(self.data.ordinal, self.partition_key());
        self.data.settlement.metrics().retried();
    }

    /// The shard's metric handles.
    /// Adds `took` of handler time to the shard's (see [`ShardSettlement::busy`]).
    ///
    /// [`ShardSettlement::busy`]: crate::ShardSettlement::busy
    pub(crate) fn add_busy(&self, took: std::time::Duration) {
        self.data.settlement.add_busy(took);
    }

    pub(crate) fn metrics(&self) -> &crate::metrics::ShardMetrics {
        self.data.settlement.metrics()
    }

    /// True once the shard's lease was lost: the delivery will be dropped, not handled, since
    /// its settlement can no longer be checkpointed.
    pub fn is_revoked(&self) -> bool {
        self.data.settlement.is_revoked()
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("stream", &self.stream())
            .field("shard", &self.shard())
            .field("sequence", &self.sequence_text())
            .field("partition_key", &self.partition_key())
            .field("bytes", &self.payload().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: u64) -> SequenceNumber {
        SequenceNumber::new(n.to_string(), None).expect("digits")
    }

    #[test]
    fn a_settled_deliverys_memory_serves_the_next_record_and_a_kept_one_is_never_reused() {
        let (a, b) = (
            ShardSettlement::new("s", "shard-a"),
            ShardSettlement::new("s", "shard-b"),
        );
        let mut first = Record::new("one", "k1", seq(1));
        first.explicit_hash_key = Some("7".into());
        first.arrival = Some(SystemTime::UNIX_EPOCH);
        let delivery = Delivery::new(first, a, 0);
        assert_eq!(delivery.sequence_text(), "1");
        delivery.hand_out();
        let kept = delivery.clone();
        assert!(delivery.into_spare().is_none(), "a clone is held");
        assert_eq!(kept.payload().as_ref(), b"one");
        let memory = Arc::as_ptr(&kept.data);
        let spare = kept.into_spare().expect("nobody else holds it");
        let next = Delivery::new_in(Some(spare), Record::new("two", "k2", seq(2)), b, 5);
        assert_eq!(Arc::as_ptr(&next.data), memory, "the same memory");
        assert_eq!(next.payload().as_ref(), b"two");
        assert_eq!(next.partition_key(), "k2");
        assert_eq!(next.explicit_hash_key(), None);
        assert_eq!(next.arrival(), None);
        assert_eq!(next.sequence(), &seq(2));
        assert_eq!(next.sequence_text(), "2");
        assert_eq!(next.shard(), "shard-b");
        assert_eq!(next.ordinal(), 5);
        assert!(!next
            .data
            .handed_out
            .load(std::sync::atomic::Ordering::SeqCst));
        assert!(next.data.held.lock().expect("held").is_none());
    }
}
