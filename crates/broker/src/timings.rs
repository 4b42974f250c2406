//! `Timings`: the lease and reading intervals a broker's subscriptions share, with their
//! defaults taken from the reader's (one source) and the checks `build()` runs.

use std::time::Duration;

use kinesis_fleet::ReaderConfig;

use crate::BrokerError;

/// Timings shared by the broker's subscriptions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    pub(crate) lease: Duration,
    pub(crate) renew: Duration,
    pub(crate) take: Duration,
    pub(crate) list: Duration,
    pub(crate) shard_sync: Duration,
    pub(crate) poll: Duration,
    pub(crate) shutdown_deadline: Duration,
    pub(crate) startup_deadline: Duration,
}

/// How long `start()` retries transient failures (connection refused, throttling, 5xx) of its
/// checks, by default.
pub(crate) const DEFAULT_STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// How long `shutdown()` lets handlers in flight finish, by default.
const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

impl Default for Timings {
    /// The reader's defaults (`ReaderConfig::new`, the one source of them), and the
    /// broker's own shutdown deadline.
    fn default() -> Self {
        let reader = ReaderConfig::new(String::new(), String::new());
        Self {
            lease: reader.lease_duration,
            renew: reader.renew_interval,
            take: reader.take_interval,
            list: reader.list_interval,
            shard_sync: reader.shard_sync_interval,
            poll: reader.poll_interval,
            shutdown_deadline: DEFAULT_SHUTDOWN_DEADLINE,
            startup_deadline: DEFAULT_STARTUP_DEADLINE,
        }
    }
}

impl Timings {
    /// Refuses timings that cannot work.
    pub(crate) fn validate(&self) -> Result<(), BrokerError> {
        let invalid = |setting, reason: String| Err(BrokerError::InvalidConfig { setting, reason });
        for (setting, value) in [
            ("lease_duration", self.lease),
            ("renew_interval", self.renew),
            ("take_interval", self.take),
            ("list_interval", self.list),
            ("shard_sync_interval", self.shard_sync),
            ("poll_interval", self.poll),
            ("startup_deadline", self.startup_deadline),
        ] {
            if value.is_zero() {
                return invalid(setting, "must be more than zero".into());
            }
        }
        if self.renew >= self.lease {
            return invalid(
                "renew_interval",
                format!(
                    "the renew interval ({:?}) must be shorter than the lease ({:?}); the reader stops at lease - renew after its last renewal",
                    self.renew, self.lease
                ),
            );
        }
        Ok(())
    }
}
