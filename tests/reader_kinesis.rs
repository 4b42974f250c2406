//! Shard readers against kinesis-local (Kinesis) and moto (DynamoDB leases), via
//! `cargo xtask integ`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    DynamoLeaseStore, MemoryLeaseStore, StartAt,
};
use kinesis_integ::*;

async fn run_from(start_at: StartAt, before: usize, after: usize) -> Log {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("positions");
    create_stream(&client, &stream, 4).await;
    put_records(&client, &stream, 10, 0, before).await;
    let log = Log::default();
    let broker = logging_broker(
        &config,
        Arc::new(MemoryLeaseStore::new()),
        "a",
        &stream,
        start_at.clone(),
        &log,
    );
    let running = broker.start().await.expect("start");
    // Every shard is held and read once before the later records arrive.
    let deadline = tokio::time::Instant::now() + patience(Duration::from_secs(20));
    while running
        .stats()
        .shards(&stream)
        .iter()
        .filter(|s| s.millis_behind == Some(0))
        .count()
        < 4
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "shards not all read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    put_records(&client, &stream, 10, before, after).await;
    let expected = match start_at {
        StartAt::Latest => after,
        _ => before + after,
    };
    wait_for_count(&log, expected, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.shutdown().await;
    assert_eq!(log.lock().unwrap().len(), expected);
    log
}

#[tokio::test]
async fn reads_a_four_shard_stream_from_the_horizon() {
    let log = run_from(StartAt::TrimHorizon, 200, 100).await;
    assert_exactly_once_in_key_order(&log, 300);
}

#[tokio::test]
async fn reads_a_four_shard_stream_from_the_tip() {
    let log = run_from(StartAt::Latest, 200, 100).await;
    let log = log.lock().unwrap();
    assert!(log
        .iter()
        .all(|(_, _, _, p)| p.rsplit('#').next().unwrap().parse::<usize>().unwrap() >= 200));
}

#[tokio::test]
async fn reads_a_four_shard_stream_from_a_timestamp() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("timestamp");
    create_stream(&client, &stream, 4).await;
    put_records(&client, &stream, 10, 0, 100).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    put_records(&client, &stream, 10, 100, 100).await;
    let log = Log::default();
    let broker = logging_broker(
        &config,
        Arc::new(MemoryLeaseStore::new()),
        "a",
        &stream,
        StartAt::at_millis(at),
        &log,
    );
    let running = broker.start().await.expect("start");
    wait_for_count(&log, 100, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.shutdown().await;
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 100);
    assert!(log
        .iter()
        .all(|(_, _, _, p)| p.rsplit('#').next().unwrap().parse::<usize>().unwrap() >= 100));
}

/// Split and merge while consuming, with a DynamoDB lease table: parents are read to their
/// end (SHARD_END) before children, every record once, each key in order.
#[tokio::test]
async fn split_and_merge_during_consumption() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("reshard");
    create_stream(&client, &stream, 2).await;
    let table = unique_name("leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let log = Log::default();
    let broker = logging_broker(
        &config,
        Arc::new(store.clone()),
        "a",
        &stream,
        StartAt::TrimHorizon,
        &log,
    );
    let running = broker.start().await.expect("start");
    put_records(&client, &stream, 20, 0, 300).await;
    wait_for_count(&log, 300, Duration::from_secs(30)).await;

    // Split shard 0 in the middle of its range.
    let shards = shard_ids(&client, &stream).await;
    let first = &shards[0];
    let range = first.hash_key_range().unwrap();
    let (lo, hi): (u128, u128) = (
        range.starting_hash_key().parse().unwrap(),
        range.ending_hash_key().parse().unwrap(),
    );
    client
        .split_shard()
        .stream_name(&stream)
        .shard_to_split(first.shard_id())
        .new_starting_hash_key((lo + (hi - lo) / 2 + 1).to_string())
        .send()
        .await
        .expect("split");
    wait_active(&client, &stream).await;
    put_records(&client, &stream, 20, 300, 300).await;
    wait_for_count(&log, 600, Duration::from_secs(40)).await;

    // Merge the second child of the split with shard 1, which is adjacent to it.
    let shards = shard_ids(&client, &stream).await;
    let open: Vec<_> = shards
        .iter()
        .filter(|s| {
            s.sequence_number_range()
                .and_then(|r| r.ending_sequence_number())
                .is_none()
        })
        .collect();
    let start_of = |s: &aws_sdk_kinesis::types::Shard| {
        s.hash_key_range()
            .unwrap()
            .starting_hash_key()
            .parse::<u128>()
            .unwrap()
    };
    let end_of = |s: &aws_sdk_kinesis::types::Shard| {
        s.hash_key_range()
            .unwrap()
            .ending_hash_key()
            .parse::<u128>()
            .unwrap()
    };
    let (a, b) = open
        .iter()
        .flat_map(|a| open.iter().map(move |b| (*a, *b)))
        .find(|(a, b)| end_of(a).checked_add(1) == Some(start_of(b)))
        .expect("two adjacent open shards");
    client
        .merge_shards()
        .stream_name(&stream)
        .shard_to_merge(a.shard_id())
        .adjacent_shard_to_merge(b.shard_id())
        .send()
        .await
        .expect("merge");
    wait_active(&client, &stream).await;
    put_records(&client, &stream, 20, 600, 300).await;
    wait_for_count(&log, 900, Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.shutdown().await;
    assert_exactly_once_in_key_order(&log, 900);
    for parent in [first.shard_id(), a.shard_id(), b.shard_id()] {
        let row = store
            .read(&LeaseKey::new(stream.as_str(), parent).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(
            row.is_finished(),
            "parent {parent} ended with SHARD_END: {row:?}"
        );
    }
}
