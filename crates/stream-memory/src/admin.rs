//! Administering a `MemoryStream` as the Kinesis control plane would: streams, puts,
//! splits, merges, listing, and shards aging out past retention.

use bytes::Bytes;

use crate::state::{invalid, not_found, open_index, sequence_text, State, Stored, StreamState};
use kinesis_stream_core::{validate_stream_name, PutEntry, ReaderError, Shard};

use crate::{hash_key, MemoryStream, StoredRecord};

impl MemoryStream {
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

    pub(super) fn put_one(
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
            .map(|sh| {
                let mut shard = Shard::new(sh.id.clone(), sh.range);
                shard.parent = sh.parent.clone();
                shard.adjacent_parent = sh.adjacent_parent.clone();
                shard.ending_sequence = sh.ending.map(sequence_text);
                shard
            })
            .collect())
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
}
