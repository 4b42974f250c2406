//! An operator's move (`kinesis-broker release|reset --force`: an evict of the row that pokes
//! its holder's member row, then a bump of the stream's epoch) whose epoch bump failed: the
//! command line reports it, but until some instance moves the epoch, nobody lists the rows and
//! the row waits in the operator's hold unseen. The evicted holder learns of the move at its
//! next renewal and must announce it at once: it may crash a moment later. Paused time, a
//! `MemoryStream`, two brokers over one `MemoryLeaseTable`, default timings and start.

use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{
    lease::{LeaseKey, LeaseStore, Outcome},
    Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_lease_core::testkit::Outage;
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";

/// A memory store whose renewals answer 450 ms late (landing at once): an instance learns
/// that a row was moved between its take ticks, not on them.
fn slow_renewals(table: &MemoryLeaseTable) -> Outage {
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(table)));
    switch.slow_renewals(Duration::from_millis(450));
    store
}

async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .expect("broker");
    broker
        .subscribe(STREAM)
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker.start().await.expect("start")
}

fn held(broker: &RunningBroker) -> Vec<String> {
    broker
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect()
}

/// `a` (whose renewals answer 450 ms late) and `b` share 4 shards. An operator frees one of
/// `a`'s rows and the epoch bump after it fails; `a` stops reading the shard at its next
/// renewal and crashes 10 ms later. Expected:
/// `b` reads the shard again once the row stood still for a lease, within 15 s of the evict
/// (`a`'s renewal, 3 s; a take interval; the hold, 10 s; a take interval). Simulation seed
/// 76634: the evicted holder owed the bump to its next take tick and crashed 0.7 s after it
/// learnt of the move; nobody listed the rows until an unrelated move of the epoch, and the
/// shard stood unread 19 s after the move. Here, before the fix, `b` listed them only when it
/// buried `a`: read again 21 s after the evict (measured with the fix: 12 s).
#[tokio::test(start_paused = true)]
async fn an_evicted_holder_that_crashes_at_once_has_announced_the_move() {
    fastrand::seed(6);
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start(&kinesis, slow_renewals(&table), "a").await;
    let b = start(&kinesis, MemoryLeaseStore::over(&table), "b").await;
    let until = Instant::now() + Duration::from_secs(30);
    while held(&a).len() != 2 || held(&b).len() != 2 {
        assert!(Instant::now() < until, "never 2 + 2");
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(10)).await;
    let shard = held(&a)[0].clone();
    let key = LeaseKey::new(STREAM, shard.as_str()).expect("key");
    let operator = MemoryLeaseStore::over(&table);
    let row = operator.read(&key).await.expect("read").expect("row");
    let member = LeaseKey::member(STREAM, "a").expect("member key");
    let evicted = operator
        .evict(&key, row.counter, None, Some(&member))
        .await
        .expect("evict");
    assert!(matches!(evicted, Outcome::Written(_)), "{evicted:?}");
    let at = Instant::now();
    while held(&a).contains(&shard) {
        assert!(
            at.elapsed() < Duration::from_secs(4),
            "a still reads {shard} {:?} after the evict",
            at.elapsed()
        );
        sleep(Duration::from_millis(10)).await;
    }
    drop(a);
    let mut read_again = None;
    while at.elapsed() < Duration::from_secs(40) {
        if held(&b).contains(&shard) {
            read_again = Some(at.elapsed());
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    b.shutdown().await;
    eprintln!("read again {read_again:?} after the evict");
    let read_again = read_again.expect("never read again after the operator's move");
    assert!(
        read_again >= Duration::from_secs(10),
        "read again {read_again:?} after the evict: before it stood still for a lease"
    );
    assert!(
        read_again <= Duration::from_secs(15),
        "read again only {read_again:?} after the evict"
    );
}

/// `a` alone holds 16 shards; an operator resets every row at once (`reset --force` without
/// `--shard`), and its epoch bump fails. Every keeper of `a` learns of it within a renew
/// interval (its keepers renew at different moments). Expected: `a` announces the move, with
/// one bump in flight at a time and those learnt of meanwhile owed to its next take tick: at
/// most one more than the take ticks in a renew interval (4), not one per row (measured: 3;
/// a fleet's worth of one bump per row is a burst of writes on the one epoch item, which
/// DynamoDB throttles past 1,000 a second).
#[tokio::test(start_paused = true)]
async fn a_reset_of_every_row_is_announced_with_a_few_bumps_not_one_per_row() {
    fastrand::seed(6);
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 16).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start(&kinesis, slow_renewals(&table), "a").await;
    let until = Instant::now() + Duration::from_secs(30);
    while held(&a).len() != 16 {
        assert!(Instant::now() < until, "never held all 16");
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(10)).await;
    let operator = MemoryLeaseStore::over(&table);
    let member = LeaseKey::member(STREAM, "a").expect("member key");
    // Nobody else bumps the epoch: how far it moves is how often `a` bumped it.
    let before = operator.epoch(STREAM).await.expect("epoch");
    for row in operator.list(STREAM).await.expect("list") {
        let evicted = operator
            .evict(&row.key, row.counter, None, Some(&member))
            .await
            .expect("evict");
        assert!(matches!(evicted, Outcome::Written(_)), "{evicted:?}");
    }
    let at = Instant::now();
    while !held(&a).is_empty() {
        assert!(
            at.elapsed() < Duration::from_secs(4),
            "a still reads {:?} {:?} after the evicts",
            held(&a),
            at.elapsed()
        );
        sleep(Duration::from_millis(10)).await;
    }
    sleep(Duration::from_secs(2)).await;
    let bumped = operator.epoch(STREAM).await.expect("epoch") - before;
    eprintln!("16 rows moved: {bumped} bumps");
    assert!(
        (1..=4).contains(&bumped),
        "16 rows moved by one reset: {bumped} bumps of the epoch"
    );
    // And the rows are read again once they stood still for a lease.
    let until = at + Duration::from_secs(20);
    while held(&a).len() != 16 {
        assert!(Instant::now() < until, "not read again: {:?}", held(&a));
        sleep(Duration::from_millis(100)).await;
    }
    a.shutdown().await;
}
