//! `ReaderConfig`: the timings and positions of one subscription's readers.

use std::time::Duration;

use crate::Position;

/// Settings of one subscription's coordinator and shard readers.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// The stream to read.
    pub stream: String,
    /// This broker's lease-owner id.
    pub owner: String,
    /// How long a lease lasts unless renewed (10 s).
    pub lease_duration: Duration,
    /// How often a held lease is renewed (3 s); the due checkpoint rides along.
    pub renew_interval: Duration,
    /// How often the stream's epoch is read (1 s): a changed epoch (rows released or handed
    /// over) makes the coordinator list the rows at once.
    pub take_interval: Duration,
    /// How often every row of the stream is read regardless of the epoch (2 s): how crashed
    /// owners are noticed. Costs one read per shard per `list_interval` per instance.
    pub list_interval: Duration,
    /// How often the stream's shards are listed (10 s; also at once when a shard ends).
    pub shard_sync_interval: Duration,
    /// How long a reader at the tip waits after an empty read (1 s).
    pub poll_interval: Duration,
    /// GetRecords calls per second per shard, at most (5, the Kinesis limit).
    pub max_reads_per_second: u32,
    /// Records asked for per GetRecords call (1 to 10,000).
    pub records_per_call: usize,
    /// Where a shard without checkpoint starts (the tip by default). Children of a split or
    /// merge always start at their first record.
    pub start_at: Position,
    /// When set, where every shard this broker takes starts the first time it takes it, over
    /// any stored checkpoint (logged). For a one-off replay or skip; remove it afterwards.
    pub reposition: Option<Position>,
}

impl ReaderConfig {
    /// Defaults for `stream`, read by `owner`.
    pub fn new(stream: impl Into<String>, owner: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            owner: owner.into(),
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(3),
            take_interval: Duration::from_secs(1),
            list_interval: Duration::from_secs(2),
            shard_sync_interval: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_reads_per_second: 5,
            records_per_call: 1_000,
            start_at: Position::Latest,
            reposition: None,
        }
    }

    /// The GetRecords limit for a handler taking `batch_size` records at a time: the batch
    /// size, but at least 1,000 and at most 10,000.
    pub fn records_per_call_for(batch_size: usize) -> usize {
        batch_size.clamp(1_000, 10_000)
    }

    pub(crate) fn min_read_gap(&self) -> Duration {
        Duration::from_secs(1) / self.max_reads_per_second.max(1)
    }
}
