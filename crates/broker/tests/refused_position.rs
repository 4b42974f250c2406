//! A stored position Kinesis refuses never stalls silently: the shard shows as refused in
//! `stats()`, with the position and Kinesis' reason, for as long as Kinesis refuses it, and is
//! read again once an operator resets it to a readable position.
//!
//! A review found that `reset --to after-sequence=N` with a number of another shard left the
//! shard held, renewed and never read, with nothing in `stats()` to say so. Kinesis refuses
//! GetShardIterator at a sequence number the shard does not hold (InvalidArgumentException);
//! `Strict` below does the same over a `MemoryStream`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::kinesis::{KinesisApi, PutEntry, PutOutcome, RecordsPage, Shard};
use kinesis_broker::lease::{BoxFuture, Checkpoint, Lease, LeaseKey, LeaseStore, SequenceNumber};
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, ReaderError, StartAt};

const STREAM: &str = "s";
const SHARD: &str = "shardId-000000000000";

/// A `MemoryStream` that refuses iterators at sequence numbers the shard does not hold, as
/// Kinesis does.
#[derive(Debug, Clone)]
struct Strict(MemoryStream);

impl KinesisApi for Strict {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        self.0.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        Box::pin(async move {
            if let StartAt::AtSequence(seq) | StartAt::AfterSequence(seq) = position {
                if seq.number().starts_with("999") {
                    return Err(ReaderError::Refused {
                        operation: "GetShardIterator",
                        resource: format!("{stream}/{shard}"),
                        source: format!(
                            "InvalidArgumentException: Invalid SequenceNumber {} for ShardId {shard}",
                            seq.number()
                        )
                        .into(),
                    });
                }
            }
            self.0.shard_iterator(stream, shard, position).await
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
        self.0.get_records(stream, shard, iterator, limit)
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
        self.0.put_records(stream, entries)
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_checkpoint_shows_in_stats_until_a_reset_makes_the_shard_readable() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    for i in 0..5 {
        kinesis
            .put(STREAM, &format!("k{i}"), format!("r{i}"))
            .unwrap();
    }
    let table = MemoryLeaseTable::new();
    let store = MemoryLeaseStore::over(&table);
    let key = LeaseKey::new(STREAM, SHARD).unwrap();
    // The row as a wrong `reset --to after-sequence=N` leaves it: a number of no record here.
    let foreign = SequenceNumber::new("99900000000000000000000000001", None).unwrap();
    let row = Lease::new(key.clone(), Vec::new()).starting_at(Some(Checkpoint::Sequence(foreign)));
    assert!(store.create(&row).await.unwrap());

    let handled = Arc::new(Mutex::new(BTreeSet::new()));
    let mut broker = Broker::builder()
        .kinesis(Strict(kinesis.clone()))
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("a")
        .build()
        .unwrap();
    let seen = handled.clone();
    broker
        .subscribe(STREAM)
        .handle(move |d: Delivery| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().insert(d.partition_key().to_owned());
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    let mut refused = None;
    for _ in 0..100 {
        refused = running
            .stats()
            .shards(STREAM)
            .first()
            .and_then(|s| s.refused.clone());
        if refused.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = refused.expect("the refusal shows in stats()");
    assert!(
        refused.contains("AFTER_SEQUENCE_NUMBER 99900000000000000000000000001")
            && refused.contains("Invalid SequenceNumber"),
        "the position and Kinesis' reason: {refused}"
    );
    // It stays refused (held, renewed, not read) for as long as Kinesis refuses.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stats = running.stats();
    let shard = &stats.shards(STREAM)[0];
    assert!(shard.refused.is_some() && shard.delivered == 0);
    assert!(handled.lock().unwrap().is_empty());

    // The operator resets the shard to TRIM_HORIZON: it is read again, and the refusal ends.
    let counter = store.read(&key).await.unwrap().unwrap().counter;
    assert!(store
        .evict(&key, counter, Some(&Checkpoint::TrimHorizon), None)
        .await
        .unwrap()
        .is_written());
    for _ in 0..600 {
        if handled.lock().unwrap().len() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        handled.lock().unwrap().len(),
        5,
        "read again after the reset"
    );
    let stats = running.stats();
    assert_eq!(stats.shards(STREAM)[0].refused, None, "no longer refused");
    running.shutdown().await;
}
