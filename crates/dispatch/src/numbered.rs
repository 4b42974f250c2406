//! `Numbered`: a record on its way through the channel, numbered for its shard's settlement.
//! Apart from the channel so that the channel and its lanes (`fair_lane`) both use it without
//! importing each other.

use std::sync::Arc;

use crate::delivery::Spare;
use crate::{Delivery, Record, ShardSettlement};

/// A record numbered for settlement, on its way through the channel: the [`Delivery`] the
/// handler gets, made by the reader as it numbers the record. It travels as one pointer: a
/// record is a couple of hundred bytes, and the channel, the lane's queue and the loops moved
/// it about a dozen times on its way (a `memcpy` each, about 700 instructions a record in
/// `drain`'s count, a fifth of the broker's own).
#[derive(Debug)]
pub(crate) struct Numbered(Delivery);

impl Numbered {
    /// Numbered `ordinal`, in the memory of `spare` when one is given.
    pub(crate) fn new(
        record: Record,
        settlement: Arc<ShardSettlement>,
        ordinal: u64,
        spare: Option<Spare>,
    ) -> Self {
        Self(Delivery::new_in(spare, record, settlement, ordinal))
    }

    /// Its number in its shard's settlement.
    pub(crate) fn ordinal(&self) -> u64 {
        self.0.ordinal()
    }

    /// Its payload as text (tests).
    #[cfg(test)]
    pub(crate) fn payload_text(&self) -> String {
        String::from_utf8_lossy(self.0.payload()).into_owned()
    }

    /// The delivery around the record.
    pub(crate) fn into_delivery(self) -> Delivery {
        self.0
    }

    /// The record's partition key.
    pub(crate) fn partition_key(&self) -> &str {
        self.0.partition_key()
    }

    /// True once its shard's lease was lost or let go.
    pub(crate) fn is_revoked(&self) -> bool {
        self.0.is_revoked()
    }
}
