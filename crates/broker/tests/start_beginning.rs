//! Where a brand-new subscription starts: nothing from before its start position, also on a
//! stream split before it and when instances start together (a hostile review of issue 33
//! found both reading history: children of a shard closed before an `AT_TIMESTAMP` beginning
//! created at `TRIM_HORIZON`, and a second instance that saw the first one's finished row
//! taking the subscription for one with history).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{
    BoxFuture, Checkpoint, Clock, Holder, Lease, LeaseKey, LeaseResult, LeaseStore, Outcome, Take,
};
use kinesis_broker::testing::{ManualClock, MemoryStream};
use kinesis_broker::{
    Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker, StartAt,
};

const STREAM: &str = "s";

type Handled = Arc<Mutex<BTreeSet<String>>>;

fn put(kinesis: &MemoryStream, tag: &str, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|i| {
            let payload = format!("{tag}-{i}");
            kinesis
                .put(STREAM, &format!("key-{tag}-{i}"), payload.clone())
                .unwrap();
            payload
        })
        .collect()
}

async fn start_on(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    start_at: Option<StartAt>,
    handled: &Handled,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .unwrap();
    let seen = handled.clone();
    let mut sub = broker.subscribe(STREAM);
    if let Some(start_at) = start_at {
        sub = sub.start_at(start_at);
    }
    sub.handle(move |d: Delivery| {
        let seen = seen.clone();
        async move {
            let payload = String::from_utf8(d.payload().to_vec()).unwrap();
            seen.lock().unwrap().insert(payload);
            Ok::<(), std::io::Error>(())
        }
    })
    .unwrap();
    broker.start().await.unwrap()
}

async fn handled_within(handled: &Handled, want: &BTreeSet<String>) -> BTreeSet<String> {
    for _ in 0..600 {
        if want.is_subset(&handled.lock().unwrap()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handled.lock().unwrap().clone()
}

/// A brand-new subscription at AT_TIMESTAMP t, on a stream split before t: records of the
/// children that arrived before t must not be handled (476a536 created the children at
/// AT_TIMESTAMP t; b8ee3f4 creates them at TRIM_HORIZON because their parent is created in
/// the same listing).
#[tokio::test(start_paused = true)]
async fn a_new_subscription_at_a_timestamp_reads_nothing_before_it_in_children() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kinesis = MemoryStream::new().with_clock(clock.clone());
    kinesis.create_stream(STREAM, 1).unwrap();
    let _old = put(&kinesis, "old", 10);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    clock.advance(Duration::from_secs(3600));
    let before_t = put(&kinesis, "child-before-t", 20);
    clock.advance(Duration::from_secs(3600));
    let t = clock.now_ms();
    clock.advance(Duration::from_secs(60));
    let after_t = put(&kinesis, "after-t", 20);
    let table = MemoryLeaseTable::new();
    let handled = Handled::default();
    let running = start_on(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        Some(StartAt::at_millis(t)),
        &handled,
    )
    .await;
    let got = handled_within(&handled, &after_t).await;
    assert!(after_t.is_subset(&got), "every record after t is handled");
    let early: Vec<&String> = got.intersection(&before_t).collect();
    let rows = MemoryLeaseStore::over(&table).list(STREAM).await.unwrap();
    let starts: Vec<(String, Option<Checkpoint>)> = rows
        .iter()
        .map(|r| (r.key.shard().to_owned(), r.checkpoint.clone()))
        .collect();
    running.shutdown().await;
    assert!(
        early.is_empty(),
        "{} records of the children from before the start time were handled: {:?}; rows: {starts:?}",
        early.len(),
        early.iter().take(3).collect::<Vec<_>>()
    );
}

/// A lease table some way off: each create lands, then its answer takes `lag` to come back.
#[derive(Debug, Clone)]
struct SlowCreates {
    inner: MemoryLeaseStore,
    lag: Duration,
}

macro_rules! forward {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $out:ty;)*) => {
        $(fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, LeaseResult<$out>> {
            self.inner.$name($($arg),*)
        })*
    };
}

impl LeaseStore for SlowCreates {
    forward! {
        take(key: &'a LeaseKey, holder: &'a Holder, take: &'a Take) -> Outcome;
        renew(key: &'a LeaseKey, holder: &'a Holder, ttl: Duration, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        checkpoint(key: &'a LeaseKey, holder: &'a Holder, checkpoint: &'a Checkpoint) -> Outcome;
        release(key: &'a LeaseKey, holder: &'a Holder, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        request(key: &'a LeaseKey, asker: &'a str, observed: u64) -> Outcome;
        hand_over(key: &'a LeaseKey, holder: &'a Holder, to: &'a str, ttl: Duration, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        delete(key: &'a LeaseKey, observed: u64) -> bool;
        evict(key: &'a LeaseKey, observed: u64, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        bump_epoch(stream: &'a str) -> ();
        epoch(stream: &'a str) -> u64;
        read(key: &'a LeaseKey) -> Option<Lease>;
        list(stream: &'a str) -> Vec<Lease>;
    }

    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let created = self.inner.create(row).await;
            tokio::time::sleep(self.lag).await;
            created
        })
    }
}

/// Two instances of a brand-new LATEST subscription start a moment apart (a fleet deployed
/// together) on a stream split before the subscription existed: the second lists the rows
/// while the first is still creating them, sees the parent's finished row and takes the
/// subscription for one with history, so it creates the children at TRIM_HORIZON.
#[tokio::test(start_paused = true)]
async fn two_instances_starting_together_at_latest_read_no_history() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let _old = put(&kinesis, "old", 10);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let old_children = put(&kinesis, "oldchild", 20);
    let table = MemoryLeaseTable::new();
    let slow = |lag_ms| SlowCreates {
        inner: MemoryLeaseStore::over(&table),
        lag: Duration::from_millis(lag_ms),
    };
    let handled = Handled::default();
    let a = start_on(&kinesis, slow(1000), "a", None, &handled).await;
    // B starts as soon as A's first shard row is in the table.
    let lister = MemoryLeaseStore::over(&table);
    for _ in 0..1000 {
        if !lister.list(STREAM).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = start_on(&kinesis, slow(1000), "b", None, &handled).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let new = put(&kinesis, "new", 20);
    let got = handled_within(&handled, &new).await;
    let rows = lister.list(STREAM).await.unwrap();
    let starts: Vec<(String, Option<Checkpoint>)> = rows
        .iter()
        .map(|r| (r.key.shard().to_owned(), r.checkpoint.clone()))
        .collect();
    b.shutdown().await;
    a.shutdown().await;
    assert!(new.is_subset(&got), "new records handled");
    let history: Vec<&String> = got.intersection(&old_children).collect();
    assert!(
        history.is_empty(),
        "a brand-new LATEST subscription handled {} records from before it began; rows: {starts:?}",
        history.len()
    );
}
