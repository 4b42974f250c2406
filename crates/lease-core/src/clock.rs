//! `Clock`: where a store reads "now" when it stamps a lease expiry.
//!
//! No condition reads a clock: takes are fenced on the row's counter, and renew, checkpoint,
//! release and hand-over on the holder's owner id and token (see
//! [`LeaseStore`](crate::LeaseStore)). The clock only stamps `expiry_ms` (now + lease) for
//! operators reading the table; no instance decides anything by it. Every store takes its
//! clock from the caller, so tests inject a [`ManualClock`] (or a skewed clock) to show that
//! the stamped expiry changes nothing.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wall clock in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in ms since the epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to; clones share one time.
///
/// # Examples
///
/// ```
/// use kinesis_lease_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(10));
/// assert_eq!(clock.now_ms(), 11_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock (it may go backwards, as wall clocks do).
    pub fn set(&self, now_ms: u64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// Milliseconds in a duration, saturating.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
