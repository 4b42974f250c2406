//! The state behind a `MemoryStream`: streams, their shards and stored records, the limits
//! Kinesis enforces, and the errors it answers with.

use std::collections::BTreeMap;

use bytes::Bytes;
use kinesis_lease_core::SequenceNumber;

use kinesis_stream_core::{millis_of, ReaderError, Record, StartAt};

use crate::consumers::FanOutState;
use crate::op::Op;

/// The most bytes of one record, data and partition key (1 MiB), as in Kinesis.
pub(crate) const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// The most bytes of one PutRecords request, data and partition keys (5 MiB), as in Kinesis.
pub(crate) const MAX_REQUEST_BYTES: usize = 5 * 1024 * 1024;

/// How long an iterator lives, as in Kinesis.
pub(crate) const ITERATOR_TTL_MS: u64 = 5 * 60 * 1_000;

#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) sequence: u128,
    pub(crate) payload: Bytes,
    pub(crate) key: String,
    pub(crate) arrival_ms: u64,
}

#[derive(Debug)]
pub(crate) struct ShardState {
    pub(crate) id: String,
    pub(crate) parent: Option<String>,
    pub(crate) adjacent_parent: Option<String>,
    pub(crate) range: (u128, u128),
    pub(crate) records: Vec<Stored>,
    pub(crate) ending: Option<u128>,
}

impl ShardState {
    /// The index of the first record at `position`, for `operation` on this shard of
    /// `stream`. A sequence number must be one of this shard's (a record's, or the ending one
    /// ListShards gives a closed shard): Kinesis refuses any other (another shard's, one not
    /// assigned yet) with InvalidArgumentException, [`ReaderError::Refused`] here.
    pub(crate) fn index_at(
        &self,
        stream: &str,
        operation: &'static str,
        position: &StartAt,
    ) -> Result<usize, ReaderError> {
        Ok(match position {
            StartAt::TrimHorizon => 0,
            StartAt::Latest => self.records.len(),
            StartAt::AtTimestamp(time) => {
                let ms = millis_of(time);
                self.records.partition_point(|r| r.arrival_ms < ms)
            }
            StartAt::AtSequence(seq) => {
                let v = self.own_sequence(stream, operation, seq)?;
                self.records.partition_point(|r| r.sequence < v)
            }
            StartAt::AfterSequence(seq) => {
                let v = self.own_sequence(stream, operation, seq)?;
                self.records.partition_point(|r| r.sequence <= v)
            }
        })
    }

    /// The value of `seq` when it is one of this shard's sequence numbers.
    fn own_sequence(
        &self,
        stream: &str,
        operation: &'static str,
        seq: &SequenceNumber,
    ) -> Result<u128, ReaderError> {
        let value = seq.number().parse::<u128>().ok();
        let held = value.filter(|v| {
            self.ending == Some(*v) || self.records.binary_search_by(|r| r.sequence.cmp(v)).is_ok()
        });
        held.ok_or_else(|| ReaderError::Refused {
            operation,
            resource: format!("{stream}/{}", self.id),
            source: format!(
                "InvalidArgumentException: StartingSequenceNumber {} used in {operation} on \
                 shard {} in stream {stream} is invalid: no record of this shard has it",
                seq.number(),
                self.id
            )
            .into(),
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
    pub(crate) next_sequence: u128,
    pub(crate) next_shard: u32,
}

impl StreamState {
    pub(crate) fn open_shard(
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

    pub(crate) fn close(&mut self, index: usize) {
        let last = self.next_sequence;
        self.next_sequence += 1;
        let shard = &mut self.shards[index];
        shard.ending = Some(shard.records.last().map_or(last, |r| r.sequence));
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) streams: BTreeMap<String, StreamState>,
    pub(crate) throttle: BTreeMap<Op, u32>,
    pub(crate) fail: BTreeMap<Op, u32>,
    pub(crate) latency: BTreeMap<Op, std::time::Duration>,
    pub(crate) calls: BTreeMap<Op, u64>,
    pub(crate) iterator_generation: u64,
    pub(crate) fan_out: FanOutState,
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

/// The index of `shard`, which must be open.
pub(crate) fn open_index(s: &StreamState, stream: &str, shard: &str) -> Result<usize, ReaderError> {
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
