//! `BrokerStats`: what a running broker holds and how far it got, for dashboards and tests.

pub use kinesis_shard_reader::ShardStats;

/// Every subscription's held shards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerStats {
    /// One entry per subscription.
    pub streams: Vec<StreamStats>,
}

/// One subscription's held shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStats {
    /// The stream.
    pub stream: String,
    /// The shards held now, sorted by id.
    pub shards: Vec<ShardStats>,
}

impl BrokerStats {
    /// The held shards of `stream` (empty if it has no subscription).
    pub fn shards(&self, stream: &str) -> &[ShardStats] {
        self.streams
            .iter()
            .find(|s| s.stream == stream)
            .map_or(&[], |s| &s.shards)
    }

    /// Records delivered, settled and in flight over every held shard.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.streams
            .iter()
            .flat_map(|s| &s.shards)
            .fold((0, 0, 0), |(d, s, f), shard| {
                (d + shard.delivered, s + shard.settled, f + shard.in_flight)
            })
    }
}
