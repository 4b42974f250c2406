//! `Publisher`: the facade's face of the `kinesis-publisher` crate, the same calls with their
//! errors as [`BrokerError`], so a service handles one error type.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use kinesis_publisher::PublishError;
use kinesis_stream_core::{KinesisApi, PutEntry};

use crate::{BrokerError, Published};

/// Puts records into one stream, in order per partition key, plain or packed into KPL
/// aggregates, retrying what Kinesis did not store.
///
/// Records of one partition key are stored in the order given, retries included: a key has at
/// most one entry in each PutRecords call, so a failed record is put again before any later
/// record of its key. With [`aggregated`](Self::aggregated), records bound for one shard are
/// packed into KPL aggregates, which any KPL-aware consumer (this library, the KCL,
/// aws-kinesis-agg) unpacks. Aggregation needs the stream's shard map (`kinesis:ListShards`),
/// listed again every 30 s and whenever an aggregate lands on another shard than the map said;
/// without permission to list shards, records go plain. See `docs/kpl.md` for what a split
/// or merge does to aggregates in flight.
///
/// # Examples
///
/// ```
/// use kinesis_broker::{Publisher, testing::MemoryStream};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let kinesis = MemoryStream::new();
/// kinesis.create_stream("orders", 1)?;
/// let publisher = Publisher::new(kinesis, "orders");
/// let stored = publisher.put("customer-1", "order #1").await?;
/// assert_eq!(stored.shard, "shardId-000000000000");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Publisher(kinesis_publisher::Publisher);

impl fmt::Debug for Publisher {
    /// The same as the publisher it wraps: `Publisher { .. }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Publisher {
    /// A publisher to `stream` over any Kinesis implementation.
    pub fn new(kinesis: impl KinesisApi + 'static, stream: impl Into<String>) -> Self {
        Self(kinesis_publisher::Publisher::new(kinesis, stream))
    }

    /// A publisher over a shared Kinesis implementation.
    pub fn from_arc(kinesis: Arc<dyn KinesisApi>, stream: impl Into<String>) -> Self {
        Self(kinesis_publisher::Publisher::from_arc(kinesis, stream))
    }

    /// Packs records into KPL aggregates of up to 1 MiB, one shard's records per aggregate.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_broker::{Publisher, PutEntry, testing::MemoryStream};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let kinesis = MemoryStream::new();
    /// kinesis.create_stream("orders", 2)?;
    /// let publisher = Publisher::new(kinesis, "orders").aggregated();
    /// let entries = (0..100).map(|i| PutEntry::new(format!("order #{i}"), format!("customer-{}", i % 7)));
    /// let stored = publisher.put_all(entries.collect()).await?;
    /// assert_eq!(stored.len(), 100);
    /// assert!(stored.iter().all(|s| s.sequence.subsequence().is_some()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn aggregated(self) -> Self {
        Self(self.0.aggregated())
    }

    /// Packs records into KPL aggregates of at most `max_bytes` (capped at 1 MiB): smaller
    /// aggregates bound what a consumer re-reads when it stops inside one.
    pub fn aggregated_within(self, max_bytes: usize) -> Self {
        Self(self.0.aggregated_within(max_bytes))
    }

    /// Puts one record.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Publish`] naming the stream.
    pub async fn put(
        &self,
        partition_key: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Published, BrokerError> {
        Ok(self.0.put(partition_key, payload).await?)
    }

    /// Puts records, each partition key's in the order given; records Kinesis did not store
    /// are put again (with backoff) before any later record of their key. Returns where each
    /// record was stored, in the order given.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Publish`] naming the stream and the record, before anything is put, for a
    /// record Kinesis would refuse (a partition key outside 1 to 256 characters, or over 1 MiB
    /// with its key). Later, for a call that fails for good or 8 calls in a row that store
    /// nothing: [`BrokerError::PartlyPublished`] saying which records were stored, when some
    /// were (put the others again, in order), else [`BrokerError::Publish`].
    pub async fn put_all(&self, entries: Vec<PutEntry>) -> Result<Vec<Published>, BrokerError> {
        Ok(self.0.put_all(entries).await?)
    }
}

impl From<PublishError> for BrokerError {
    fn from(error: PublishError) -> Self {
        match error {
            PublishError::Publish { stream, source } => BrokerError::Publish { stream, source },
            PublishError::PartlyPublished {
                stream,
                published,
                source,
            } => BrokerError::PartlyPublished {
                stream,
                published,
                source,
            },
        }
    }
}
