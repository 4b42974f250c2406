//! `TokioClock`: a wall clock for tests and benchmarks on tokio's paused time.
//!
//! The broker reads a wall clock (`BrokerBuilder::wall_clock`) where instances must agree on
//! a moment: a `LATEST` start pinned as a time, and the time a hand-over's token carries, by
//! which another instance balancing by load tells that a shard was handed a moment ago and
//! stays. On paused time the system clock hardly moves while minutes pass, so a test that
//! balances by load must give every broker a clock that follows tokio's.

use kinesis_lease_core::Clock;
use tokio::time::Instant;

/// A wall clock that reads `start_ms` at the moment it was made and then moves with tokio's
/// clock (paused or not); clones share that start.
///
/// # Examples
///
/// ```
/// use kinesis_broker::lease::Clock;
/// use kinesis_broker::testing::TokioClock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new(1_700_000_000_000);
/// tokio::time::sleep(std::time::Duration::from_secs(180)).await;
/// assert_eq!(clock.now_ms(), 1_700_000_180_000);
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: Instant,
    start_ms: u64,
}

impl TokioClock {
    /// A clock reading `start_ms` now.
    pub fn new(start_ms: u64) -> Self {
        Self {
            start: Instant::now(),
            start_ms,
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.start);
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.start_ms.saturating_add(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time_and_clones_share_the_start() {
        let clock = TokioClock::new(5_000);
        let clone = clock;
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(clock.now_ms(), 8_000);
        assert_eq!(clone.now_ms(), 8_000);
    }
}
