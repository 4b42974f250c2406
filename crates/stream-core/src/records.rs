//! `Record` (one Kinesis record as a reader hands it on) and `RecordsPage` (what one
//! GetRecords call returned).

use std::time::SystemTime;

use bytes::Bytes;
use kinesis_lease_core::SequenceNumber;

/// One Kinesis record as a shard reader hands it to dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's data.
    pub payload: Bytes,
    /// The partition key the producer gave (a sub-record's own key, for a de-aggregated KPL
    /// record).
    pub partition_key: String,
    /// The explicit hash key the producer gave, if any (decimal); only de-aggregated KPL
    /// sub-records carry one, since Kinesis does not return it for plain records.
    pub explicit_hash_key: Option<String>,
    /// Its sequence number (with a subsequence for a de-aggregated KPL record).
    pub sequence: SequenceNumber,
    /// When Kinesis received it, approximately.
    pub arrival: Option<SystemTime>,
}

impl Record {
    /// A record with no arrival time and no explicit hash key.
    pub fn new(
        payload: impl Into<Bytes>,
        partition_key: impl Into<String>,
        sequence: SequenceNumber,
    ) -> Self {
        Self {
            payload: payload.into(),
            partition_key: partition_key.into(),
            explicit_hash_key: None,
            sequence,
            arrival: None,
        }
    }
}

/// What one GetRecords call returned.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecordsPage {
    /// The records, in sequence order.
    pub records: Vec<Record>,
    /// The iterator for the next call; `None` once a closed shard has been read to its end.
    pub next_iterator: Option<String>,
    /// How far the page is behind the tip of the shard.
    pub millis_behind: Option<u64>,
    /// The shards that replaced this one, reported with its end.
    pub child_shards: Vec<String>,
}

impl RecordsPage {
    /// A page of `records` read with the iterator `next_iterator` to go on (`None` once a
    /// closed shard has been read to its end); set the other fields on the value.
    pub fn new(records: Vec<Record>, next_iterator: Option<String>) -> Self {
        Self {
            records,
            next_iterator,
            millis_behind: None,
            child_shards: Vec::new(),
        }
    }
}
