//! `MemoryStream` itself: the handle tests hold, clones sharing the same streams.

use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_lease_core::{Clock, SystemClock};
use tokio::sync::Notify;

use crate::state::State;

/// Where [`MemoryStream::put`] stored a record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredRecord {
    /// The shard.
    pub shard: String,
    /// Its sequence number.
    pub sequence: String,
}

/// An in-process Kinesis; clones share the same streams. See the module docs.
///
/// # Examples
///
/// ```
/// use kinesis_stream_core::{KinesisApi, StartAt};
/// use kinesis_stream_memory::MemoryStream;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let kinesis = MemoryStream::new();
/// kinesis.create_stream("orders", 4)?;
/// let stored = kinesis.put("orders", "customer-1", "order #1")?;
/// let it = kinesis.shard_iterator("orders", &stored.shard, &StartAt::TrimHorizon).await?;
/// let page = kinesis.get_records("orders", &stored.shard, &it, 100).await?;
/// assert_eq!(page.records[0].payload, "order #1");
/// # Ok::<(), kinesis_stream_core::ReaderError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStream {
    state: Arc<Mutex<State>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Told of every change a subscription may push (records put, shards split, merged or
    /// trimmed, streams deleted, subscriptions cut, consumers deregistered).
    pub(crate) changed: Arc<Notify>,
}

impl Default for MemoryStream {
    fn default() -> Self {
        Self::new()
    }
}

/// The MD5 hash key of a partition key, as Kinesis computes it.
pub fn hash_key(partition_key: &str) -> u128 {
    kinesis_kpl::partition_key_hash(partition_key)
}

impl MemoryStream {
    /// An empty Kinesis on the system clock.
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            clock: Arc::new(SystemClock),
            changed: Arc::new(Notify::new()),
        }
    }

    /// The same Kinesis stamping and reading arrival times from `clock`.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
