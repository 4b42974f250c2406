//! `KinesisApi`: the few Kinesis calls readers and publishers need, over any backend.
//!
//! Two implementations: [`AwsKinesis`](crate::AwsKinesis) over `aws-sdk-kinesis`, and
//! [`MemoryStream`](crate::MemoryStream), in process, for tests and the quickstart.

use std::fmt;

use bytes::Bytes;
use kinesis_dispatch::Record;
use kinesis_lease_core::{BoxFuture, SequenceNumber};

use crate::ReaderError;

/// One shard as ListShards describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// `shardId-000000000000`.
    pub id: String,
    /// The shard it was split from, or the first of the two merged into it.
    pub parent: Option<String>,
    /// The second parent of a merge.
    pub adjacent_parent: Option<String>,
    /// Its hash key range, inclusive.
    pub hash_range: (u128, u128),
    /// Set once the shard is closed (split or merged); never comparable with real sequence
    /// numbers on some emulators, so readers detect the end by a missing next iterator.
    pub ending_sequence: Option<String>,
}

impl Shard {
    /// The parents (zero, one or two).
    pub fn parents(&self) -> Vec<String> {
        self.parent
            .iter()
            .chain(self.adjacent_parent.iter())
            .cloned()
            .collect()
    }
}

/// Where a shard iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// The oldest record still in the shard.
    TrimHorizon,
    /// After the newest record: only records put from now on.
    Latest,
    /// The first record that arrived at or after this time (ms since the epoch).
    AtTimestamp(u64),
    /// At this record.
    AtSequence(SequenceNumber),
    /// Just after this record.
    AfterSequence(SequenceNumber),
}

/// What one GetRecords call returned.
#[derive(Debug, Clone, Default)]
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

/// One record to put.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// The Kinesis calls of readers and publishers. Object safe: readers hold
/// `Arc<dyn KinesisApi>`.
pub trait KinesisApi: Send + Sync + fmt::Debug {
    /// Every shard of `stream`, open and closed, following pages to the end.
    fn list_shards<'a>(&'a self, stream: &'a str)
        -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>>;

    /// A shard iterator at `position`.
    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a Position,
    ) -> BoxFuture<'a, Result<String, ReaderError>>;

    /// Up to `limit` records (1 to 10,000) from `iterator`. `stream` and `shard` name the
    /// resource in errors.
    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>>;

    /// Puts up to 500 records; the result has one outcome per entry, in order.
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>>;
}
