//! `.import_kcl(..)` at start: a throttled call is retried within the start-up deadline as
//! every start-up check is, one that never ends fails as `Unreachable` naming the call, and a
//! later start with the same code leaves an operator's reset alone (the import's record).
//!
//! A review found that one throttled GetShardIterator of the import failed `start()` at once,
//! reported as "listing the shards", and that every start moved rows behind the KCL forward
//! again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{Checkpoint, LeaseKey, LeaseStore, SequenceNumber};
use kinesis_broker::testing::{MemoryStream, Op};
use kinesis_broker::{
    Broker, BrokerError, Delivery, KclImport, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_kcl_import::{ImportError, KclRow, KclTable};

const STREAM: &str = "s";
const SHARD: &str = "shardId-000000000000";

/// A stopped KCL application's table: one lease, checkpointed at `sequence`.
#[derive(Debug, Clone)]
struct StoppedKcl(Arc<Mutex<Vec<KclRow>>>);

impl KclTable for StoppedKcl {
    fn name(&self) -> &str {
        "kcl-app"
    }

    fn scan(&self) -> kinesis_broker::lease::BoxFuture<'_, Result<Vec<KclRow>, ImportError>> {
        let rows = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(rows) })
    }
}

fn kcl_at(sequence: &str) -> StoppedKcl {
    StoppedKcl(Arc::new(Mutex::new(vec![KclRow {
        owner: Some("kcl-worker".into()),
        checkpoint: Some(sequence.into()),
        entity_type: Some("LEASE".into()),
        ..KclRow::lease(SHARD, 12)
    }])))
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    kcl: &StoppedKcl,
    owner: &str,
) -> Result<RunningBroker, BrokerError> {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .build()
        .unwrap();
    broker
        .subscribe(STREAM)
        .import_kcl(KclImport::new(kcl.clone()))
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .unwrap();
    broker.start().await
}

fn stream_with_records() -> (MemoryStream, String) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let mut last = String::new();
    for i in 0..5 {
        last = kinesis.put(STREAM, "k", format!("r{i}")).unwrap().sequence;
    }
    (kinesis, last)
}

#[tokio::test(start_paused = true)]
async fn a_throttled_import_call_is_retried_within_the_startup_deadline() {
    let (kinesis, last) = stream_with_records();
    let table = MemoryLeaseTable::new();
    kinesis.throttle_next(Op::ShardIterator, 3);
    kinesis.fail_next(Op::ListShards, 1);
    let running = start(&kinesis, &table, &kcl_at(&last), "a")
        .await
        .expect("started after retries");
    let key = LeaseKey::new(STREAM, SHARD).unwrap();
    let row = MemoryLeaseStore::over(&table)
        .read(&key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.checkpoint,
        Some(Checkpoint::Sequence(
            SequenceNumber::new(&last, Some(0)).unwrap()
        )),
        "imported"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_import_call_throttled_past_the_deadline_is_unreachable_naming_it() {
    let (kinesis, last) = stream_with_records();
    let table = MemoryLeaseTable::new();
    kinesis.throttle_next(Op::ShardIterator, 1_000_000);
    match start(&kinesis, &table, &kcl_at(&last), "a").await {
        Err(BrokerError::Unreachable { operation, .. }) => {
            assert_eq!(operation, "GetShardIterator")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("started"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_later_start_with_the_import_keeps_an_operators_reset() {
    let (kinesis, last) = stream_with_records();
    let table = MemoryLeaseTable::new();
    let kcl = kcl_at(&last);
    start(&kinesis, &table, &kcl, "a")
        .await
        .unwrap()
        .shutdown()
        .await;
    // The operator resets the shard to TRIM_HORIZON; the same code deploys again.
    let store = MemoryLeaseStore::over(&table);
    let key = LeaseKey::new(STREAM, SHARD).unwrap();
    let counter = store.read(&key).await.unwrap().unwrap().counter;
    assert!(store
        .evict(&key, counter, Some(&Checkpoint::TrimHorizon), None)
        .await
        .unwrap()
        .is_written());
    let running = start(&kinesis, &table, &kcl, "b").await.unwrap();
    let row = store.read(&key).await.unwrap().unwrap();
    assert_eq!(
        row.checkpoint,
        Some(Checkpoint::TrimHorizon),
        "the reset stands"
    );
    // And the shard is read again from there: all five records.
    let mut delivered = 0;
    for _ in 0..300 {
        delivered = running
            .stats()
            .shards(STREAM)
            .first()
            .map_or(0, |s| s.delivered);
        if delivered == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(delivered, 5);
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reposition_beside_the_import_does_not_block_later_starts() {
    let (kinesis, last) = stream_with_records();
    let table = MemoryLeaseTable::new();
    let kcl = kcl_at(&last);
    let with_reposition = |owner: &str| {
        let mut broker = Broker::builder()
            .kinesis(kinesis.clone())
            .lease_store(MemoryLeaseStore::over(&table))
            .owner_id(owner)
            .build()
            .unwrap();
        broker
            .subscribe(STREAM)
            .import_kcl(KclImport::new(kcl.clone()))
            .reposition(kinesis_broker::StartAt::TrimHorizon)
            .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
            .unwrap();
        broker
    };
    // The first instance imports, then its take repositions the row to TRIM_HORIZON, behind
    // the KCL's checkpoint, and holds it.
    let first = with_reposition("a").start().await.unwrap();
    let mut held = false;
    for _ in 0..100 {
        held = first.stats().shards(STREAM).len() == 1;
        if held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held);
    // A second instance with the same code starts (before the record: refused as "behind the
    // KCL's checkpoint and held by `a`").
    let second = with_reposition("b").start().await.expect("a later start");
    second.shutdown().await;
    first.shutdown().await;
}
