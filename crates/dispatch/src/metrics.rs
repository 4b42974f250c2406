//! Dispatch metrics, through the `metrics` facade (feature `metrics`; without it every call
//! here compiles to nothing).
//!
//! Names follow the KCL where it has one. Per shard (labels `stream`, `shard`; a stream has
//! at most a few thousand shards): `HandlerRetries` and `DeadLetters` (counters). Per stream
//! (label `stream`): `HandlerDuration` (histogram, seconds) of one call in 64 that finish at
//! their first poll and of every call that waits: timing every call would cost more than the
//! 5 % of dispatch that metrics may take (docs/benchmarks.md). `RecordsProcessed` and
//! `DataBytesProcessed` come from the settlement's own counts (`ShardSettlement::progress`,
//! `settled_bytes`), published by the shard's keeper at each renewal: nothing per record.
//!
//! Handles are made once per shard, when its settlement is, not looked up by name and labels
//! at each event.

#[cfg(feature = "metrics")]
mod enabled {
    use std::time::Duration;

    /// One shard's metric handles.
    #[derive(Debug)]
    pub(crate) struct ShardMetrics {
        retries: metrics::Counter,
        dead_letters: metrics::Counter,
        handler: metrics::Histogram,
    }

    impl ShardMetrics {
        pub(crate) fn new(stream: &str, shard: &str) -> Self {
            let labels = [("stream", stream.to_owned()), ("shard", shard.to_owned())];
            Self {
                retries: metrics::counter!("HandlerRetries", &labels),
                dead_letters: metrics::counter!("DeadLetters", &labels),
                handler: metrics::histogram!("HandlerDuration", "stream" => stream.to_owned()),
            }
        }

        /// A handler attempt failed and will be tried again (or given up).
        pub(crate) fn retried(&self) {
            self.retries.increment(1);
        }

        /// A record went to the dead-letter callback.
        pub(crate) fn dead_lettered(&self) {
            self.dead_letters.increment(1);
        }

        /// A handler call took `took`.
        pub(crate) fn handled(&self, took: Duration) {
            self.handler.record(took.as_secs_f64());
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod enabled {
    use std::time::Duration;

    /// Nothing: the `metrics` feature is off.
    #[derive(Debug)]
    pub(crate) struct ShardMetrics;

    impl ShardMetrics {
        pub(crate) fn new(_stream: &str, _shard: &str) -> Self {
            Self
        }
        #[inline(always)]
        pub(crate) fn retried(&self) {}
        #[inline(always)]
        pub(crate) fn dead_lettered(&self) {}
        #[inline(always)]
        pub(crate) fn handled(&self, _took: Duration) {}
    }
}

pub(crate) use enabled::ShardMetrics;

/// True when the `metrics` feature is on: whether to time handler calls at all.
pub(crate) const ON: bool = cfg!(feature = "metrics");

/// One call in this many that finish at their first poll is timed.
pub(crate) const SAMPLE_EVERY: u32 = 64;
