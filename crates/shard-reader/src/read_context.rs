//! `ReadContext`: what every reader of one subscription shares (the Kinesis source, the
//! reading settings, the fan-out consumer's ARN, the slot for a fatal error), and
//! `ReadSettings`, the part of a subscription's settings that reading needs.
//!
//! The fleet (`kinesis-fleet`) builds one per subscription and hands it to each reader it
//! starts; the reader needs nothing else of the fleet.

use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::ErrorChain;
use kinesis_stream_core::{KinesisApi, ReaderError};
use tokio::sync::watch;

use crate::consumer_arn::ConsumerArn;

/// How a subscription's shards are read.
#[derive(Debug, Clone)]
pub struct ReadSettings {
    /// The stream to read.
    pub stream: String,
    /// How long a reader at the tip waits after an empty read (1 s).
    pub poll_interval: Duration,
    /// GetRecords calls per second per shard, at most (5, the Kinesis limit).
    pub max_reads_per_second: u32,
    /// Records asked for per GetRecords call (1 to 10,000).
    pub records_per_call: usize,
    /// The most deliveries a shard's settlement window holds: past it the shard is not read
    /// further until its head settles, and the stuck record is reported.
    pub max_unsettled: usize,
    /// When set, shards are read by enhanced fan-out through the stream consumer of this name
    /// instead of polling.
    pub fan_out: Option<String>,
}

impl ReadSettings {
    /// The least time between two reads of one shard (`1 s / max_reads_per_second`).
    pub fn min_read_gap(&self) -> Duration {
        Duration::from_secs(1) / self.max_reads_per_second.max(1)
    }
}

/// What the readers of one subscription share.
#[derive(Debug)]
pub struct ReadContext {
    /// How shards are read.
    pub config: ReadSettings,
    /// The Kinesis source.
    pub kinesis: Arc<dyn KinesisApi>,
    /// The fan-out consumer's ARN, once registered (readers then subscribe instead of
    /// polling). Updated when a reader registers it again.
    pub consumer_arn: ConsumerArn,
    /// The subscription's fatal error, once one happened (the first one wins).
    pub fatal: watch::Sender<Option<Arc<ReaderError>>>,
}

impl ReadContext {
    /// A context reading with `config` from `kinesis`, with no consumer ARN and no fatal error
    /// yet.
    pub fn new(config: ReadSettings, kinesis: Arc<dyn KinesisApi>) -> Self {
        Self {
            config,
            kinesis,
            consumer_arn: ConsumerArn::new(),
            fatal: watch::Sender::new(None),
        }
    }

    /// Records a fatal error (the first one wins) for the subscription to surface.
    pub fn fail(&self, error: ReaderError) {
        tracing::error!(stream = %self.config.stream, error = %ErrorChain(&error), "subscription failed");
        self.fatal.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(Arc::new(error));
                true
            } else {
                false
            }
        });
    }
}
