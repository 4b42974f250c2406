//! Splits and merges during consumption: parents finish before children, each key in order.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::Workers;
use kinesis_lease_core::{LeaseKey, LeaseStore};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_core::StartAt;
use kinesis_stream_memory::MemoryStream;

fn assert_keys_in_order(log: &Log, total: usize) {
    let per_key = per_key(log);
    let mut count = 0;
    for (key, ns) in per_key {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order or duplicated: {ns:?}"
        );
        count += ns.len();
    }
    assert_eq!(count, total);
}

#[tokio::test(start_paused = true)]
async fn per_key_order_holds_across_a_split() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store.clone(),
        config("s", "a", StartAt::TrimHorizon),
        Workers::ByKey(4),
    );
    put_many(&kinesis, "s", 20, 0, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kinesis.split_evenly("s", "shardId-000000000000").unwrap();
    put_many(&kinesis, "s", 20, 200, 200);
    wait_for_count(&consumer.log, 400, Duration::from_secs(60)).await;
    let parent = store
        .read(&LeaseKey::new("s", "shardId-000000000000").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        parent.is_finished(),
        "parent checkpointed SHARD_END: {parent:?}"
    );
    let held = consumer.coordinator.held();
    assert_eq!(
        held,
        [
            "shardId-000000000001",
            "shardId-000000000002",
            "shardId-000000000003"
        ]
    );
    let log = consumer.log.clone();
    consumer.stop().await;
    assert_keys_in_order(&log, 400);
}

#[tokio::test(start_paused = true)]
async fn per_key_order_holds_across_a_merge() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 3).unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store.clone(),
        config("s", "a", StartAt::TrimHorizon),
        Workers::ByKey(4),
    );
    put_many(&kinesis, "s", 30, 0, 300);
    kinesis
        .merge_shards("s", "shardId-000000000000", "shardId-000000000001")
        .unwrap();
    put_many(&kinesis, "s", 30, 300, 300);
    wait_for_count(&consumer.log, 600, Duration::from_secs(60)).await;
    for parent in ["shardId-000000000000", "shardId-000000000001"] {
        let row = store
            .read(&LeaseKey::new("s", parent).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(row.is_finished(), "{row:?}");
    }
    let child = store
        .read(&LeaseKey::new("s", "shardId-000000000003").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        child.parents,
        ["shardId-000000000000", "shardId-000000000001"]
    );
    let log = consumer.log.clone();
    consumer.stop().await;
    assert_keys_in_order(&log, 600);
}

/// A child is not read while a parent still has records to hand out, even when a handler of the
/// parent is slow: its first record comes after the parent's last.
#[tokio::test(start_paused = true)]
async fn children_wait_for_their_parent_to_settle() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store = Arc::new(MemoryLeaseStore::new());
    put_many(&kinesis, "s", 5, 0, 50);
    kinesis.split_evenly("s", "shardId-000000000000").unwrap();
    put_many(&kinesis, "s", 5, 50, 50);
    let consumer = start(
        &kinesis,
        store,
        config("s", "a", StartAt::TrimHorizon),
        Workers::Unordered(8),
    );
    wait_for_count(&consumer.log, 100, Duration::from_secs(60)).await;
    let log = consumer.log.lock().unwrap().clone();
    let last_parent = log
        .iter()
        .rposition(|s| s.shard == "shardId-000000000000")
        .unwrap();
    let first_child = log
        .iter()
        .position(|s| s.shard != "shardId-000000000000")
        .unwrap();
    assert!(
        last_parent < first_child,
        "parent record at {last_parent}, child at {first_child}"
    );
    consumer.stop().await;
}
