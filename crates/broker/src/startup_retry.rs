//! How `start()` paces the retries of its checks: pure, no clock of its own.
//!
//! A check that fails transiently (connection refused, throttling, 5xx) is tried again after
//! the shared [`Backoff`] (100 ms doubling to 5 s, jittered), until the start-up deadline:
//! one deadline for the whole `start()`, so a broker whose endpoints never answer fails within
//! it, naming the call and the endpoint, and one whose endpoint opens meanwhile starts.

use std::time::Duration;

use kinesis_lease_core::Backoff;

/// The first wait after a failed start-up call.
const BASE: Duration = Duration::from_millis(100);
/// The longest wait between start-up calls.
const CAP: Duration = Duration::from_secs(5);

/// The retry state of one `start()`.
#[derive(Debug, Clone)]
pub(crate) struct StartupRetry {
    deadline: Duration,
    backoff: Backoff,
    attempts: u32,
}

impl StartupRetry {
    /// Retries until `deadline` after the start.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            deadline,
            backoff: Backoff::new(BASE, CAP),
            attempts: 0,
        }
    }

    /// The deadline, from the start.
    #[cfg(feature = "kcl-import")]
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// After a transient failure `elapsed` into the start: the wait before the next attempt,
    /// never past the deadline, or `None` once the deadline is reached.
    pub(crate) fn after_failure(&mut self, elapsed: Duration) -> Option<Duration> {
        self.attempts += 1;
        if elapsed >= self.deadline {
            return None;
        }
        Some(self.backoff.next_delay().min(self.deadline - elapsed))
    }

    /// After a success: the next failure waits from the base again.
    pub(crate) fn succeeded(&mut self) {
        self.backoff.reset();
        self.attempts = 0;
    }

    /// The failed attempts of the current call.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_stay_within_the_deadline_and_stop_at_it() {
        let deadline = Duration::from_secs(30);
        let mut retry = StartupRetry::new(deadline);
        let mut elapsed = Duration::ZERO;
        let mut waits = Vec::new();
        while let Some(wait) = retry.after_failure(elapsed) {
            assert!(elapsed + wait <= deadline, "never past the deadline");
            assert!(wait <= CAP);
            waits.push(wait);
            elapsed += wait;
            if waits.len() > 10_000 {
                panic!("no end");
            }
        }
        assert!(
            elapsed >= deadline,
            "retried up to the deadline: {elapsed:?}"
        );
        assert_eq!(retry.attempts() as usize, waits.len() + 1);
        assert!(waits[0] <= BASE, "starts from the base");
        retry.succeeded();
        assert_eq!(retry.attempts(), 0);
        assert!(retry.after_failure(Duration::from_secs(1)).unwrap() <= BASE);
        assert_eq!(retry.after_failure(deadline), None);
    }
}
