//! Reader and lease metrics, through the `metrics` facade (feature `metrics`; without it every
//! call here compiles to nothing).
//!
//! Names follow the KCL where it has one. Per stream (label `stream`): `LeasesHeld` (gauge),
//! `LeasesTaken`, `LeasesLost` and `HandOvers` (counters: shards taken, lost without a
//! release, and handed to another instance), `MembersFoundDead` (counter: instances this one
//! found dead, their member row standing still for a lease), `RenewalLatency` (histogram, seconds, of each
//! renewal write). Per shard (labels `stream`, `shard`): `MillisBehindLatest` (gauge, kept by
//! the reader, `kinesis-shard-reader`: from each read or fan-out event; 0 once the shard is
//! let go), `RecordsProcessed` and
//! `DataBytesProcessed` (counters of the deliveries settled, published from the shard's
//! settlement at each renewal and when the shard is let go: nothing per record), and the
//! processing lag: `MillisBehindProcessed` (gauge: the age of the oldest record read and not
//! settled, 0 when all settled) and `RecordsUnsettled` (gauge: records read and not settled),
//! set at each renewal and 0 once the shard is let go. The shard's smoothed load (see
//! `load_meter`), set at each renewal and 0 once the shard is let go: `RecordsPerSecond`,
//! `BytesPerSecond` and `HandlerBusyRatio` (handler seconds per second: 0.5 is half a handler
//! busy all the time). Per stream, this instance's total and capacity as its member row
//! publishes them: `InstanceHandlerBusyRatio` and `InstanceCapacity` (gauges).

#[cfg(feature = "metrics")]
mod enabled {
    use std::time::Duration;

    /// One stream's (one subscription's) handles.
    #[derive(Debug)]
    pub(crate) struct StreamMetrics {
        held: metrics::Gauge,
        taken: metrics::Counter,
        lost: metrics::Counter,
        hand_overs: metrics::Counter,
        dead: metrics::Counter,
        renewal: metrics::Histogram,
        busy: metrics::Gauge,
        capacity: metrics::Gauge,
    }

    impl StreamMetrics {
        pub(crate) fn new(stream: &str) -> Self {
            let label = [("stream", stream.to_owned())];
            Self {
                held: metrics::gauge!("LeasesHeld", &label),
                taken: metrics::counter!("LeasesTaken", &label),
                lost: metrics::counter!("LeasesLost", &label),
                hand_overs: metrics::counter!("HandOvers", &label),
                dead: metrics::counter!("MembersFoundDead", &label),
                renewal: metrics::histogram!("RenewalLatency", &label),
                busy: metrics::gauge!("InstanceHandlerBusyRatio", &label),
                capacity: metrics::gauge!("InstanceCapacity", &label),
            }
        }
        pub(crate) fn held(&self, n: usize) {
            self.held.set(n as f64);
        }
        pub(crate) fn taken(&self) {
            self.taken.increment(1);
        }
        pub(crate) fn lost(&self) {
            self.lost.increment(1);
        }
        pub(crate) fn handed_over(&self) {
            self.hand_overs.increment(1);
        }
        pub(crate) fn member_found_dead(&self) {
            self.dead.increment(1);
        }
        pub(crate) fn renewed(&self, took: Duration) {
            self.renewal.record(took.as_secs_f64());
        }
        pub(crate) fn instance_load(&self, load: &Load) {
            self.busy.set(load.busy_share());
            let capacity = load.capacity_milli.unwrap_or(Load::DEFAULT_CAPACITY_MILLI);
            self.capacity.set(capacity as f64 / 1_000.0);
        }
    }

    /// What one holding of a shard settled, published as counter increments, and its
    /// processing lag, published as gauges.
    #[derive(Debug)]
    pub(crate) struct Counted {
        settlement: Arc<ShardSettlement>,
        processed: metrics::Counter,
        bytes: metrics::Counter,
        lag: metrics::Gauge,
        unsettled: metrics::Gauge,
        records_rate: metrics::Gauge,
        bytes_rate: metrics::Gauge,
        busy: metrics::Gauge,
        published: (u64, u64),
    }

    impl Counted {
        pub(crate) fn new(stream: &str, shard: &str, settlement: Arc<ShardSettlement>) -> Self {
            let labels = [("stream", stream.to_owned()), ("shard", shard.to_owned())];
            Self {
                settlement,
                processed: metrics::counter!("RecordsProcessed", &labels),
                bytes: metrics::counter!("DataBytesProcessed", &labels),
                lag: metrics::gauge!("MillisBehindProcessed", &labels),
                unsettled: metrics::gauge!("RecordsUnsettled", &labels),
                records_rate: metrics::gauge!("RecordsPerSecond", &labels),
                bytes_rate: metrics::gauge!("BytesPerSecond", &labels),
                busy: metrics::gauge!("HandlerBusyRatio", &labels),
                published: (0, 0),
            }
        }

        /// Adds what settled since the last call, and sets the processing lag at `now_ms`.
        pub(crate) fn publish(&mut self, now_ms: u64) {
            let progress = self.settlement.progress();
            let unsettled = progress.in_flight();
            self.unsettled.set(unsettled as f64);
            if let Some(lag) = crate::lag::processing_lag(&self.settlement, unsettled, now_ms) {
                self.lag.set(lag as f64);
            }
            let now = (progress.settled, self.settlement.settled_bytes());
            self.processed
                .increment(now.0.saturating_sub(self.published.0));
            self.bytes.increment(now.1.saturating_sub(self.published.1));
            self.published = now;
        }

        /// Sets the shard's smoothed load.
        pub(crate) fn load(&self, load: &Load) {
            self.records_rate.set(load.records_per_sec());
            self.bytes_rate.set(load.bytes_per_sec());
            self.busy.set(load.busy_share());
        }
    }

    impl Drop for Counted {
        /// The shard is let go: its last settlements are counted, and it no longer lags here.
        fn drop(&mut self) {
            self.publish(0);
            self.lag.set(0.0);
            self.unsettled.set(0.0);
            self.records_rate.set(0.0);
            self.bytes_rate.set(0.0);
            self.busy.set(0.0);
        }
    }

    use std::sync::Arc;

    use kinesis_dispatch::ShardSettlement;
    use kinesis_lease_core::Load;
}

#[cfg(not(feature = "metrics"))]
mod enabled {
    use std::time::Duration;

    /// Nothing: the `metrics` feature is off.
    #[derive(Debug)]
    pub(crate) struct StreamMetrics;

    impl StreamMetrics {
        pub(crate) fn new(_stream: &str) -> Self {
            Self
        }
        pub(crate) fn held(&self, _n: usize) {}
        pub(crate) fn taken(&self) {}
        pub(crate) fn lost(&self) {}
        pub(crate) fn handed_over(&self) {}
        pub(crate) fn member_found_dead(&self) {}
        pub(crate) fn renewed(&self, _took: Duration) {}
        pub(crate) fn instance_load(&self, _load: &kinesis_lease_core::Load) {}
    }

    /// Nothing: the `metrics` feature is off.
    #[derive(Debug)]
    pub(crate) struct Counted;

    impl Counted {
        pub(crate) fn new(
            _stream: &str,
            _shard: &str,
            _settlement: std::sync::Arc<kinesis_dispatch::ShardSettlement>,
        ) -> Self {
            Self
        }
        pub(crate) fn publish(&mut self, _now_ms: u64) {}
        pub(crate) fn load(&self, _load: &kinesis_lease_core::Load) {}
    }
}

pub(crate) use enabled::{Counted, StreamMetrics};
