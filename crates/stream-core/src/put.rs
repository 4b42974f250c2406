//! `PutEntry` and `PutOutcome`: one record of a PutRecords call, and what became of it.

use bytes::Bytes;

/// One record to put.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutEntry {
    /// The data.
    pub payload: Bytes,
    /// The partition key (1 to 256 characters); its MD5 picks the shard.
    pub partition_key: String,
    /// A hash key that picks the shard instead of the partition key's MD5.
    pub explicit_hash_key: Option<u128>,
}

impl PutEntry {
    /// An entry routed by its partition key.
    pub fn new(payload: impl Into<Bytes>, partition_key: impl Into<String>) -> Self {
        Self {
            payload: payload.into(),
            partition_key: partition_key.into(),
            explicit_hash_key: None,
        }
    }

    /// The same entry routed by `hash_key` instead of its partition key's MD5.
    pub fn with_hash_key(mut self, hash_key: u128) -> Self {
        self.explicit_hash_key = Some(hash_key);
        self
    }
}

/// The outcome of one entry of a PutRecords call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored at this shard and sequence number.
    Stored {
        /// The shard.
        shard: String,
        /// The sequence number.
        sequence: String,
    },
    /// Not stored (throttled or failed); put it again.
    Failed {
        /// The error code Kinesis gave.
        code: String,
        /// Its message.
        message: String,
    },
}
