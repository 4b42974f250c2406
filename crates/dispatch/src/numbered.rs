//! `Numbered`: a record on its way through the channel, numbered for its shard's settlement.
//! Apart from the channel so that the channel and its lanes (`fair_lane`) both use it without
//! importing each other.

use std::sync::Arc;

use crate::{Delivery, Record, ShardSettlement};

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
    pub(crate) fn new(record: Record, settlement: Arc<ShardSettlement>, ordinal: u64) -> Self {
        Self {
            record,
            settlement,
            ordinal,
        }
    }

    /// Its number in its shard's settlement.
    pub(crate) fn ordinal(&self) -> u64 {
        self.ordinal
    }

    /// Its payload as text (tests).
    #[cfg(test)]
    pub(crate) fn payload_text(&self) -> String {
        String::from_utf8_lossy(&self.record.payload).into_owned()
    }

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
