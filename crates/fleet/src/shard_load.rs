//! `ShardLoad`: what a keeper reads of its shard at each tick, the settled counts and handler
//! time, published as metrics and smoothed into the load its row carries (see `load_meter`).

use std::sync::{Arc, Mutex};

use kinesis_dispatch::ShardSettlement;
use kinesis_lease_core::Load;
use tokio::time::Instant;

use crate::load_meter::{LoadMeter, Totals};

/// One holding's load: its meter, its metrics and the figure `stats()` shows (`Held::load`).
#[derive(Debug)]
pub(crate) struct ShardLoad {
    settlement: Arc<ShardSettlement>,
    /// RecordsProcessed, DataBytesProcessed and the load gauges, published at each tick and
    /// when dropped.
    counted: crate::metrics::Counted,
    meter: LoadMeter,
    /// The last figure, shared with `Held::load`.
    shown: Arc<Mutex<Option<Load>>>,
    /// The last rise read (`LoadMeter::rising`), shared with `Held::rising`.
    rising: Arc<Mutex<Option<Load>>>,
    /// When the holding began: the settlement's totals were zero then.
    since: Instant,
    /// The load the row shows: what the last landed write carried, or what the row carried
    /// when it was taken.
    written: Option<Load>,
}

impl ShardLoad {
    /// The load of a holding taken at `since`, whose row carried `prior`.
    pub(crate) fn new(
        stream: &str,
        settlement: Arc<ShardSettlement>,
        prior: Option<&Load>,
        shown: Arc<Mutex<Option<Load>>>,
        rising: Arc<Mutex<Option<Load>>>,
        since: Instant,
    ) -> Self {
        Self {
            counted: crate::metrics::Counted::new(stream, settlement.shard(), settlement.clone()),
            settlement,
            meter: LoadMeter::new(prior),
            shown,
            rising,
            since,
            written: prior.copied(),
        }
    }

    /// Reads the shard now (`now_ms` on the wall clock, for the processing lag): publishes its
    /// metrics and returns its smoothed load, kept for `stats()` and the member row's total.
    pub(crate) fn measure(&mut self, now_ms: u64) -> Load {
        self.counted.publish(now_ms);
        let totals = Totals {
            records: self.settlement.progress().settled,
            bytes: self.settlement.settled_bytes(),
            busy: self.settlement.busy(),
        };
        let load = self.meter.observe(self.since.elapsed(), totals);
        self.counted.load(&load);
        *self.shown.lock().unwrap_or_else(|p| p.into_inner()) = Some(load);
        *self.rising.lock().unwrap_or_else(|p| p.into_inner()) = self.meter.rising();
        load
    }

    /// A write carrying `load` landed: the row shows it now.
    pub(crate) fn landed(&mut self, load: Load) {
        self.written = Some(load);
    }

    /// Reads the shard (as [`measure`](Self::measure)); true when its load drifted from the
    /// one its row shows (`load_meter::drifted`), so that a quiet keeper writes the row anyway.
    pub(crate) fn drifted(&mut self, now_ms: u64) -> bool {
        let load = self.measure(now_ms);
        crate::load_meter::drifted(self.written.as_ref(), &load)
    }
}
