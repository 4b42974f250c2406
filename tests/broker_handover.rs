//! Two brokers on one DynamoDB lease table (the `examples/consume.rs` path) against
//! kinesis-local and moto: one shuts down gracefully, the other holds every shard afterwards,
//! and nothing is lost or handled twice.

use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::{DynamoLeaseStore, StartAt};
use kinesis_integ::*;

#[tokio::test]
async fn graceful_shutdown_hands_every_shard_to_the_other_broker() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("handover");
    create_stream(&client, &stream, 4).await;
    let table = unique_name("leases");
    let first_store = DynamoLeaseStore::new(&config, &table);
    first_store.ensure_table().await.expect("table");
    let log = Log::default();
    let a = logging_broker(
        &config,
        Arc::new(first_store),
        "a",
        &stream,
        StartAt::TrimHorizon,
        &log,
    )
    .start()
    .await
    .expect("start a");
    put_records(&client, &stream, 16, 0, 400).await;
    wait_for_count(&log, 100, Duration::from_secs(30)).await;
    let b = logging_broker(
        &config,
        Arc::new(DynamoLeaseStore::new(&config, &table)),
        "b",
        &stream,
        StartAt::TrimHorizon,
        &log,
    )
    .start()
    .await
    .expect("start b");
    wait_for_count(&log, 400, Duration::from_secs(30)).await;
    put_records(&client, &stream, 16, 400, 200).await;
    let report = a.shutdown().await;
    assert!(report.handlers_finished);
    // Each row free or already b's, so b takes them without waiting out a's lease.
    assert_released(&config, &table, &stream, "a").await;
    let released = tokio::time::Instant::now();
    while b.stats().shards(&stream).len() < 4 {
        assert!(
            released.elapsed() < patience(Duration::from_secs(10)),
            "b did not take every shard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "b held all 4 shards {:?} after a's shutdown returned",
        released.elapsed()
    );
    put_records(&client, &stream, 16, 600, 200).await;
    wait_for_count(&log, 800, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    b.shutdown().await;
    assert_exactly_once_in_key_order(&log, 800);
    assert!(log.lock().unwrap().iter().any(|(owner, ..)| owner == "b"));
}
