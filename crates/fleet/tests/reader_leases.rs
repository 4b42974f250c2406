//! Leases under reading: renewal loss, brokers sharing a table, brokers with separate tables.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::Workers;
use kinesis_lease_core::{Holder, LeaseKey, LeaseStore, Take};
use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
use kinesis_stream_core::StartAt;
use kinesis_stream_memory::MemoryStream;

/// When another owner takes the row (fenced), the reader's next renewal is lost: it stops at
/// once, hands nothing more to handlers and writes no checkpoint.
#[tokio::test(start_paused = true)]
async fn renewal_loss_stops_the_reader_without_checkpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let table = MemoryLeaseTable::new();
    let store = MemoryLeaseStore::over(&table);
    let consumer = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::over(&table)),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    put_many(&kinesis, "s", 3, 0, 30);
    wait_for_count(&consumer.log, 30, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(4)).await; // a renewal carries the checkpoint
    let key = LeaseKey::new("s", "shardId-000000000000").unwrap();
    let row = store.read(&key).await.unwrap().unwrap();
    assert!(row.checkpoint.is_some());
    let stolen = store
        .take(
            &key,
            &Holder::new("thief", "t"),
            &Take::fenced(Duration::from_secs(10), row.counter),
        )
        .await
        .unwrap();
    assert!(stolen.is_written());
    let after_steal = store.read(&key).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await; // the next renewal is lost
    assert!(consumer.coordinator.held().is_empty(), "reader stopped");
    put_many(&kinesis, "s", 3, 30, 10);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        consumer.log.lock().unwrap().len(),
        30,
        "nothing handled after the loss"
    );
    assert_eq!(
        store.read(&key).await.unwrap().unwrap(),
        after_steal,
        "the lapsed owner wrote nothing"
    );
    consumer.stop().await;
}

/// Two brokers on one table: no shard is held by both at any moment, and together they read
/// every record exactly once (no failures, graceful handovers).
#[tokio::test(start_paused = true)]
async fn two_brokers_on_one_table_never_read_a_shard_at_once() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = on_table(&kinesis, &table, "a", &log);
    let b = on_table(&kinesis, &table, "b", &log);
    for round in 0..40 {
        put_many(&kinesis, "s", 16, round * 10, 10);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (ha, hb): (HashSet<_>, HashSet<_>) = (
            a.coordinator.held().into_iter().collect(),
            b.coordinator.held().into_iter().collect(),
        );
        assert!(
            ha.is_disjoint(&hb),
            "both hold {:?}",
            ha.intersection(&hb).collect::<Vec<_>>()
        );
    }
    wait_for_count(&log, 400, Duration::from_secs(30)).await;
    a.stop().await;
    wait_for_count(&log, 400, Duration::from_secs(30)).await;
    put_many(&kinesis, "s", 16, 400, 40);
    wait_for_count(&log, 440, Duration::from_secs(30)).await;
    assert_eq!(
        b.coordinator.held().len(),
        4,
        "b took a's shards after a left"
    );
    b.stop().await;
    let mut payloads: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    let total = payloads.len();
    payloads.sort();
    payloads.dedup();
    assert_eq!((total, payloads.len()), (440, 440));
}

/// Brokers with separate tables each read the whole stream.
#[tokio::test(start_paused = true)]
async fn brokers_with_separate_tables_each_read_everything() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let a = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::new()),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    let b = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::new()),
        config("s", "b", StartAt::TrimHorizon),
        Workers::Serial,
    );
    put_many(&kinesis, "s", 8, 0, 80);
    wait_for_count(&a.log, 80, Duration::from_secs(30)).await;
    wait_for_count(&b.log, 80, Duration::from_secs(30)).await;
    assert_eq!(
        (a.coordinator.held().len(), b.coordinator.held().len()),
        (4, 4)
    );
    a.stop().await;
    b.stop().await;
}

/// A crashed broker's shards are taken over once their counters stood still for a lease
/// duration, resuming after the last checkpoint (duplicates only after it).
#[tokio::test(start_paused = true)]
async fn a_crashed_brokers_shards_are_taken_over() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = on_table(&kinesis, &table, "a", &log);
    put_many(&kinesis, "s", 4, 0, 40);
    wait_for_count(&log, 40, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(4)).await; // checkpoints ride on a renewal
                                                      // Crash: the tasks vanish without releasing.
    a.crash();
    let b = on_table(&kinesis, &table, "b", &log);
    put_many(&kinesis, "s", 4, 40, 20);
    let started = tokio::time::Instant::now();
    wait_for_count(&log, 60, Duration::from_secs(30)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(10),
        "takeover waited a lease duration: {took:?}"
    );
    assert!(
        took <= Duration::from_secs(13),
        "takeover within 13 s: {took:?}"
    );
    assert_eq!(b.coordinator.held().len(), 2);
    b.stop().await;
}
