//! `BrokerStats`: what a running broker holds and how far it got, for dashboards and tests.

pub use kinesis_fleet::ShardStats;
pub use kinesis_lease_core::Load;

/// Every subscription's held shards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BrokerStats {
    /// One entry per subscription.
    pub streams: Vec<StreamStats>,
}

/// One subscription's held shards.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStats {
    /// The stream.
    pub stream: String,
    /// The shards held now, sorted by id.
    pub shards: Vec<ShardStats>,
    /// This instance's load for the stream, the sum of [`ShardStats::load`], with its
    /// capacity ([`SubscriptionBuilder::capacity`](crate::SubscriptionBuilder::capacity)): what
    /// its member row in the lease table publishes, and `kinesis-broker members` shows.
    pub load: Load,
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
    pub fn totals(&self) -> Totals {
        self.streams
            .iter()
            .flat_map(|s| &s.shards)
            .fold(Totals::default(), |t, shard| Totals {
                delivered: t.delivered + shard.delivered,
                settled: t.settled + shard.settled,
                in_flight: t.in_flight + shard.in_flight,
            })
    }
}

/// Record counts summed over every held shard ([`BrokerStats::totals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Totals {
    /// Records handed to dispatch.
    pub delivered: u64,
    /// Records settled.
    pub settled: u64,
    /// Records handed to dispatch and not settled yet.
    pub in_flight: u64,
}

/// A cloneable view of a running broker's [`BrokerStats`]
/// ([`RunningBroker::stats_handle`](crate::RunningBroker::stats_handle)): readable from any
/// task while the broker runs, including while `run_until` holds it.
#[derive(Debug, Clone)]
pub struct StatsHandle {
    pub(crate) sources: Vec<kinesis_fleet::StatsSource>,
}

impl StatsHandle {
    /// Every subscription's held shards, as now.
    pub fn stats(&self) -> BrokerStats {
        BrokerStats {
            streams: self
                .sources
                .iter()
                .map(|s| StreamStats {
                    stream: s.stream().to_owned(),
                    shards: s.stats(),
                    load: s.load(),
                })
                .collect(),
        }
    }
}
