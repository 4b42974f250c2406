//! Where shards start when the table already has history: a shard whose ancestor holds (or
//! held) a checkpoint is read from its first record, however many levels down and whoever
//! created the rows (an import, another version, an operator), at the default `LATEST`.
//!
//! A review found that rows created with counter 1 (as the KCL import writes them) made the
//! first broker take the subscription for brand new: children of children, and children of a
//! trimmed parent, started at the tip and their records were never handled. Each test here
//! puts records in every shard, writes the table as the import leaves it, starts one broker at
//! the default start and checks that every record after the checkpoints is handled. Controls:
//! a brand-new subscription at `LATEST` still starts at the tip, and at `TRIM_HORIZON` reads
//! everything.
//!
//! And the other side: a brand-new subscription reads nothing from before its start position,
//! also on a stream split before it and when instances start together (a hostile review
//! found both reading history: children of a shard closed before an `AT_TIMESTAMP` beginning
//! created at `TRIM_HORIZON`, and a second instance that saw the first one's finished row
//! taking the subscription for one with history).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{
    BoxFuture, Clock, Holder, Lease, LeaseKey, LeaseResult, LeaseStore, Outcome, Take,
};
use kinesis_broker::testing::{ManualClock, MemoryStream};
use kinesis_broker::{
    Broker, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
    SequenceNumber, StartAt,
};

const STREAM: &str = "s";

type Handled = Arc<Mutex<BTreeSet<String>>>;

/// Puts `n` records whose payloads name `tag` and their index.
fn put(kinesis: &MemoryStream, tag: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let payload = format!("{tag}-{i}");
            let stored = kinesis
                .put(STREAM, &format!("key-{tag}-{i}"), payload.clone())
                .unwrap();
            (payload, stored.sequence)
        })
        .collect()
}

/// A row as the import creates it: counter 1, no owner, a checkpoint of the KCL.
async fn imported_row(table: &MemoryLeaseTable, shard: &str, checkpoint: Checkpoint) {
    let store = MemoryLeaseStore::over(table);
    let row =
        Lease::new(LeaseKey::new(STREAM, shard).unwrap(), Vec::new()).starting_at(Some(checkpoint));
    assert!(store.create(&row).await.unwrap());
}

fn after(sequence: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(sequence, Some(0)).unwrap())
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    start_at: Option<StartAt>,
) -> (RunningBroker, Handled) {
    let handled = Handled::default();
    let running = start_on(
        kinesis,
        MemoryLeaseStore::over(table),
        "a",
        start_at,
        &handled,
    )
    .await;
    (running, handled)
}

/// One broker on `store` as `owner`, recording the payloads it handles in `handled`.
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

fn payloads(records: &[(String, String)]) -> BTreeSet<String> {
    records.iter().map(|(p, _)| p.clone()).collect()
}

