//! `CoordinatorHandle`: what a subscription's owner holds of its running coordinator: stats,
//! the failure watch, and the ways out (stop reading, release everything, abort).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use kinesis_dispatch::{ShardSettlement, Stuck};
use kinesis_lease_core::{Checkpoint, ErrorChain, Load};
use tokio::sync::watch;

use crate::lag::processing_lag;
use crate::shared::Shared;
use kinesis_shard_reader::Phase;
use kinesis_stream_core::ReaderError;

/// The stored lag before any read reported one.
pub(crate) const UNKNOWN_BEHIND: u64 = u64::MAX;

/// One held shard as [`CoordinatorHandle::stats`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStats {
    /// The shard id.
    pub shard: String,
    /// The lease owner (this broker).
    pub owner: String,
    /// The last checkpoint written.
    pub checkpoint: Option<Checkpoint>,
    /// How far the last read was behind the tip of the shard (Kinesis' MillisBehindLatest: the
    /// *read* lag, not the handling): `Some(0)` is caught up, `None` unknown (no read has
    /// reported it yet since the shard was taken). Records read but not handled do not count:
    /// see [`processing_lag_millis`](Self::processing_lag_millis).
    pub millis_behind: Option<u64>,
    /// Records handed to dispatch.
    pub delivered: u64,
    /// Records settled.
    pub settled: u64,
    /// Records handed to dispatch and not settled (read, not yet handled): with
    /// [`processing_lag_millis`](Self::processing_lag_millis), the processing lag.
    pub in_flight: u64,
    /// How long ago the oldest record read and not yet settled arrived in Kinesis (this host's
    /// wall clock against Kinesis' arrival time): `Some(0)` when every record read has settled,
    /// `None` when its arrival time is unknown. Unlike
    /// [`millis_behind`](Self::millis_behind), which says how far the *read* is behind the tip,
    /// this grows while handlers fall behind or a record keeps failing.
    pub processing_lag_millis: Option<u64>,
    /// Entries held in the settlement window (bounded by `max_unsettled`).
    pub window: u64,
    /// The record holding the checkpoint back, when it has failed at least once or the
    /// settlement window is full; otherwise the oldest record of the shard that has failed and
    /// is not settled (behind a head still on its first attempt), if any.
    pub stuck: Option<Stuck>,
    /// KPL de-aggregation counts: aggregates unpacked, sub-records delivered, malformed
    /// aggregates delivered as they were, sub-records outside the shard's hash key range.
    pub kpl: kinesis_shard_reader::KplStats,
    /// While Kinesis refuses to read the shard at its position (a checkpoint of another
    /// shard, say, written by an operator's `reset` or an import): the position and Kinesis'
    /// reason. The shard is held and not read until the position is readable: reset it to a
    /// position of its own (`kinesis-broker reset --shard .. --to ..`). `None` otherwise.
    pub refused: Option<String>,
    /// While the shard is handed over to another instance (its owner id here) and the write
    /// that moves the row has not been answered: the shard is revoked here (nothing more of it
    /// is delivered) and no handler of it runs, so nothing of it is handled here any more. The
    /// shard leaves these stats once the move is confirmed (or the lease lapses, when every
    /// answer is lost). `None` otherwise, and also while a handler that could not be cancelled
    /// (a stream consumer holding a delivery) may still run.
    pub handing_to: Option<String>,
    /// The shard's load, averaged over the last minute: records and payload bytes handled and
    /// handler time spent, per minute (see [`Load`]). Measured at each renewal and published
    /// on the shard's row with it; `None` before the first, unless the row carried the load
    /// its last holder measured.
    pub load: Option<Load>,
}

/// The running coordinator and shard readers of one subscription.
///
/// Dropping it stops the coordinator and every shard task at once, writing nothing (as
/// [`abort`](Self::abort)): nothing keeps renewing leases it no longer reads, and the leases
/// lapse. [`release_all`](Self::release_all) is the clean way out.
#[derive(Debug)]
pub struct CoordinatorHandle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) coordinator: Option<tokio::task::JoinHandle<()>>,
    pub(crate) fatal: watch::Receiver<Option<Arc<ReaderError>>>,
}

impl Drop for CoordinatorHandle {
    fn drop(&mut self) {
        if let Some(task) = self.coordinator.take() {
            // Aborting the coordinator drops its shard tasks (a JoinSet aborts on drop).
            task.abort();
        }
    }
}

impl CoordinatorHandle {
    /// Stops taking leases and reading; held leases are still renewed (with their checkpoints)
    /// until [`release_all`](Self::release_all).
    pub fn stop_reading(&self) {
        self.shared.phase.send_if_modified(|p| {
            if *p == Phase::Running {
                *p = Phase::Draining;
                true
            } else {
                false
            }
        });
    }

