//! `MemoryStream`: an in-process Kinesis for users' tests and the quickstart.
//!
//! It behaves like Kinesis where readers can tell: partition keys are hashed with MD5 onto the
//! shards' hash key ranges; sequence numbers increase within a shard; every iterator type
//! works; GetRecords honours its limit and reports MillisBehindLatest; split and merge close
//! their parents (with an ending sequence number) and open children that name them; a closed
//! shard read to its end returns no next iterator and lists its children; iterators expire
//! after 5 minutes; PutRecords refuses a request past Kinesis' limits (500 records, 1 MiB a
//! record and 5 MiB a request, partition keys and data counted). Enhanced fan-out works too
//! (stream consumers and pushed shard subscriptions; see `memory_fan_out`). Faults can be
//! injected: throttle or fail the next N calls of an operation, expire every outstanding
//! iterator, cut every live subscription. Time comes from an injectable [`Clock`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use bytes::Bytes;
use kinesis_dispatch::Record;
use kinesis_lease_core::{BoxFuture, Clock, SequenceNumber, SystemClock};

use crate::error::validate_stream_name;
use crate::kinesis::{
    KinesisApi, PutEntry, PutOutcome, RecordsPage, Shard, ShardSubscription, StartAt,
    StreamConsumer,
};
use crate::memory_fan_out::FanOutState;
use crate::ReaderError;

/// The most bytes of one record, data and partition key (1 MiB), as in Kinesis.
const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// The most bytes of one PutRecords request, data and partition keys (5 MiB), as in Kinesis.
const MAX_REQUEST_BYTES: usize = 5 * 1024 * 1024;

/// How long an iterator lives, as in Kinesis.
const ITERATOR_TTL_MS: u64 = 5 * 60 * 1_000;

/// The operations of a [`MemoryStream`], to inject faults into and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// ListShards.
    ListShards,
    /// GetShardIterator.
    ShardIterator,
    /// GetRecords.
    GetRecords,
    /// PutRecords.
    PutRecords,
    /// SubscribeToShard (the subscribe call; events are cut with
    /// [`MemoryStream::cut_subscriptions`]).
    SubscribeToShard,
    /// RegisterStreamConsumer and DescribeStreamConsumer.
    Consumers,
}

#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) sequence: u128,
    payload: Bytes,
    key: String,
    arrival_ms: u64,
}

#[derive(Debug)]
pub(crate) struct ShardState {
    pub(crate) id: String,
    parent: Option<String>,
    adjacent_parent: Option<String>,
    range: (u128, u128),
    pub(crate) records: Vec<Stored>,
    pub(crate) ending: Option<u128>,
}

impl ShardState {
    /// The index of the first record at `position`.
    pub(crate) fn index_at(&self, position: &StartAt) -> Result<usize, ReaderError> {
        Ok(match position {
            StartAt::TrimHorizon => 0,
            StartAt::Latest => self.records.len(),
            StartAt::AtTimestamp(time) => {
                let ms = crate::kinesis::millis_of(time);
                self.records.partition_point(|r| r.arrival_ms < ms)
            }
            StartAt::AtSequence(seq) => {
                let v = sequence_value(seq)?;
                self.records.partition_point(|r| r.sequence < v)
            }
            StartAt::AfterSequence(seq) => {
                let v = sequence_value(seq)?;
                self.records.partition_point(|r| r.sequence <= v)
            }
        })
    }