/// Waits (paused time) until `handled` holds `want`, or a generous bound has passed.
async fn handled_within(handled: &Handled, want: &BTreeSet<String>) -> BTreeSet<String> {
    for _ in 0..600 {
        if want.is_subset(&handled.lock().unwrap()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handled.lock().unwrap().clone()
}

fn missing(want: &BTreeSet<String>, got: &BTreeSet<String>) -> Vec<String> {
    want.difference(got).cloned().collect()
}

#[tokio::test(start_paused = true)]
async fn grandchildren_of_an_imported_checkpoint_are_read_from_their_first_record() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let root = put(&kinesis, "root", 10);
    // 0 splits into 1 and 2, then 1 into 3 and 4, then 3 into 5 and 6 (three levels).
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let level1 = put(&kinesis, "l1", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000001")
        .unwrap();
    let level2 = put(&kinesis, "l2", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000003")
        .unwrap();
    let level3 = put(&kinesis, "l3", 20);
    let table = MemoryLeaseTable::new();
    // The KCL stopped inside shard 0, after its fourth record.
    imported_row(&table, "shardId-000000000000", after(&root[3].1)).await;
    let (running, handled) = start(&kinesis, &table, None).await;
    let mut want = payloads(&root[4..]);
    want.extend(payloads(&level1));
    want.extend(payloads(&level2));
    want.extend(payloads(&level3));
    let got = handled_within(&handled, &want).await;
    assert_eq!(missing(&want, &got), Vec::<String>::new(), "lost records");
    assert!(
        payloads(&root[..4]).is_disjoint(&got),
        "nothing at or before the checkpoint is handled again"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn children_of_a_trimmed_parent_are_read_from_their_first_record_when_the_table_has_history()
{
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let before = put(&kinesis, "before", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let children = put(&kinesis, "child", 30);
    // Shard 0 ages out of the stream: the import skips it, so it has no row.
    kinesis.trim_shard(STREAM, "shardId-000000000000").unwrap();
    let table = MemoryLeaseTable::new();
    // The KCL's checkpoint in shard 1: its last record put before the split; records of
    // shard 1 put after the split come after it.
    let last_of_one = kinesis_records_of(&kinesis, "shardId-000000000001", &before);
    imported_row(
        &table,
        "shardId-000000000001",
        after(&last_of_one.last().unwrap().1),
    )
    .await;
    let (running, handled) = start(&kinesis, &table, None).await;
    // Every record put after the split: in shard 1 after the checkpoint, and in 2 and 3.
    let want = payloads(&children);
    let got = handled_within(&handled, &want).await;
    assert_eq!(missing(&want, &got), Vec::<String>::new(), "lost records");
    running.shutdown().await;
}

/// The records among `put` that went to `shard`.
fn kinesis_records_of(
    kinesis: &MemoryStream,
    shard: &str,
    put: &[(String, String)],
) -> Vec<(String, String)> {
    let range = kinesis
        .shards(STREAM)
        .unwrap()
        .into_iter()
        .find(|s| s.id == shard)
        .unwrap()
        .hash_range;
    put.iter()
        .filter(|(payload, _)| {
            let hash = kinesis_broker::testing::hash_key(&format!("key-{payload}"));
            range.0 <= hash && hash <= range.1
        })
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_brand_new_subscription_at_latest_still_starts_at_the_tip() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let old = put(&kinesis, "old", 10);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let old_children = put(&kinesis, "oldchild", 10);
    let table = MemoryLeaseTable::new();
    let (running, handled) = start(&kinesis, &table, None).await;
    // Every shard taken and opened at the tip: then new records arrive.
    for _ in 0..50 {
        if running.stats().shards(STREAM).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let new = put(&kinesis, "new", 10);
    let got = handled_within(&handled, &payloads(&new)).await;
    assert_eq!(missing(&payloads(&new), &got), Vec::<String>::new());
    assert!(
        payloads(&old).is_disjoint(&got) && payloads(&old_children).is_disjoint(&got),
        "a new subscription at LATEST reads nothing from before its start: {got:?}"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_brand_new_subscription_at_trim_horizon_reads_every_level() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let mut all = put(&kinesis, "root", 5);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    all.extend(put(&kinesis, "l1", 10));
    kinesis
        .split_evenly(STREAM, "shardId-000000000001")
        .unwrap();
    all.extend(put(&kinesis, "l2", 10));
    let table = MemoryLeaseTable::new();
    let (running, handled) = start(&kinesis, &table, Some(StartAt::TrimHorizon)).await;
    let got = handled_within(&handled, &payloads(&all)).await;
    assert_eq!(missing(&payloads(&all), &got), Vec::<String>::new());
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_subscription_at_a_timestamp_reads_nothing_before_it_in_children() {
    let clock = ManualClock::new(1_700_000_000_000);
    let kinesis = MemoryStream::new().with_clock(clock.clone());
    kinesis.create_stream(STREAM, 1).unwrap();
    let _old = payloads(&put(&kinesis, "old", 10));
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    clock.advance(Duration::from_secs(3600));
    let before_t = payloads(&put(&kinesis, "child-before-t", 20));
    clock.advance(Duration::from_secs(3600));
    let t = clock.now_ms();
    clock.advance(Duration::from_secs(60));
    let after_t = payloads(&put(&kinesis, "after-t", 20));
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
        request(key: &'a LeaseKey, asker: &'a str, holder: &'a str) -> Outcome;
        hand_over(key: &'a LeaseKey, holder: &'a Holder, to: &'a str, ttl: Duration, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        delete(key: &'a LeaseKey, observed: u64) -> bool;
        evict(key: &'a LeaseKey, observed: u64, checkpoint: Option<&'a Checkpoint>, poke: Option<&'a LeaseKey>) -> Outcome;
        poke(member: &'a LeaseKey, about: &'a LeaseKey) -> bool;
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
    let _old = payloads(&put(&kinesis, "old", 10));
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let old_children = payloads(&put(&kinesis, "oldchild", 20));
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
    let new = payloads(&put(&kinesis, "new", 20));
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
