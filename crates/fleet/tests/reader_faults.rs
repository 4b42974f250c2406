//! Faults injected into the MemoryStream: expired iterators, throttling, 500s, a deleted
//! stream; and the read rate limits.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::Workers;
use kinesis_lease_core::{LeaseKey, LeaseStore};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_core::{ReaderError, StartAt};
use kinesis_stream_memory::{MemoryStream, Op};

#[tokio::test(start_paused = true)]
async fn expired_iterators_reopen_after_the_last_delivered_record() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let consumer = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::new()),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    for round in 0..10 {
        put_many(&kinesis, "s", 6, round * 20, 20);
        tokio::time::sleep(Duration::from_millis(700)).await;
        kinesis.expire_iterators();
    }
    wait_for_count(&consumer.log, 200, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = kinesis.calls(Op::ShardIterator);
    assert!(calls >= 10, "iterators were reopened: {calls}");
    let log = consumer.log.clone();
    consumer.stop().await;
    assert_exactly_once(&log, 200);
}

#[tokio::test(start_paused = true)]
async fn throttling_backs_off_and_loses_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    put_many(&kinesis, "s", 4, 0, 50);
    kinesis.throttle_next(Op::GetRecords, 8);
    let consumer = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::new()),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    let started = tokio::time::Instant::now();
    wait_for_count(&consumer.log, 50, Duration::from_secs(60)).await;
    let waited = started.elapsed();
    // Eight throttled calls backing off from 100 ms (jittered, capped at 10 s) take well over
    // the 1.6 s that 8 calls at the 5/s limit would.
    assert!(waited >= Duration::from_secs(2), "backed off: {waited:?}");
    kinesis.fail_next(Op::GetRecords, 5);
    put_many(&kinesis, "s", 4, 50, 50);
    wait_for_count(&consumer.log, 100, Duration::from_secs(60)).await;
    let log = consumer.log.clone();
    consumer.stop().await;
    assert_exactly_once(&log, 100);
}

/// At most 5 GetRecords per second per shard while behind; one per poll interval at the tip.
#[tokio::test(start_paused = true)]
async fn reads_respect_the_rate_limit_and_the_poll_interval() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    put_many(&kinesis, "s", 4, 0, 5_000);
    let mut cfg = config("s", "a", StartAt::TrimHorizon);
    cfg.records_per_call = 100;
    let consumer = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::new()),
        cfg,
        Workers::Serial,
    );
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    let behind_calls = kinesis.calls(Op::GetRecords);
    assert!(
        (19..=21).contains(&behind_calls),
        "5 calls/s while behind: {behind_calls}"
    );
    wait_for_count(&consumer.log, 5_000, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at_tip = kinesis.calls(Op::GetRecords);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_calls = kinesis.calls(Op::GetRecords) - at_tip;
    assert!(
        (9..=11).contains(&idle_calls),
        "one call per poll interval at the tip: {idle_calls}"
    );
    consumer.stop().await;
}

/// A deleted stream is a typed error on the subscription, and the lease is released.
#[tokio::test(start_paused = true)]
async fn deleted_stream_fails_the_subscription_and_releases_the_lease() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store.clone(),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    put_many(&kinesis, "s", 2, 0, 10);
    wait_for_count(&consumer.log, 10, Duration::from_secs(10)).await;
    kinesis.delete_stream("s").unwrap();
    let error = tokio::time::timeout(Duration::from_secs(30), consumer.coordinator.failed())
        .await
        .expect("the subscription failed");
    assert!(
        matches!(&*error, ReaderError::StreamNotFound { stream, .. } if stream == "s"),
        "{error}"
    );
    assert!(error.to_string().contains("`s`"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let row = store
        .read(&LeaseKey::new("s", "shardId-000000000000").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.owner, None, "lease released");
    assert!(row.checkpoint.is_some(), "with the settled checkpoint");
    consumer.stop().await;
}
