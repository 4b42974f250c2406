//! [`Backoff`]: capped exponential backoff with jitter, the one retry pacing every layer of
//! kinesis-broker uses (store calls, reads, subscriptions, renewals, puts, handler retries).
//!
//! Each wait's ceiling doubles from `base` up to `cap`; a jittered wait is drawn between a tenth
//! of the ceiling and the ceiling, so instances that failed together do not retry together,
//! and no retry comes back at once.

use std::time::Duration;

/// Capped exponential backoff: waits of `base * 2^n`, at most `cap`, jittered or not.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use kinesis_lease_core::Backoff;
///
/// let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(4), Duration::from_secs(1));
/// let wait = backoff.next_delay();
/// assert!(wait >= Duration::from_millis(10) && wait <= Duration::from_millis(100));
/// backoff.reset();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// Waits from `base`, doubling, up to `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The ceiling of wait number `attempt` (from 0): `base * 2^attempt`, at most `cap`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.cap)
    }

    /// The next wait, jittered between a tenth of its ceiling and the ceiling.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.next_ceiling();
        ceiling.mul_f64(0.1 + 0.9 * fastrand::f64())
    }

    /// The next wait without jitter: the ceiling itself.
    pub fn next_ceiling(&mut self) -> Duration {
        let ceiling = self.ceiling(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        ceiling
    }

    /// Starts again from `base` (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_jitter_stays_within_the_ceiling() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let ceilings: Vec<u128> = (0..8).map(|_| b.next_ceiling().as_millis()).collect();
        assert_eq!(ceilings, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        for attempt in 0..100 {
            let ceiling = b.ceiling(attempt);
            let wait = b.next_delay();
            assert!(
                wait <= ceiling && wait >= ceiling / 10,
                "{attempt}: {wait:?}"
            );
        }
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(2), "no overflow");
    }
}
