//! `Aggregator`: packs user records into one KPL-format Kinesis record within Kinesis' limit.
//!
//! The size of the record being built is kept exactly as sub-records are added (protobuf
//! lengths are computed, not estimated), so an aggregate is filled up to the limit and never
//! past it. The aggregate's own partition key is its first sub-record's, and its explicit hash
//! key is that sub-record's effective hash key, so Kinesis stores it on the shard the first
//! sub-record belongs to; callers put only sub-records of one shard into one aggregate.

use std::collections::HashMap;

use bytes::Bytes;
use md5::{Digest, Md5};
use prost::encoding::encoded_len_varint;
use prost::Message;

use crate::message::{AggregatedRecord, SubRecordMessage};
use crate::{effective_hash_key, KplError, DIGEST_LEN, MAGIC, MAX_RECORD_BYTES};

/// One finished aggregate, ready to put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedEntry {
    /// The record's data: magic, protobuf body, MD5 trailer.
    pub data: Bytes,
    /// The record's partition key (its first sub-record's).
    pub partition_key: String,
    /// The record's explicit hash key: its first sub-record's effective hash key, so it is
    /// stored on that sub-record's shard.
    pub explicit_hash_key: u128,
    /// How many sub-records it holds.
    pub sub_records: usize,
}

impl AggregatedEntry {
    /// The bytes Kinesis counts against its record limit: data and partition key.
    pub fn size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

/// Whether [`Aggregator::push`] added the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Pushed {
    /// Added.
    Added,
    /// No room left: [`finish`](Aggregator::finish) this aggregate and push it into the next.
    Full,
}

/// Builds one aggregated record at a time. See the module docs.
#[derive(Debug, Clone)]
pub struct Aggregator {
    limit: usize,
    keys: HashMap<String, u64>,
    hash_keys: HashMap<String, u64>,
    message: AggregatedRecord,
    body_len: usize,
    first: Option<(String, u128)>,
}

impl Default for Aggregator {
    fn default() -> Self {
        Self::new()
    }
}

impl Aggregator {
    /// An empty aggregator filling records up to Kinesis' limit (1 MiB of data and partition
    /// key).
    pub fn new() -> Self {
        Self::with_limit(MAX_RECORD_BYTES)
    }

    /// An empty aggregator filling records up to `limit` bytes (at most 1 MiB): smaller
    /// aggregates bound the records re-delivered when a consumer stops mid-aggregate.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit: limit.min(MAX_RECORD_BYTES),
            keys: HashMap::new(),
            hash_keys: HashMap::new(),
            message: AggregatedRecord::default(),
            body_len: 0,
            first: None,
        }
    }

    /// Sub-records added so far.
    pub fn len(&self) -> usize {
        self.message.records.len()
    }

    /// True when nothing was added since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.message.records.is_empty()
    }

    /// The size the record would have if finished now (data and partition key; 0 when empty).
    pub fn size(&self) -> usize {
        match &self.first {
            None => 0,
            Some((key, _)) => framed(self.body_len) + key.len(),
        }
    }

    /// Adds a record, unless that would take the aggregate past its limit.
    ///
    /// # Errors
    ///
    /// [`KplError::PartitionKey`] for a key outside 1 to 256 characters, [`KplError::HashKey`]
    /// for an explicit hash key that is not a decimal below 2^128, and [`KplError::TooLarge`]
    /// for a record that would not fit even alone (put such a record unaggregated, if it fits
    /// Kinesis' limit at all).
    pub fn push(
        &mut self,
        partition_key: &str,
        explicit_hash_key: Option<&str>,
        data: Bytes,
    ) -> Result<Pushed, KplError> {
        let chars = partition_key.chars().count();
        if !(1..=256).contains(&chars) {
            return Err(KplError::PartitionKey { chars });
        }
        let hash = effective_hash_key(partition_key, explicit_hash_key)?;
        let key_index = self.keys.get(partition_key).copied();
        let hash_index = explicit_hash_key.and_then(|h| self.hash_keys.get(h).copied());
        let mut added = 0;
        let key_index = key_index.unwrap_or_else(|| {
            added += string_field_len(partition_key.len());
            self.keys.len() as u64
        });
        let hash_index = explicit_hash_key.map(|h| {
            hash_index.unwrap_or_else(|| {
                added += string_field_len(h.len());
                self.hash_keys.len() as u64
            })
        });
        let record_len = 1
            + encoded_len_varint(key_index)
            + hash_index.map_or(0, |i| 1 + encoded_len_varint(i))
            + string_field_len(data.len());
        added += 1 + encoded_len_varint(record_len as u64) + record_len;
        let outer_key = self.first.as_ref().map_or(partition_key, |(k, _)| k);
        let size = framed(self.body_len + added) + outer_key.len();
        if size > self.limit {
            if self.is_empty() {
                return Err(KplError::TooLarge {
                    partition_key: partition_key.to_owned(),
                    bytes: size,
                    limit: self.limit,
                });
            }
            return Ok(Pushed::Full);
        }
        if key_index == self.keys.len() as u64 {
            self.keys.insert(partition_key.to_owned(), key_index);
            self.message
                .partition_key_table
                .push(partition_key.to_owned());
        }
        if let (Some(h), Some(i)) = (explicit_hash_key, hash_index) {
            if i == self.hash_keys.len() as u64 {
                self.hash_keys.insert(h.to_owned(), i);
                self.message.explicit_hash_key_table.push(h.to_owned());
            }
        }
        self.message.records.push(SubRecordMessage {
            partition_key_index: key_index,
            explicit_hash_key_index: hash_index,
            data,
            tags: Vec::new(),
        });
        self.body_len += added;
        if self.first.is_none() {
            self.first = Some((partition_key.to_owned(), hash));
        }
        Ok(Pushed::Added)
    }

    /// The aggregated record built so far (`None` when empty); the aggregator starts over.
    pub fn finish(&mut self) -> Option<AggregatedEntry> {
        let (partition_key, explicit_hash_key) = self.first.take()?;
        let message = std::mem::take(&mut self.message);
        self.keys.clear();
        self.hash_keys.clear();
        let body_len = std::mem::take(&mut self.body_len);
        debug_assert_eq!(message.encoded_len(), body_len);
        let mut data = Vec::with_capacity(framed(body_len));
        data.extend_from_slice(&MAGIC);
        message
            .encode(&mut data)
            .expect("a Vec grows to fit any message");
        let digest = Md5::digest(&data[MAGIC.len()..]);
        data.extend_from_slice(&digest);
        Some(AggregatedEntry {
            data: Bytes::from(data),
            partition_key,
            explicit_hash_key,
            sub_records: message.records.len(),
        })
    }
}

