//! The conformance kit against `MemoryLeaseStore`, each check its own test.

use std::sync::Arc;

use kinesis_lease_core::testkit::Harness;
use kinesis_lease_core::ManualClock;
use kinesis_lease_memory::MemoryLeaseStore;

fn harness() -> Harness {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = MemoryLeaseStore::new().with_clock(clock.clone());
    Harness::new(Arc::new(store), clock, "memory")
}

kinesis_lease_core::conformance_tests!(harness());

/// Two stores over one table see each other's writes, as two instances sharing DynamoDB do.
#[tokio::test]
async fn stores_over_one_table_share_rows() {
    use kinesis_lease_core::{Holder, LeaseKey, LeaseStore, Take};
    use kinesis_lease_memory::MemoryLeaseTable;
    use std::time::Duration;

    let table = MemoryLeaseTable::new();
    let (one, two) = (
        MemoryLeaseStore::over(&table),
        MemoryLeaseStore::over(&table),
    );
    let key = LeaseKey::new("s", "shardId-0").unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (Holder::new("a", "a-1"), Holder::new("b", "b-1"));
    assert!(one
        .take(&key, &a, &Take::fenced(ttl, 0))
        .await
        .unwrap()
        .is_written());
    assert!(
        !two.take(&key, &b, &Take::fenced(ttl, 0))
            .await
            .unwrap()
            .is_written(),
        "the other store sees the row exists"
    );
    let seen = two.read(&key).await.unwrap().expect("row").counter;
    assert!(two
        .take(&key, &b, &Take::fenced(ttl, seen))
        .await
        .unwrap()
        .is_written());
    assert!(
        !one.renew(&key, &a, ttl, None).await.unwrap().is_written(),
        "the first store sees the take"
    );
    assert_eq!(table.len(), 1);
}