    /// The record at `index`, as readers get it.
    pub(crate) fn record(&self, index: usize) -> Record {
        let r = &self.records[index];
        Record {
            payload: r.payload.clone(),
            partition_key: r.key.clone(),
            sequence: SequenceNumber::new(sequence_text(r.sequence), None).expect("digits"),
            arrival: Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.arrival_ms)),
            explicit_hash_key: None,
        }
    }

    /// How far the record at `index` (the next to read) is behind the tip, at `now`.
    pub(crate) fn millis_behind(&self, index: usize, now: u64) -> u64 {
        match self.records.get(index) {
            Some(next) => now.saturating_sub(next.arrival_ms).max(1),
            None => 0,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct StreamState {
    pub(crate) shards: Vec<ShardState>,
    next_sequence: u128,
    next_shard: u32,
}

impl StreamState {
    fn open_shard(
        &mut self,
        range: (u128, u128),
        parent: Option<String>,
        adjacent: Option<String>,
    ) {
        let id = format!("shardId-{:012}", self.next_shard);
        self.next_shard += 1;
        self.shards.push(ShardState {
            id,
            parent,
            adjacent_parent: adjacent,
            range,
            records: Vec::new(),
            ending: None,
        });
    }

    /// The shards that replaced `shard`.
    pub(crate) fn children_of(&self, shard: &str) -> Vec<String> {
        self.shards
            .iter()
            .filter(|c| {
                c.parent.as_deref() == Some(shard) || c.adjacent_parent.as_deref() == Some(shard)
            })
            .map(|c| c.id.clone())
            .collect()
    }

    fn close(&mut self, index: usize) {
        let last = self.next_sequence;
        self.next_sequence += 1;
        let shard = &mut self.shards[index];
        shard.ending = Some(shard.records.last().map_or(last, |r| r.sequence));
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) streams: BTreeMap<String, StreamState>,
    throttle: BTreeMap<Op, u32>,
    fail: BTreeMap<Op, u32>,
    calls: BTreeMap<Op, u64>,
    iterator_generation: u64,
    pub(crate) fan_out: FanOutState,
}

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
/// use kinesis_shard_reader::{KinesisApi, MemoryStream, StartAt};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let kinesis = MemoryStream::new();
/// kinesis.create_stream("orders", 4)?;
/// let stored = kinesis.put("orders", "customer-1", "order #1")?;
/// let it = kinesis.shard_iterator("orders", &stored.shard, &StartAt::TrimHorizon).await?;
/// let page = kinesis.get_records("orders", &stored.shard, &it, 100).await?;
/// assert_eq!(page.records[0].payload, "order #1");
/// # Ok::<(), kinesis_shard_reader::ReaderError>(())
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

pub(crate) fn not_found(stream: &str, operation: &'static str) -> ReaderError {
    ReaderError::StreamNotFound {
        stream: stream.to_owned(),
        operation,
    }
}

pub(crate) fn shard_not_found(stream: &str, shard: &str, operation: &'static str) -> ReaderError {
    ReaderError::ShardNotFound {
        stream: stream.to_owned(),
        shard: shard.to_owned(),
        operation,
    }
}

pub(crate) fn invalid(
    what: &'static str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> ReaderError {
    ReaderError::Invalid {
        what,
        value: value.into(),
        reason: reason.into(),
    }
}

pub(crate) fn sequence_text(sequence: u128) -> String {
    format!("{sequence:021}")
}

fn sequence_value(seq: &SequenceNumber) -> Result<u128, ReaderError> {
    seq.number().parse().map_err(|_| {
        invalid(
            "sequence number",
            seq.number(),
            "not a sequence number of this stream",
        )
    })
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

    /// Creates `stream` with `shards` open shards splitting the hash key space evenly.
    ///
    /// # Errors
    ///
    /// [`ReaderError::Invalid`] for a bad name, zero shards, or a stream that exists.
    pub fn create_stream(&self, stream: &str, shards: u32) -> Result<(), ReaderError> {
        validate_stream_name(stream)?;
        if shards == 0 {
            return Err(invalid(
                "shard count",
                "0",
                format!("stream `{stream}` needs at least one shard"),
            ));
        }
        let mut state = self.state();
        if state.streams.contains_key(stream) {
            return Err(invalid("stream", stream, "already exists"));
        }
        let mut new = StreamState::default();
        let step = u128::MAX / u128::from(shards);
        for i in 0..shards {
            let start = step * u128::from(i);
            let end = if i + 1 == shards {
                u128::MAX
            } else {
                step * u128::from(i + 1) - 1
            };
            new.open_shard((start, end), None, None);
        }
        state.streams.insert(stream.to_owned(), new);
        Ok(())
    }

    /// Deletes `stream`; later calls on it fail with [`ReaderError::StreamNotFound`].
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`] when it does not exist.
    pub fn delete_stream(&self, stream: &str) -> Result<(), ReaderError> {
        let removed = self
            .state()
            .streams
            .remove(stream)
            .map(drop)
            .ok_or_else(|| not_found(stream, "DeleteStream"));
        self.changed.notify_waiters();
        removed
    }

    /// Puts one record; returns its shard and sequence number.
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`], or [`ReaderError::Invalid`] for a partition key that is
    /// empty or longer than 256 characters.
    pub fn put(
        &self,
        stream: &str,
        partition_key: &str,
        payload: impl Into<Bytes>,
    ) -> Result<StoredRecord, ReaderError> {
        let entry = PutEntry::new(payload, partition_key);
        let mut state = self.state();
        let stored = Self::put_one(&mut state, self.clock.now_ms(), stream, &entry);
        drop(state);
        self.changed.notify_waiters();
        stored
    }

    fn put_one(
        state: &mut State,
        now: u64,
        stream: &str,
        entry: &PutEntry,
    ) -> Result<StoredRecord, ReaderError> {
        let len = entry.partition_key.chars().count();
        if !(1..=256).contains(&len) {
            return Err(invalid(
                "partition key",
                &entry.partition_key,
                "1 to 256 characters",
            ));
        }
        let s = state
            .streams
            .get_mut(stream)
            .ok_or_else(|| not_found(stream, "PutRecords"))?;
        let hash = entry
            .explicit_hash_key
            .unwrap_or_else(|| hash_key(&entry.partition_key));
        let sequence = s.next_sequence;
        let shard = s
            .shards
            .iter_mut()
            .find(|sh| sh.ending.is_none() && sh.range.0 <= hash && hash <= sh.range.1)
            .ok_or_else(|| {
                invalid(
                    "hash key",
                    hash.to_string(),
                    format!("no open shard of `{stream}` covers it"),
                )
            })?;
        shard.records.push(Stored {
            sequence,
            payload: entry.payload.clone(),
            key: entry.partition_key.clone(),
            arrival_ms: now,
        });
        let id = shard.id.clone();
        s.next_sequence += 1;
        Ok(StoredRecord {
            shard: id,
            sequence: sequence_text(sequence),
        })
    }

    /// Splits an open shard at `new_starting_hash_key` (the first hash key of the second
    /// child): the parent closes, two children open.
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`]; [`ReaderError::Invalid`] for an unknown or closed
    /// shard or a key outside (or at the start of) its range.
    pub fn split_shard(
        &self,
        stream: &str,
        shard: &str,
        new_starting_hash_key: u128,
    ) -> Result<(), ReaderError> {
        let mut state = self.state();
        let s = state
            .streams
            .get_mut(stream)
            .ok_or_else(|| not_found(stream, "SplitShard"))?;
        let index = open_index(s, stream, shard)?;
        let (start, end) = s.shards[index].range;
        if new_starting_hash_key <= start || new_starting_hash_key > end {
            return Err(invalid(
                "new starting hash key",
                new_starting_hash_key.to_string(),
                format!("must be inside ({start}, {end}] of `{stream}/{shard}`"),
            ));
        }
        s.close(index);
        s.open_shard(
            (start, new_starting_hash_key - 1),
            Some(shard.to_owned()),
            None,
        );
        s.open_shard((new_starting_hash_key, end), Some(shard.to_owned()), None);
        drop(state);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Splits an open shard in the middle of its hash key range.
    ///
    /// # Errors
    ///
    /// As [`split_shard`](Self::split_shard).
    pub fn split_evenly(&self, stream: &str, shard: &str) -> Result<(), ReaderError> {
        let range = self
            .shards(stream)?
            .into_iter()
            .find(|s| s.id == shard)
            .map(|s| s.hash_range)
            .ok_or_else(|| invalid("shard", shard, format!("not a shard of `{stream}`")))?;
        self.split_shard(stream, shard, range.0 + (range.1 - range.0) / 2 + 1)
    }

    /// Merges two open shards with adjacent hash key ranges into one child.
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`]; [`ReaderError::Invalid`] for unknown, closed or
    /// non-adjacent shards.
    pub fn merge_shards(
        &self,
        stream: &str,
        shard: &str,
        adjacent: &str,
    ) -> Result<(), ReaderError> {
        let mut state = self.state();
        let s = state
            .streams
            .get_mut(stream)
            .ok_or_else(|| not_found(stream, "MergeShards"))?;
        let (a, b) = (
            open_index(s, stream, shard)?,
            open_index(s, stream, adjacent)?,
        );
        let (ra, rb) = (s.shards[a].range, s.shards[b].range);
        if ra.1.checked_add(1) != Some(rb.0) && rb.1.checked_add(1) != Some(ra.0) {
            return Err(invalid(
                "shard pair",
                format!("{shard}+{adjacent}"),
                "hash key ranges are not adjacent",
            ));
        }
        s.close(a);
        s.close(b);
        s.open_shard(
            (ra.0.min(rb.0), ra.1.max(rb.1)),
            Some(shard.to_owned()),
            Some(adjacent.to_owned()),
        );
        drop(state);
        self.changed.notify_waiters();
        Ok(())
    }

    /// The shards of `stream`.
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`].
    pub fn shards(&self, stream: &str) -> Result<Vec<Shard>, ReaderError> {
        let state = self.state();
        let s = state
            .streams
            .get(stream)
            .ok_or_else(|| not_found(stream, "ListShards"))?;
        Ok(s.shards
            .iter()
            .map(|sh| Shard {
                id: sh.id.clone(),
                parent: sh.parent.clone(),
                adjacent_parent: sh.adjacent_parent.clone(),
                hash_range: sh.range,
                ending_sequence: sh.ending.map(sequence_text),
            })
            .collect())
    }

    /// Makes the next `n` calls of `op` fail with [`ReaderError::Throttled`].
    pub fn throttle_next(&self, op: Op, n: u32) {
        *self.state().throttle.entry(op).or_default() += n;
    }

    /// Makes the next `n` calls of `op` fail with [`ReaderError::Transient`] (a 500).
    pub fn fail_next(&self, op: Op, n: u32) {
        *self.state().fail.entry(op).or_default() += n;
    }

    /// Drops a closed shard and its records, as Kinesis does once a closed shard is past the
    /// stream's retention: ListShards no longer lists it, and reading it answers
    /// [`ReaderError::ShardNotFound`].
    ///
    /// # Errors
    ///
    /// [`ReaderError::StreamNotFound`]; [`ReaderError::Invalid`] for an unknown or open shard.
    pub fn trim_shard(&self, stream: &str, shard: &str) -> Result<(), ReaderError> {
        let mut state = self.state();
        let s = state
            .streams
            .get_mut(stream)
            .ok_or_else(|| not_found(stream, "TrimShard"))?;
        let index = s
            .shards
            .iter()
            .position(|sh| sh.id == shard)
            .ok_or_else(|| invalid("shard", shard, format!("not a shard of `{stream}`")))?;
        if s.shards[index].ending.is_none() {
            return Err(invalid(
                "shard",
                shard,
                format!("shard of `{stream}` is open; only closed shards age out"),
            ));
        }
        s.shards.remove(index);
        drop(state);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Drops every pending injected fault (throttles and failures not yet consumed).
    pub fn clear_faults(&self) {
        let mut state = self.state();
        state.throttle.clear();
        state.fail.clear();
    }

    /// Expires every iterator handed out so far.
    pub fn expire_iterators(&self) {
        self.state().iterator_generation += 1;
    }

    /// How many calls of `op` were made (faulted ones included).
    pub fn calls(&self, op: Op) -> u64 {
        self.state().calls.get(&op).copied().unwrap_or(0)
    }

    /// Counts the call and applies an injected fault, if any is pending.
    pub(crate) fn enter(
        &self,
        state: &mut State,
        op: Op,
        resource: &str,
    ) -> Result<(), ReaderError> {
        *state.calls.entry(op).or_default() += 1;
        let name = op_name(op);
        if let Some(n) = state.throttle.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReaderError::Throttled {
                operation: name,
                resource: resource.to_owned(),
            });
        }
        if let Some(n) = state.fail.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReaderError::Transient {
                operation: name,
                resource: resource.to_owned(),
                source: "injected failure (HTTP 500)".into(),
            });
        }
        Ok(())
    }

    fn iterator(&self, state: &State, stream: &str, shard: &str, position: usize) -> String {
        format!(
            "mem|{stream}|{shard}|{position}|{}|{}",
            state.iterator_generation,
            self.clock.now_ms()
        )
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::ListShards => "ListShards",
        Op::ShardIterator => "GetShardIterator",
        Op::GetRecords => "GetRecords",
        Op::PutRecords => "PutRecords",
        Op::SubscribeToShard => "SubscribeToShard",
        Op::Consumers => "RegisterStreamConsumer",
    }
}

fn open_index(s: &StreamState, stream: &str, shard: &str) -> Result<usize, ReaderError> {
    let index = s
        .shards
        .iter()
        .position(|sh| sh.id == shard)
        .ok_or_else(|| invalid("shard", shard, format!("not a shard of `{stream}`")))?;
    if s.shards[index].ending.is_some() {
        return Err(invalid(
            "shard",
            shard,
            format!("shard of `{stream}` is closed"),
        ));
    }
    Ok(index)
}

impl KinesisApi for MemoryStream {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        Box::pin(async move {
            self.enter(&mut self.state(), Op::ListShards, stream)?;
            self.shards(stream)
        })
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        Box::pin(async move {
            let mut state = self.state();
            self.enter(&mut state, Op::ShardIterator, &format!("{stream}/{shard}"))?;
            let s = state
                .streams
                .get(stream)
                .ok_or_else(|| not_found(stream, "GetShardIterator"))?;
            let sh = s
                .shards
                .iter()
                .find(|sh| sh.id == shard)
                .ok_or_else(|| shard_not_found(stream, shard, "GetShardIterator"))?;
            let index = sh.index_at(position)?;
            Ok(self.iterator(&state, stream, shard, index))
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
        Box::pin(async move {
            let mut state = self.state();
            let resource = format!("{stream}/{shard}");
            self.enter(&mut state, Op::GetRecords, &resource)?;
            let bad = || {
                invalid(
                    "shard iterator",
                    iterator,
                    format!("not an iterator of `{resource}`"),
                )
            };
            let parts: Vec<&str> = iterator.split('|').collect();
            let [_, it_stream, it_shard, position, generation, issued] = parts[..] else {
                return Err(bad());
            };
            if it_stream != stream || it_shard != shard {
                return Err(bad());
            }
            let (position, generation, issued): (usize, u64, u64) =
                match (position.parse(), generation.parse(), issued.parse()) {
                    (Ok(p), Ok(g), Ok(i)) => (p, g, i),
                    _ => return Err(bad()),
                };
            let now = self.clock.now_ms();
            if generation != state.iterator_generation
                || now.saturating_sub(issued) > ITERATOR_TTL_MS
            {
                return Err(ReaderError::ExpiredIterator {
                    stream: stream.to_owned(),
                    shard: shard.to_owned(),
                });
            }
            let s = state
                .streams
                .get(stream)
                .ok_or_else(|| not_found(stream, "GetRecords"))?;
            let sh = s
                .shards
                .iter()
                .find(|sh| sh.id == shard)
                .ok_or_else(|| shard_not_found(stream, shard, "GetRecords"))?;
            let limit = limit.clamp(1, 10_000);
            let end = (position + limit).min(sh.records.len());
            let records = (position.min(end)..end).map(|i| sh.record(i)).collect();
            let millis_behind = sh.millis_behind(end, now);
            let at_end = end == sh.records.len() && sh.ending.is_some();
            let child_shards = if at_end {
                s.children_of(shard)
            } else {
                Vec::new()
            };
            let next_iterator = (!at_end).then(|| self.iterator(&state, stream, shard, end));
            Ok(RecordsPage {
                records,
                next_iterator,
                millis_behind: Some(millis_behind),
                child_shards,
            })
        })
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
        Box::pin(async move {
            // Kinesis refuses the whole request past its limits.
            if entries.len() > 500 {
                return Err(invalid(
                    "PutRecords batch",
                    entries.len().to_string(),
                    "at most 500 records",
                ));
            }
            let mut total = 0;
            for e in entries {
                let size = e.payload.len() + e.partition_key.len();
                let chars = e.partition_key.chars().count();
                if !(1..=256).contains(&chars) {
                    return Err(invalid(
                        "partition key",
                        e.partition_key.clone(),
                        "1 to 256 characters",
                    ));
                }
                if size > MAX_RECORD_BYTES {
                    return Err(invalid(
                        "PutRecords record",
                        e.partition_key.clone(),
                        format!("{size} bytes with its partition key, over 1 MiB"),
                    ));
                }
                total += size;
            }
            if total > MAX_REQUEST_BYTES {
                return Err(invalid(
                    "PutRecords batch",
                    total.to_string(),
                    "at most 5 MiB of data and partition keys",
                ));
            }
            let mut state = self.state();
            self.enter(&mut state, Op::PutRecords, stream)?;
            if !state.streams.contains_key(stream) {
                return Err(not_found(stream, "PutRecords"));
            }
            let now = self.clock.now_ms();
            let outcomes = entries
                .iter()
                .map(|e| {
                    Self::put_one(&mut state, now, stream, e).map(|stored| PutOutcome::Stored {
                        shard: stored.shard,
                        sequence: stored.sequence,
                    })
                })
                .collect();
            drop(state);
            self.changed.notify_waiters();
            outcomes
        })
    }

    fn register_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        Box::pin(async move { self.register_consumer_now(stream, name) })
    }

    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        Box::pin(async move { self.describe_consumer_now(stream, name) })
    }

    fn deregister_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ReaderError>> {
        Box::pin(async move { self.deregister_consumer_now(stream, name) })
    }

    fn subscribe_to_shard<'a>(
        &'a self,
        stream: &'a str,
        consumer_arn: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<Box<dyn ShardSubscription>, ReaderError>> {
        Box::pin(async move { self.subscribe_now(stream, consumer_arn, shard, position) })
    }
}