/// Bytes of a length-delimited field with a one-byte tag holding `len` bytes.
fn string_field_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// Bytes of a record whose body is `body_len` bytes: magic, body, trailer.
fn framed(body_len: usize) -> usize {
    MAGIC.len() + body_len + DIGEST_LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deaggregate;

    #[test]
    fn the_size_kept_is_the_size_written() {
        let mut agg = Aggregator::new();
        for i in 0..300u64 {
            let key = format!("key-{}", i % 17);
            let hash = (i % 5 == 0).then(|| (i * 7919).to_string());
            let data = Bytes::from(vec![b'x'; (i * 37 % 400) as usize]);
            assert_eq!(
                agg.push(&key, hash.as_deref(), data).unwrap(),
                Pushed::Added
            );
            let size = agg.size();
            let finished = agg.clone().finish().unwrap();
            assert_eq!(finished.size(), size, "after {} records", i + 1);
        }
    }

    #[test]
    fn fills_up_to_the_limit_and_never_past_it() {
        let mut agg = Aggregator::with_limit(4_096);
        let mut added = 0;
        while agg.push("k", None, Bytes::from(vec![7u8; 100])).unwrap() == Pushed::Added {
            added += 1;
        }
        let size = agg.size();
        assert!(size <= 4_096 && size > 4_096 - 110, "{size}");
        let record = agg.finish().unwrap();
        assert_eq!(record.sub_records, added);
        assert_eq!(deaggregate(&record.data).unwrap().unwrap().len(), added);
        assert!(agg.is_empty());
        assert_eq!(agg.finish(), None);
    }

    #[test]
    fn the_first_sub_record_routes_the_aggregate() {
        let mut agg = Aggregator::new();
        let _ = agg.push("a", None, Bytes::new()).unwrap();
        let _ = agg.push("b", Some("5"), Bytes::new()).unwrap();
        let record = agg.finish().unwrap();
        assert_eq!(record.partition_key, "a");
        assert_eq!(record.explicit_hash_key, crate::partition_key_hash("a"));
    }

    #[test]
    fn bad_input_is_refused_by_name() {
        let mut agg = Aggregator::with_limit(1_000);
        assert!(matches!(
            agg.push("", None, Bytes::new()),
            Err(KplError::PartitionKey { chars: 0 })
        ));
        assert!(matches!(
            agg.push(&"k".repeat(257), None, Bytes::new()),
            Err(KplError::PartitionKey { chars: 257 })
        ));
        assert!(matches!(
            agg.push("k", Some("x"), Bytes::new()),
            Err(KplError::HashKey { .. })
        ));
        match agg.push("big", None, Bytes::from(vec![0u8; 1_000])) {
            Err(KplError::TooLarge { partition_key, .. }) => assert_eq!(partition_key, "big"),
            other => panic!("{other:?}"),
        }
        assert!(agg.is_empty());
    }
}
