//! `StartAt`: where a shard iterator (or a fan-out subscription) starts, and the millisecond
//! times checkpoints store `AT_TIMESTAMP` positions in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kinesis_lease_core::SequenceNumber;

/// Where a shard iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still in the shard.
    TrimHorizon,
    /// After the newest record: only records put from now on.
    Latest,
    /// The first record that arrived at or after this time (Kinesis keeps milliseconds).
    AtTimestamp(SystemTime),
    /// At this record.
    AtSequence(SequenceNumber),
    /// Just after this record.
    AfterSequence(SequenceNumber),
}

impl StartAt {
    /// At a time given in milliseconds since the Unix epoch, as checkpoints store it.
    pub fn at_millis(millis: u64) -> Self {
        StartAt::AtTimestamp(time_of_millis(millis))
    }
}

/// Milliseconds since the Unix epoch (0 for a time before it).
pub fn millis_of(time: &SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `millis` milliseconds after the Unix epoch.
pub fn time_of_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}
