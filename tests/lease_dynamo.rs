//! `DynamoLeaseStore` against a real DynamoDB-compatible server (moto, via `cargo xtask integ`).

use std::sync::Arc;
use std::time::Duration;

use kinesis_integ::{sdk_config, unique_name, Service};
use kinesis_lease_core::testkit::Harness;
use kinesis_lease_core::{
    Checkpoint, Holder, Lease, LeaseError, LeaseKey, LeaseStore, ManualClock, Take,
};
use kinesis_lease_dynamo::{DynamoLeaseError, DynamoLeaseStore};

async fn store() -> (DynamoLeaseStore, ManualClock) {
    let config = sdk_config(Service::Dynamodb).await;
    let clock = ManualClock::new(1_700_000_000_000);
    let store = DynamoLeaseStore::new(&config, unique_name("leases")).with_clock(clock.clone());
    store.ensure_table().await.expect("ensure_table");
    (store, clock)
}

async fn harness() -> Harness {
    let (store, clock) = store().await;
    let mut harness = Harness::new(Arc::new(store), clock, "kit");
    harness.concurrent_budget = Some(Duration::from_secs(60));
    harness
}

kinesis_lease_core::conformance_tests!(harness().await);

#[tokio::test]
async fn missing_table_error_names_the_table() {
    let config = sdk_config(Service::Dynamodb).await;
    let table = unique_name("no-such-table");
    let store = DynamoLeaseStore::new(&config, &table);
    let key = LeaseKey::new("orders", "shardId-000000000000").unwrap();
    let err = store
        .take(
            &key,
            &Holder::new("a", "a-1"),
            &Take::fenced(Duration::from_secs(10), 0),
        )
        .await
        .expect_err("take on a missing table");
    assert!(
        matches!(&err, LeaseError::TableNotFound { table: t, .. } if *t == table),
        "{err}"
    );
    assert!(err.to_string().contains(&table), "{err}");
    let err = store.check_table().await.expect_err("check_table");
    assert!(err.to_string().contains(&table), "{err}");
}

#[tokio::test]
async fn wrong_key_schema_is_a_typed_error() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let config = sdk_config(Service::Dynamodb).await;
    let table = unique_name("wrong-key");
    aws_sdk_dynamodb::Client::new(&config)
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create a table with another key");
    let store = DynamoLeaseStore::new(&config, &table);
    let err = store.ensure_table().await.expect_err("ensure_table");
    assert!(
        matches!(&err, DynamoLeaseError::WrongKeySchema { table: t, .. } if *t == table),
        "{err}"
    );
    assert!(err.to_string().contains("id HASH (N)"), "{err}");
    assert!(store.check_table().await.is_err());
}

#[tokio::test]
async fn ensure_table_is_idempotent() {
    let (store, _) = store().await;
    store.ensure_table().await.expect("second ensure_table");
    store.check_table().await.expect("check_table");
}

/// A lapsed owner's checkpoint is refused by the server once another owner took the row.
#[tokio::test]
async fn lapsed_owner_checkpoint_refused_by_the_server() {
    let (store, clock) = store().await;
    let key = LeaseKey::new("orders", "shardId-000000000000").unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (Holder::new("a", "a-1"), Holder::new("b", "b-1"));
    assert!(store
        .take(&key, &a, &Take::fenced(ttl, 0))
        .await
        .unwrap()
        .is_written());
    // b saw the row's counter stand still for a whole lease duration.
    let seen = store.read(&key).await.unwrap().expect("row").counter;
    clock.advance(ttl);
    assert!(store
        .take(&key, &b, &Take::fenced(ttl, seen))
        .await
        .unwrap()
        .is_written());
    let cp = Checkpoint::sequence("12345").unwrap();
    let lost = match store.checkpoint(&key, &a, &cp).await.unwrap() {
        kinesis_lease_core::Outcome::Lost(lost) => lost,
        written => panic!("a lapsed owner checkpointed: {written:?}"),
    };
    assert_eq!(lost.holder.as_deref(), Some("b"));
    assert_eq!(store.read(&key).await.unwrap().unwrap().checkpoint, None);
}

/// `list` of one stream costs one index read and one batch read, however many streams share
/// the table.
#[tokio::test]
async fn list_reads_one_stream_without_scanning() {
    let (store, _) = store().await;
    for stream in 0..20 {
        for shard in 0..3 {
            let key = LeaseKey::new(format!("s{stream}"), format!("shardId-{shard:012}")).unwrap();
            store.create(&Lease::new(key, Vec::new())).await.unwrap();
        }
    }
    let before = store.calls();
    let rows = store.list("s7").await.unwrap();
    let after = store.calls();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.key.stream() == "s7"));
    assert_eq!(
        (after.reads - before.reads, after.writes - before.writes),
        (2, 0)
    );
}
