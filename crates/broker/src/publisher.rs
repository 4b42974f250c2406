//! `Publisher`: puts records into a stream in order per partition key, plain or packed into
//! KPL aggregates, retrying what Kinesis did not store.
//!
//! The planning of each call (which records go in, how they are packed) is pure and lives in
//! `publish_plan`; this file does the I/O: the calls, the retries and the shard map.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kinesis_lease_core::SequenceNumber;
use kinesis_shard_reader::{KinesisApi, PutEntry, PutOutcome, ReaderError};

use crate::publish_plan::{plan_call, Part, ShardMap};
use crate::BrokerError;

/// Calls in a row that store nothing before [`Publisher::put_all`] gives up.
const FRUITLESS_CALLS: u32 = 8;

/// Where one record was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// The shard it was stored on.
    pub shard: String,
    /// Its sequence number; for a record packed into a KPL aggregate, the aggregate's sequence
    /// number with the record's position in it as subsequence (what consumers checkpoint).
    pub sequence: SequenceNumber,
}

/// Puts records into one stream.
///
/// Records of one partition key are stored in the order given, retries included: a key has at
/// most one entry in each PutRecords call, so a failed record is put again before any later
/// record of its key. With [`aggregated`](Self::aggregated), records bound for one shard are
/// packed into KPL aggregates (as the Kinesis Producer Library writes them), which any KPL-aware
/// consumer (this library, the KCL, aws-kinesis-agg) unpacks; a key's records then travel
/// together in one aggregate per call.
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
/// let stored = publisher.put("customer-1", "order #1").await?;
/// assert_eq!(stored.shard, "shardId-000000000000");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Publisher {
    kinesis: Arc<dyn KinesisApi>,
    stream: String,
    /// The most bytes per aggregate, when aggregating.
    aggregate: Option<usize>,
    /// The open shards' hash key ranges, listed when first needed and again when a record
    /// lands elsewhere than the map said (the stream was resharded).
    map: Arc<Mutex<Option<Arc<ShardMap>>>>,
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
            aggregate: None,
            map: Arc::default(),
        }
    }

    /// Packs records into KPL aggregates of up to 1 MiB, one shard's records per aggregate.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_broker::{MemoryStream, Publisher, PutEntry};
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
        self.aggregated_within(kinesis_kpl::MAX_RECORD_BYTES)
    }

    /// Packs records into KPL aggregates of at most `max_bytes` (capped at 1 MiB): smaller
    /// aggregates bound what a consumer re-reads when it stops inside one.
    pub fn aggregated_within(mut self, max_bytes: usize) -> Self {
        self.aggregate = Some(max_bytes.min(kinesis_kpl::MAX_RECORD_BYTES));
        self
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

    /// Puts records, each partition key's in the order given; records Kinesis did not store
    /// are put again (with backoff) before any later record of their key. Returns where each
    /// record was stored, in the order given.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Publish`] naming the stream: a record Kinesis would refuse (a partition
    /// key outside 1 to 256 characters, or over 1 MiB with its key), a call that fails for
    /// good, or 8 calls in a row that store nothing. Records stored before the error stay
    /// stored.
    pub async fn put_all(&self, entries: Vec<PutEntry>) -> Result<Vec<Published>, BrokerError> {
        for entry in &entries {
            self.validate(entry)?;
        }
        let mut results: Vec<Option<Published>> = vec![None; entries.len()];
        let mut remaining: Vec<usize> = (0..entries.len()).collect();
        let mut fruitless = 0;
        let mut delay = Duration::from_millis(50);
        while !remaining.is_empty() {
            let map = match self.aggregate {
                Some(_) => Some(self.shard_map().await?),
                None => None,
            };
            let call = plan_call(&entries, &remaining, map.as_deref().zip(self.aggregate));
            let stored_before = remaining.len();
            match self.kinesis.put_records(&self.stream, &call.request).await {
                Ok(outcomes) => {
                    for (part, outcome) in call.parts.iter().zip(outcomes) {
                        let PutOutcome::Stored { shard, sequence } = outcome else {
                            continue;
                        };
                        self.stored(part, &shard, &sequence, &mut results)?;
                    }
                }
                Err(error) if error.is_retryable() => {
                    tracing::warn!(stream = %self.stream, error = &error as &dyn std::error::Error, "PutRecords failed; retrying");
                }
                Err(error) => return Err(self.error(error)),
            }
            remaining.retain(|&i| results[i].is_none());
            if remaining.len() == stored_before {
                fruitless += 1;
                if fruitless >= FRUITLESS_CALLS {
                    return Err(self.error(ReaderError::Throttled {
                        operation: "PutRecords",
                        resource: self.stream.clone(),
                    }));
                }
            } else {
                fruitless = 0;
            }
            let failed = call
                .parts
                .iter()
                .any(|part| first_entry(part).is_some_and(|i| results[i].is_none()));
            if failed {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            } else {
                delay = Duration::from_millis(50);
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// Records where `part`'s entries were stored.
    fn stored(
        &self,
        part: &Part,
        shard: &str,
        sequence: &str,
        results: &mut [Option<Published>],
    ) -> Result<(), BrokerError> {
        let number = |sub| {
            SequenceNumber::new(sequence, sub).map_err(|e| {
                self.error(ReaderError::Invalid {
                    what: "PutRecords sequence number",
                    value: sequence.to_owned(),
                    reason: e.to_string(),
                })
            })
        };
        match part {
            Part::Plain(i) => {
                results[*i] = Some(Published {
                    shard: shard.to_owned(),
                    sequence: number(None)?,
                });
            }
            Part::Aggregate {
                entries,
                shard: expected,
            } => {
                if expected != shard {
                    // The stream was resharded since the map was listed: list it again.
                    tracing::info!(stream = %self.stream, %expected, %shard, "aggregate stored on another shard than mapped; listing shards again");
                    *self.map.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
                for (position, &i) in entries.iter().enumerate() {
                    results[i] = Some(Published {
                        shard: shard.to_owned(),
                        sequence: number(Some(position as u64))?,
                    });
                }
            }
        }
        Ok(())
    }

    async fn shard_map(&self) -> Result<Arc<ShardMap>, BrokerError> {
        if let Some(map) = self.map.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(map);
        }
        let shards = self
            .kinesis
            .list_shards(&self.stream)
            .await
            .map_err(|e| self.error(e))?;
        let map = Arc::new(ShardMap::new(&shards));
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = Some(map.clone());
        Ok(map)
    }

    fn validate(&self, entry: &PutEntry) -> Result<(), BrokerError> {
        let chars = entry.partition_key.chars().count();
        let invalid = |reason: String| {
            self.error(ReaderError::Invalid {
                what: "record",
                value: entry.partition_key.clone(),
                reason,
            })
        };
        if !(1..=256).contains(&chars) {
            return Err(invalid(format!(
                "a partition key has 1 to 256 characters, this one {chars}"
            )));
        }
        let bytes = entry.payload.len() + entry.partition_key.len();
        if bytes > kinesis_kpl::MAX_RECORD_BYTES {
            return Err(invalid(format!(
                "a record takes at most {} bytes with its partition key, this one {bytes}",
                kinesis_kpl::MAX_RECORD_BYTES
            )));
        }
        Ok(())
    }

    fn error(&self, source: ReaderError) -> BrokerError {
        BrokerError::Publish {
            stream: self.stream.clone(),
            source: Box::new(source),
        }
    }
}

/// The first caller entry a part carries.
fn first_entry(part: &Part) -> Option<usize> {
    match part {
        Part::Plain(i) => Some(*i),
        Part::Aggregate { entries, .. } => entries.first().copied(),
    }
}
