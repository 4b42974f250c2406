//! `Publisher`: puts records into a stream, in batches of up to 500, retrying the ones Kinesis
//! throttled.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kinesis_shard_reader::{KinesisApi, PutEntry, PutOutcome, ReaderError};

use crate::BrokerError;

/// How many rounds a batch's throttled entries are retried.
const ROUNDS: u32 = 8;

/// Puts records into one stream.
///
/// # Examples
///
/// ```
/// use kinesis_broker::{MemoryStream, Publisher};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let kinesis = MemoryStream::new();
/// kinesis.create_stream("orders", 1)?;
/// let publisher = Publisher::new(kinesis, "orders");
/// let (shard, sequence) = publisher.put("customer-1", "order #1").await?;
/// # let _ = (shard, sequence);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Publisher {
    kinesis: Arc<dyn KinesisApi>,
    stream: String,
}

impl Publisher {
    /// A publisher to `stream` over any Kinesis implementation.
    pub fn new(kinesis: impl KinesisApi + 'static, stream: impl Into<String>) -> Self {
        Self::from_arc(Arc::new(kinesis), stream)
    }

    /// A publisher over a shared Kinesis implementation.
    pub fn from_arc(kinesis: Arc<dyn KinesisApi>, stream: impl Into<String>) -> Self {
        Self {
            kinesis,
            stream: stream.into(),
        }
    }

    /// Puts one record; returns its shard and sequence number.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Publish`] naming the stream.
    pub async fn put(
        &self,
        partition_key: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<(String, String), BrokerError> {
        let mut stored = self
            .put_all(vec![PutEntry::new(payload, partition_key)])
            .await?;
        stored.pop().ok_or_else(|| {
            self.error(ReaderError::Invalid {
                what: "PutRecords response",
                value: String::new(),
                reason: "no outcome for the record".to_owned(),
            })
        })
    }

    /// Puts records in order, in batches of up to 500; entries Kinesis did not store are put
    /// again (up to 8 rounds with backoff). Returns each record's shard and sequence number.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Publish`] naming the stream when a call fails or entries stay unstored.
    pub async fn put_all(
        &self,
        entries: Vec<PutEntry>,
    ) -> Result<Vec<(String, String)>, BrokerError> {
        let mut out = Vec::with_capacity(entries.len());
        for chunk in entries.chunks(500) {
            let mut results: Vec<Option<(String, String)>> = vec![None; chunk.len()];
            let mut pending: Vec<usize> = (0..chunk.len()).collect();
            let mut delay = Duration::from_millis(50);
            for round in 0..ROUNDS {
                let batch: Vec<PutEntry> = pending.iter().map(|&i| chunk[i].clone()).collect();
                let outcomes = match self.kinesis.put_records(&self.stream, &batch).await {
                    Ok(outcomes) => outcomes,
                    Err(error) if error.is_retryable() && round + 1 < ROUNDS => {
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                        continue;
                    }
                    Err(error) => return Err(self.error(error)),
                };
                let mut still = Vec::new();
                for (&i, outcome) in pending.iter().zip(outcomes) {
                    match outcome {
                        PutOutcome::Stored { shard, sequence } => {
                            results[i] = Some((shard, sequence))
                        }
                        PutOutcome::Failed { .. } => still.push(i),
                    }
                }
                pending = still;
                if pending.is_empty() {
                    break;
                }
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            if !pending.is_empty() {
                return Err(self.error(ReaderError::Throttled {
                    operation: "PutRecords",
                    resource: self.stream.clone(),
                }));
            }
            out.extend(results.into_iter().flatten());
        }
        Ok(out)
    }

    fn error(&self, source: ReaderError) -> BrokerError {
        BrokerError::Publish {
            stream: self.stream.clone(),
            source: Box::new(source),
        }
    }
}
