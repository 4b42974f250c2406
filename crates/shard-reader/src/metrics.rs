//! The reader's metrics, through the `metrics` facade (feature `metrics`; without it every call
//! here compiles to nothing), with labels `stream` and `shard`: `MillisBehindLatest` (gauge),
//! set from each read or fan-out event and 0 once the shard is let go; `ReadRefused` (gauge),
//! 1 while Kinesis refuses to read the shard at its position (see `refusal`), else 0. The fleet's metrics (leases,
//! processing lag) are `kinesis-fleet`'s.

#[cfg(feature = "metrics")]
mod enabled {
    /// One shard's reading handles.
    #[derive(Debug)]
    pub struct ShardMetrics {
        behind: metrics::Gauge,
        refused: metrics::Gauge,
    }

    impl ShardMetrics {
        /// The handles of `shard` of `stream`.
        pub fn new(stream: &str, shard: &str) -> Self {
            Self {
                behind: metrics::gauge!(
                    "MillisBehindLatest",
                    "stream" => stream.to_owned(),
                    "shard" => shard.to_owned()
                ),
                refused: metrics::gauge!(
                    "ReadRefused",
                    "stream" => stream.to_owned(),
                    "shard" => shard.to_owned()
                ),
            }
        }

        /// The shard's read is `millis` behind its tip.
        pub fn behind(&self, millis: u64) {
            self.behind.set(millis as f64);
        }

        /// Kinesis refuses (`true`) or reads again (`false`) the shard at its position.
        pub fn refused(&self, refused: bool) {
            self.refused.set(if refused { 1.0 } else { 0.0 });
        }
    }

    impl Drop for ShardMetrics {
        /// The shard is let go (its reader ended): this instance no longer reads it, so it is
        /// no longer behind on it.
        fn drop(&mut self) {
            self.behind.set(0.0);
            self.refused.set(0.0);
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod enabled {
    /// Nothing: the `metrics` feature is off.
    #[derive(Debug)]
    pub struct ShardMetrics;

    impl ShardMetrics {
        /// Nothing: the `metrics` feature is off.
        pub fn new(_stream: &str, _shard: &str) -> Self {
            Self
        }

        /// Nothing: the `metrics` feature is off.
        pub fn behind(&self, _millis: u64) {}

        /// Nothing: the `metrics` feature is off.
        pub fn refused(&self, _refused: bool) {}
    }
}

pub use enabled::ShardMetrics;
