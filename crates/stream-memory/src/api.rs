//! `KinesisApi` for a `MemoryStream`: the data-plane calls readers and publishers make, with
//! Kinesis' limits, iterator expiry and injected faults applied.

use kinesis_lease_core::BoxFuture;

use kinesis_stream_core::{
    KinesisApi, PutEntry, PutOutcome, ReaderError, RecordsPage, Shard, ShardSubscription, StartAt,
    StreamConsumer,
};

use crate::op::Op;
use crate::state::{
    invalid, not_found, shard_not_found, State, ITERATOR_TTL_MS, MAX_RECORD_BYTES,
    MAX_REQUEST_BYTES,
};
use crate::MemoryStream;

impl MemoryStream {
    fn iterator(&self, state: &State, stream: &str, shard: &str, position: usize) -> String {
        format!(
            "mem|{stream}|{shard}|{position}|{}|{}",
            state.iterator_generation,
            self.clock.now_ms()
        )
    }
}

impl KinesisApi for MemoryStream {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        Box::pin(async move {
            self.answer_late(Op::ListShards).await;
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
            self.answer_late(Op::ShardIterator).await;
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
            let index = sh.index_at(stream, "GetShardIterator", position)?;
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
            self.answer_late(Op::GetRecords).await;
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
            let mut page = RecordsPage::new(records, next_iterator);
            page.millis_behind = Some(millis_behind);
            page.child_shards = child_shards;
            Ok(page)
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
            self.answer_late(Op::PutRecords).await;
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
        Box::pin(async move {
            self.answer_late(Op::Consumers).await;
            self.register_consumer_now(stream, name)
        })
    }

    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        Box::pin(async move {
            self.answer_late(Op::Consumers).await;
            self.describe_consumer_now(stream, name)
        })
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
        Box::pin(async move {
            self.answer_late(Op::SubscribeToShard).await;
            self.subscribe_now(stream, consumer_arn, shard, position)
        })
    }
}