    /// Writes each held shard's final checkpoint with its release and waits for every shard
    /// task to end. Call after the subscription's handlers have finished (or been abandoned).
    pub async fn release_all(mut self) {
        self.stop_reading();
        self.shared.phase.send_replace(Phase::Releasing);
        if let Some(task) = self.coordinator.take() {
            if let Err(error) = task.await {
                tracing::error!(error = %ErrorChain(&error), "coordinator task failed");
            }
        }
        // The coordinator has left the roster and bumped the stream's epoch: the other
        // instances see the released rows at their next epoch read.
    }

    /// Stops the coordinator and every shard task at once, writing nothing, as a crash would:
    /// the leases stay until others see them expire. For failover tests.
    pub fn abort(mut self) {
        if let Some(task) = self.coordinator.take() {
            task.abort();
        }
    }

    /// The shards this broker holds now, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self.shared.held().keys().cloned().collect();
        held.sort();
        held
    }

    /// Per held shard: checkpoint, lag and delivery counts.
    pub fn stats(&self) -> Vec<ShardStats> {
        shard_stats(&self.shared)
    }

    /// This instance's load for the stream (the sum of its held shards' loads) and its
    /// capacity, as its member row publishes them at each renewal.
    pub fn load(&self) -> Load {
        self.shared.instance_load()
    }

    /// A cloneable handle on [`stats`](Self::stats), for other tasks while this one runs.
    pub fn stats_source(&self) -> StatsSource {
        StatsSource {
            shared: self.shared.clone(),
        }
    }

    /// Every record of a held shard that failed at least once and has not settled, in each
    /// shard's order: what a shutdown abandons when its deadline passes.
    pub fn failing(&self) -> Vec<Stuck> {
        let mut failing: Vec<Stuck> = self
            .shared
            .held()
            .values()
            .flat_map(|held| held.settlement.failing())
            .collect();
        failing.sort_by(|a, b| (&a.shard, &a.sequence).cmp(&(&b.shard, &b.sequence)));
        failing
    }

    /// Waits until every delivery of every held shard has settled.
    pub async fn settled(&self) {
        let settlements: Vec<Arc<ShardSettlement>> = self
            .shared
            .held()
            .values()
            .map(|held| held.settlement.clone())
            .collect();
        for settlement in settlements {
            settlement.all_settled().await;
        }
    }

    /// The subscription's stream.
    pub fn stream(&self) -> &str {
        &self.shared.config.stream
    }

    /// Resolves with the first fatal error of the subscription (a deleted stream, an owner id
    /// live in another process).
    pub async fn failed(&self) -> Arc<ReaderError> {
        let mut fatal = self.fatal.clone();
        loop {
            if let Some(error) = fatal.borrow_and_update().clone() {
                return error;
            }
            if fatal.changed().await.is_err() {
                // The coordinator is gone without an error: never resolves.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The fatal error, if one happened.
    pub fn error(&self) -> Option<Arc<ReaderError>> {
        self.fatal.borrow().clone()
    }
}

/// Per held shard of `shared`: checkpoint, lags and delivery counts.
fn shard_stats(shared: &Shared) -> Vec<ShardStats> {
    let now_ms = shared.config.clock.now_ms();
    let mut stats: Vec<ShardStats> = shared
        .held()
        .iter()
        .map(|(shard, held)| {
            let progress = held.settlement.progress();
            // The head when it failed or fills the window; else the oldest failing record
            // behind it (a head still on its first attempt must not hide a failing key).
            let stuck = held
                .settlement
                .stuck()
                .filter(|s| s.attempts > 0 || s.window >= shared.config.max_unsettled as u64)
                .or_else(|| held.settlement.first_failing());
            ShardStats {
                shard: shard.clone(),
                owner: shared.config.owner.clone(),
                checkpoint: held
                    .written
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
                millis_behind: match held.millis_behind.load(Ordering::Relaxed) {
                    UNKNOWN_BEHIND => None,
                    behind => Some(behind),
                },
                delivered: progress.delivered,
                settled: progress.settled,
                in_flight: progress.in_flight(),
                window: progress.window,
                processing_lag_millis: processing_lag(
                    &held.settlement,
                    progress.in_flight(),
                    now_ms,
                ),
                stuck,
                kpl: held.kpl.stats(),
                refused: held.refusal.text(),
                handing_to: held
                    .handing_to
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
                load: *held.load.lock().unwrap_or_else(|p| p.into_inner()),
            }
        })
        .collect();
    stats.sort_by(|a, b| a.shard.cmp(&b.shard));
    stats
}

/// A cloneable view of one subscription's [`ShardStats`], readable from any task while the
/// subscription runs (`CoordinatorHandle::stats_source`).
#[derive(Debug, Clone)]
pub struct StatsSource {
    shared: Arc<Shared>,
}

impl StatsSource {
    /// Per held shard: checkpoint, lags and delivery counts, as now.
    pub fn stats(&self) -> Vec<ShardStats> {
        shard_stats(&self.shared)
    }

    /// This instance's load for the stream (the sum of its held shards' loads) and its
    /// capacity, as its member row publishes them at each renewal.
    pub fn load(&self) -> Load {
        self.shared.instance_load()
    }

    /// The subscription's stream.
    pub fn stream(&self) -> &str {
        &self.shared.config.stream
    }
}
