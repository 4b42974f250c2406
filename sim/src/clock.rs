//! `SimClock`: a wall clock that follows tokio's (paused) time, skewed per instance; the skew
//! can jump (an instance's clock stepped on resume after a freeze). Clones share the skew.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use kinesis_lease_core::Clock;
use tokio::time::Instant;

/// Wall-clock milliseconds: `base_ms` plus the tokio time elapsed since `start`, plus a skew.
/// Under paused time it moves only when the simulation's time does, so runs are repeatable.
#[derive(Debug, Clone)]
pub struct SimClock {
    base_ms: u64,
    start: Instant,
    skew_ms: Arc<AtomicI64>,
}

/// The simulated epoch: 2026-01-01T00:00:00Z.
pub const BASE_MS: u64 = 1_767_225_600_000;

impl SimClock {
    /// The true clock (Kinesis'), started now.
    pub fn new(start: Instant) -> Self {
        Self {
            base_ms: BASE_MS,
            start,
            skew_ms: Arc::default(),
        }
    }

    /// A clock of its own running `skew_ms` ahead (negative: behind) of this one.
    pub fn skewed(&self, skew_ms: i64) -> Self {
        Self {
            skew_ms: Arc::new(AtomicI64::new(skew_ms)),
            ..self.clone()
        }
    }

    /// Steps this clock (and its clones) by `ms`, either way.
    pub fn jump(&self, ms: i64) {
        self.skew_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// The skew now, in ms.
    pub fn skew_ms(&self) -> i64 {
        self.skew_ms.load(Ordering::SeqCst)
    }

    /// Milliseconds of simulated time since the start, unskewed.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        let now = self.base_ms.saturating_add(self.elapsed_ms());
        now.saturating_add_signed(self.skew_ms())
    }
}
