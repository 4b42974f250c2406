//! `Publisher`: puts records into a stream in order per partition key, plain or packed into
//! KPL aggregates, retrying what Kinesis did not store.
//!
//! The planning of each call (which records go in, how they are packed) is pure and lives in
//! `publish_plan`; this file does the I/O: the calls, the retries and the shard map.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kinesis_lease_core::SequenceNumber;
use kinesis_stream_core::{KinesisApi, PutEntry, PutOutcome, ReaderError};

use crate::publish_plan::{self, plan_call, Aggregation, Part, Queues, ShardMap};
use crate::{PublishError, Published};

/// Calls in a row that store nothing before [`Publisher::put_all`] gives up.
const FRUITLESS_CALLS: u32 = 8;

/// How long a listed shard map is used before it is listed again.
const MAP_TTL: Duration = Duration::from_secs(30);

/// A shard map and when it was listed.
type Listed = (tokio::time::Instant, Arc<ShardMap>);

/// What one call stored.
enum Round {
    /// Every entry of the call.
    All,
    /// Some of them.
    Some,
    /// None (or the call failed).
    Nothing,
}

/// Puts records into one stream.
///
/// Records of one partition key are stored in the order given, retries included: a key has at
/// most one entry in each PutRecords call, so a failed record is put again before any later
/// record of its key. With [`aggregated`](Self::aggregated), records bound for one shard are
/// packed into KPL aggregates (as the Kinesis Producer Library writes them), which any KPL-aware
/// consumer (this library, the KCL, aws-kinesis-agg) unpacks; a key's records then travel
/// together in one aggregate per call. Aggregation needs the stream's shard map
/// (`kinesis:ListShards`): it is listed again every 30 s and whenever an aggregate lands on
/// another shard than the map said. Until then, after a split or merge, an aggregate may carry
/// records of two child shards, as the KPL's may: this library delivers them all, the KCL drops
/// such an aggregate, and a key split that way may be read on two shards at once (see
/// `docs/kpl.md`). Without permission to list shards, records go plain.
///
/// # Examples
///
/// ```
/// use kinesis_publisher::Publisher;
/// use kinesis_stream_memory::MemoryStream;
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
    map: Arc<Mutex<Option<Listed>>>,
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
    /// use kinesis_publisher::Publisher;
    /// use kinesis_stream_core::PutEntry;
    /// use kinesis_stream_memory::MemoryStream;
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
    /// [`PublishError::Publish`] naming the stream.
    pub async fn put(
        &self,
        partition_key: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Published, PublishError> {
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
    /// [`PublishError::Publish`] naming the stream and the record, before anything is put, for a
    /// record Kinesis would refuse (a partition key outside 1 to 256 characters, or over 1 MiB
    /// with its key). Later, for a call that fails for good or 8 calls in a row that store
    /// nothing: [`PublishError::PartlyPublished`] saying which records were stored, when some
    /// were (put the others again, in order), else [`PublishError::Publish`].
    pub async fn put_all(&self, entries: Vec<PutEntry>) -> Result<Vec<Published>, PublishError> {
        for entry in &entries {
            self.validate(entry)?;
        }
        let mut results: Vec<Option<Published>> = vec![None; entries.len()];
        let mut queues = Queues::new(&entries);
        // Where each record goes, computed once (aggregation groups records by shard).
        let hashes = match self.aggregate {
            Some(_) => publish_plan::hashes(&entries),
            None => Vec::new(),
        };
        let mut fruitless = 0;
        let mut backoff =
            kinesis_lease_core::Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        while queues.waiting() > 0 {
            let mut stored = Vec::new();
            let outcome = self
                .put_round(&entries, &hashes, &queues, &mut results, &mut stored)
                .await;
            queues.stored(&stored);
            let progress = match outcome {
                Ok(progress) => progress,
                Err(error) if error.is_retryable() => {
                    tracing::warn!(stream = %self.stream, error = &error as &dyn std::error::Error, "putting records failed; retrying");
                    Round::Nothing
                }
                Err(error) => return Err(self.partly(results, error)),
            };
            match progress {
                Round::All => {
                    fruitless = 0;
                    backoff.reset();
                    continue;
                }
                Round::Some => fruitless = 0,
                Round::Nothing => {
                    fruitless += 1;
                    if fruitless >= FRUITLESS_CALLS {
                        let error = ReaderError::Throttled {
                            operation: "PutRecords",
                            resource: self.stream.clone(),
                        };
                        return Err(self.partly(results, error));
                    }
                }
            }
            // Some records were refused (throttled): back off before putting them again.
            tokio::time::sleep(backoff.next_ceiling()).await;
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// Plans and makes one PutRecords call for the waiting records; fills `results` and
    /// `stored` (the indexes stored) for every record the call stored, even when it then
    /// reports an error.
    async fn put_round(
        &self,
        entries: &[PutEntry],
        hashes: &[u128],
        queues: &Queues,
        results: &mut [Option<Published>],
        stored: &mut Vec<usize>,
    ) -> Result<Round, ReaderError> {
        let call = match self.aggregate {
            Some(limit) => {
                let map = self.shard_map().await?;
                let how = Aggregation {
                    map: &map,
                    limit,
                    hashes,
                };
                plan_call(entries, queues.all(), Some(how))
            }
            // A plain call takes at most one record per key: the first waiting of each.
            None => plan_call(entries, queues.heads(), None),
        };
        let outcomes = self
            .kinesis
            .put_records(&self.stream, &call.request)
            .await?;
        let mut parts_stored = 0;
        let mut unreadable = None;
        for (part, outcome) in call.parts.iter().zip(outcomes) {
            if let PutOutcome::Stored { shard, sequence } = outcome {
                parts_stored += 1;
                match self.stored(part, &shard, &sequence, results) {
                    Ok(indexes) => stored.extend(indexes),
                    Err(error) => unreadable = unreadable.or(Some(error)),
                }
            }
        }
        if let Some(error) = unreadable {
            return Err(error);
        }
        Ok(match parts_stored {
            0 => Round::Nothing,
            n if n == call.parts.len() => Round::All,
            _ => Round::Some,
        })
    }

    /// The error for a `put_all` that stopped: [`PublishError::PartlyPublished`] when some
    /// records were stored.
    fn partly(&self, results: Vec<Option<Published>>, source: ReaderError) -> PublishError {
        if results.iter().all(Option::is_none) {
            return self.error(source);
        }
        PublishError::PartlyPublished {
            stream: self.stream.clone(),
            published: results,
            source: Box::new(source),
        }
    }

    /// Records where `part`'s entries were stored; returns their indexes.
    fn stored(
        &self,
        part: &Part,
        shard: &str,
        sequence: &str,
        results: &mut [Option<Published>],
    ) -> Result<Vec<usize>, ReaderError> {
        let number = |sub| {
            SequenceNumber::new(sequence, sub).map_err(|e| ReaderError::Invalid {
                what: "PutRecords sequence number",
                value: sequence.to_owned(),
                reason: e.to_string(),
            })
        };
        match part {
            Part::Plain(i) => {
                results[*i] = Some(Published {
                    shard: shard.to_owned(),
                    sequence: number(None)?,
                });
                Ok(vec![*i])
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
                let base = number(None)?;
                for (position, &i) in entries.iter().enumerate() {
                    results[i] = Some(Published {
                        shard: shard.to_owned(),
                        sequence: base.with_subsequence(Some(position as u64)),
                    });
                }
                Ok(entries.clone())
            }
        }
    }

    /// The shard map: listed when first needed, again once it is [`MAP_TTL`] old (a split or
    /// merge since), and again at once when an aggregate lands elsewhere than it said. When
    /// listing is refused for good, an empty map: records then go plain.
    async fn shard_map(&self) -> Result<Arc<ShardMap>, ReaderError> {
        if let Some((listed, map)) = self.map.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            if listed.elapsed() < MAP_TTL {
                return Ok(map);
            }
        }
        let map = match self.kinesis.list_shards(&self.stream).await {
            Ok(shards) => Arc::new(ShardMap::new(&shards)),
            Err(error) if error.is_retryable() => return Err(error),
            // Not allowed to list shards (a role that may only put, say): with no map, every
            // record goes plain, which needs no map, until the next listing.
            Err(error) => {
                tracing::warn!(stream = %self.stream, error = &error as &dyn std::error::Error, "cannot list shards to aggregate; putting records plain");
                Arc::new(ShardMap::default())
            }
        };
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((tokio::time::Instant::now(), map.clone()));
        Ok(map)
    }

    fn validate(&self, entry: &PutEntry) -> Result<(), PublishError> {
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

    fn error(&self, source: ReaderError) -> PublishError {
        PublishError::Publish {
            stream: self.stream.clone(),
            source: Box::new(source),
        }
    }
}
