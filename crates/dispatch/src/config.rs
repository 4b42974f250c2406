//! `DispatchConfig` and `Workers`: how a subscription's records meet its handler (how many at
//! once, in what order, batch window, retries). Plain data, checked by `Dispatcher::spawn`.

use std::time::Duration;

use crate::RetryPolicy;

/// How many handlers run at once, and in what order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workers {
    /// One at a time, each shard in order (shards take turns).
    #[default]
    Serial,
    /// Up to n at once, unordered.
    Unordered(usize),
    /// n lanes by partition key: each key in order, keys spread over lanes.
    ByKey(usize),
}

/// The dispatch settings of one subscription.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Serial, unordered workers or lanes by key.
    pub workers: Workers,
    /// The queue of each lane of [`Workers::ByKey`] (default 8).
    pub lane_capacity: usize,
    /// How long a batch waits for more records after its first (default 50 ms).
    pub batch_window: Duration,
    /// What happens when a handler fails.
    pub retry: RetryPolicy,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            workers: Workers::Serial,
            lane_capacity: 8,
            batch_window: Duration::from_millis(50),
            retry: RetryPolicy::default(),
        }
    }
}
