//! `DynamoLeaseStore` against a real DynamoDB-compatible server (moto, via `cargo xtask integ`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kinesis_integ::{
    endpoint, sdk_config, sdk_config_via, unique_account, unique_name, FaultProxy, Service,
};
use kinesis_lease_core::testkit::Harness;
use kinesis_lease_core::{
    Checkpoint, Holder, Lease, LeaseError, LeaseKey, LeaseResult, LeaseStore, ManualClock, Outcome,
    Take,
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

/// `list` of one stream costs one read of its index header, one batch read of its pages and
/// one of its rows, however many streams share the table.
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
        (3, 0)
    );
}

/// Runs `call` (a conditional write on `key`) while `proxy` loses the response of its first
/// UpdateItem, after the emulator applied it, so the store retries it. Checks that the call is
/// reported written with the row as stored, that the row's counter moved by `bumps` (1: the
/// retry did not write again), and returns the row.
async fn first_response_lost(
    proxy: &FaultProxy,
    store: &DynamoLeaseStore,
    key: &LeaseKey,
    what: &str,
    bumps: u64,
    call: impl Future<Output = LeaseResult<Outcome>>,
) -> Lease {
    let counter = store.read(key).await.unwrap().map_or(0, |row| row.counter);
    let (dropped, writes) = (proxy.dropped(), store.calls().writes);
    proxy.drop_next_responses("UpdateItem", 1);
    let written = match call.await {
        Ok(Outcome::Written(row)) => row,
        Ok(Outcome::Lost(lost)) => panic!("{what}: landed, but reported lost: {lost:?}"),
        Err(err) => panic!("{what}: landed, but reported failed: {err}"),
    };
    assert_eq!(proxy.dropped() - dropped, 1, "{what}: no response was lost");
    assert!(
        store.calls().writes - writes >= 2,
        "{what}: the store did not retry"
    );
    let row = store.read(key).await.unwrap().expect("row");
    assert_eq!(
        row.counter,
        counter + bumps,
        "{what}: counter bumps of one call"
    );
    assert_eq!(written, row, "{what}: the reported row is the stored one");
    row
}

/// A write whose first attempt landed but whose response was lost is retried by the store.
/// For a take (creating, and fenced), a release and a hand-over the retry's condition then
/// fails on the store's own write, which the store recognises by its write id in the returned
/// old item and reports as written (not lost), once. A renew is reported written too, but its
/// retry lands a second time (see there). A take on a stale counter whose response is lost
/// stays lost.
#[tokio::test]
async fn write_whose_response_was_lost_is_reported_written_once() {
    let proxy = FaultProxy::start(&endpoint(Service::Dynamodb)).await;
    let config = sdk_config_via(&unique_account(), proxy.endpoint()).await;
    let clock = ManualClock::new(1_700_000_000_000);
    let store =
        DynamoLeaseStore::new(&config, unique_name("lost-responses")).with_clock(clock.clone());
    store.ensure_table().await.expect("ensure_table");
    let key = LeaseKey::new("orders", "shardId-000000000000").unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (Holder::new("a", "a-1"), Holder::new("b", "b-1"));

    // A take that creates the row.
    let take = Take::fenced(ttl, 0);
    let row =
        first_response_lost(&proxy, &store, &key, "take", 1, store.take(&key, &a, &take)).await;
    assert!(row.is_held_with(&a), "{row:?}");
    assert_eq!(row.counter, 1);
    assert_eq!(
        store.list("orders").await.unwrap(),
        vec![row],
        "listed once"
    );

    // A renew with a checkpoint. Its condition (this owner and token) would still hold after
    // its own first attempt; the store's condition also refuses an item that carries the
    // call's own write id, so the retry fails and the read-back reports it written: one bump.
    clock.advance(Duration::from_secs(3));
    let cp = Checkpoint::sequence("100").unwrap();
    let row = first_response_lost(
        &proxy,
        &store,
        &key,
        "renew",
        1,
        store.renew(&key, &a, ttl, Some(&cp)),
    )
    .await;
    assert!(row.is_held_with(&a), "{row:?}");
    assert_eq!(row.checkpoint.as_ref(), Some(&cp));

    // A release.
    let row = first_response_lost(
        &proxy,
        &store,
        &key,
        "release",
        1,
        store.release(&key, &a, None),
    )
    .await;
    assert_eq!((row.owner, row.token, row.expiry_ms), (None, None, 0));

    // A take fenced on the counter read first.
    let seen = store.read(&key).await.unwrap().expect("row").counter;
    let take = Take::fenced(ttl, seen);
    let row = first_response_lost(
        &proxy,
        &store,
        &key,
        "fenced take",
        1,
        store.take(&key, &b, &take),
    )
    .await;
    assert!(row.is_held_with(&b), "{row:?}");
    assert_eq!(row.counter, seen + 1);

    // A hand-over to "c", who asked for the row.
    assert!(store.request(&key, "c", "b").await.unwrap().is_written());
    let row = first_response_lost(
        &proxy,
        &store,
        &key,
        "hand-over",
        1,
        store.hand_over(&key, &b, "c", ttl, None),
    )
    .await;
    assert_eq!(
        (row.owner.as_deref(), row.token, row.wanted_by),
        (Some("c"), None, None)
    );
    assert_eq!(row.checkpoint.as_ref(), Some(&cp));

    // Control: a take on a stale counter never lands; losing a response does not change that.
    let before = store.read(&key).await.unwrap().expect("row");
    let dropped = proxy.dropped();
    proxy.drop_next_responses("UpdateItem", 1);
    let stale = Take::fenced(ttl, seen);
    match store.take(&key, &a, &stale).await.unwrap() {
        Outcome::Lost(lost) => {
            assert_eq!(
                (lost.holder.as_deref(), lost.counter),
                (Some("c"), before.counter)
            )
        }
        Outcome::Written(row) => panic!("a stale take was reported written: {row:?}"),
    }
    assert_eq!(proxy.dropped() - dropped, 1, "no response was lost");
    assert_eq!(store.read(&key).await.unwrap().expect("row"), before);
}
