//! Regression tests for the lease-protocol defects of issue 12, on the broker facade: a
//! `MemoryStream`, brokers with their own `MemoryLeaseStore` over one shared
//! `MemoryLeaseTable`, paused time, and the default start position (`LATEST`) unless a test
//! says otherwise.
//!
//! Every test here uses only APIs that existed before the fixes (commit 4f9fbb5), so the file
//! also builds against that code, where each test fails. Tests that need newer APIs (lease
//! tokens, wall clocks, trimmed shards) are in `lease_hardening_protocol.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    testing::MemoryStream,
    Broker, BrokerBuilder, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RetryPolicy,
    RunningBroker, SequenceNumber, StartAt, SubscriptionBuilder,
};
use tokio::time::{sleep, timeout, Instant};
use tokio_stream::StreamExt;

const STREAM: &str = "s";
const SHARD_0: &str = "shardId-000000000000";

/// One record a handler finished.
#[derive(Debug, Clone)]
struct Handled {
    instance: String,
    shard: String,
    payload: String,
}

type Log = Arc<Mutex<Vec<Handled>>>;

/// Open: handlers succeed and record. Closed: they fail (and are retried in place), so
/// nothing settles and no checkpoint past the start can be written.
#[derive(Debug, Clone, Default)]
struct Gate(Arc<AtomicBool>);

impl Gate {
    fn open() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    fn closed() -> Self {
        Self::default()
    }

    fn set_open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_open(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A broker of instance `owner` on the shared table, with a 2 s shutdown deadline.
fn builder(kinesis: &MemoryStream, table: &MemoryLeaseTable, owner: &str) -> BrokerBuilder {
    Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .shutdown_deadline(Duration::from_secs(2))
}

/// Finishes `sub` with a handler that records (instance, shard, payload) into `log` while
/// `gate` is open and fails while it is closed; failures are retried every 100-500 ms.
fn record_into(sub: SubscriptionBuilder<'_>, log: &Log, instance: &str, gate: &Gate) {
    let (log, instance, gate) = (log.clone(), instance.to_owned(), gate.clone());
    sub.retry(
        RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_millis(500)),
    )
    .handle(move |d: Delivery| {
        let (log, instance, gate) = (log.clone(), instance.clone(), gate.clone());
        async move {
            if !gate.is_open() {
                return Err(std::io::Error::other(
                    "gate closed: this record does not settle",
                ));
            }
            log.lock().unwrap().push(Handled {
                instance,
                shard: d.shard().to_owned(),
                payload: String::from_utf8_lossy(d.payload()).into_owned(),
            });
            Ok(())
        }
    })
    .unwrap();
}

/// A started broker of instance `owner` at the default start position, recording into `log`.
async fn recording(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    log: &Log,
    gate: &Gate,
) -> RunningBroker {
    let mut broker = builder(kinesis, table, owner).build().unwrap();
    record_into(broker.subscribe(STREAM), log, owner, gate);
    broker.start().await.unwrap()
}

/// Puts `n` records with payloads `{tag}-{i}` over `n` partition keys; returns
/// payload -> shard.
fn put(kinesis: &MemoryStream, tag: &str, n: usize) -> BTreeMap<String, String> {
    (0..n)
        .map(|i| {
            let payload = format!("{tag}-{i}");
            let shard = kinesis
                .put(STREAM, &format!("{tag}-key-{i}"), payload.clone())
                .unwrap()
                .shard;
            (payload, shard)
        })
        .collect()
}

/// The distinct payloads handled, by any instance (`None`) or by one.
fn handled(log: &Log, instance: Option<&str>) -> BTreeSet<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|h| instance.is_none_or(|i| h.instance == i))
        .map(|h| h.payload.clone())
        .collect()
}

/// How many of `expected` were handled (by anyone).
fn handled_of(log: &Log, expected: &BTreeMap<String, String>) -> usize {
    let seen = handled(log, None);
    expected.keys().filter(|p| seen.contains(*p)).count()
}

/// Polls `cond` every 50 ms of paused time for up to `limit`; true once it held.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

fn held(running: &RunningBroker) -> usize {
    running.stats().shards(STREAM).len()
}

/// Every row of the stream as (owner, counter), read through a store of the test's own.
async fn rows(table: &MemoryLeaseTable) -> BTreeMap<String, (Option<String>, u64)> {
    MemoryLeaseStore::over(table)
        .list(STREAM)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key.shard().to_owned(), (r.owner, r.counter)))
        .collect()
}

/// Defect 1, graceful shutdown: a shard that started at `LATEST` and whose owner shut down
/// before anything settled (no checkpoint yet) is resumed by the next owner from where the
/// first reader began, so no record put after the subscription began is skipped.
#[tokio::test(start_paused = true)]
async fn latest_start_survives_a_graceful_shutdown_before_the_first_checkpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = recording(&kinesis, &table, "a", &log, &Gate::closed()).await;
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    sleep(Duration::from_secs(2)).await; // both readers opened at the tip
    let records = put(&kinesis, "r", 12);
    sleep(Duration::from_secs(2)).await; // a reads them; none settles
    a.shutdown().await;

    let b = recording(&kinesis, &table, "b", &log, &Gate::open()).await;
    eventually(Duration::from_secs(20), || handled_of(&log, &records) == 12).await;
    let got = handled_of(&log, &records);
    assert_eq!(
        got, 12,
        "b handled {got} of the 12 records a left unsettled"
    );
    b.shutdown().await;
}

/// Defect 1, hand-over: a shard handed over (on request) before its first checkpoint is read
/// by the new owner from where the first reader began: no record is skipped.
#[tokio::test(start_paused = true)]
async fn latest_start_survives_a_hand_over_before_the_first_checkpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a_gate = Gate::closed();
    let a = recording(&kinesis, &table, "a", &log, &a_gate).await;
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    sleep(Duration::from_secs(2)).await;
    let records = put(&kinesis, "r", 20);
    let shards: BTreeSet<&String> = records.values().collect();
    assert_eq!(shards.len(), 2, "records on both shards");
    sleep(Duration::from_secs(1)).await;

    // b asks for its share; a hands a shard over with nothing settled (after waiting, while
    // renewing, up to two leases for its failing records to settle, then for no attempt to
    // run).
    let b = recording(&kinesis, &table, "b", &log, &Gate::open()).await;
    assert!(
        eventually(Duration::from_secs(45), || held(&b) == 1).await,
        "b got a shard"
    );
    assert_eq!(held(&a), 1);
    let taken = b.stats().shards(STREAM)[0].shard.clone();
    a_gate.set_open(); // a settles what it still holds
    eventually(Duration::from_secs(30), || handled_of(&log, &records) == 20).await;
    let got = handled_of(&log, &records);
    let in_taken = records.values().filter(|s| **s == taken).count();
    let by_b = log
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.instance == "b" && h.shard == taken)
        .count();
    assert_eq!(
        (got, by_b),
        (20, in_taken),
        "{got} of 20 records handled; b handled {by_b} of the {in_taken} in the shard it took over"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// Defect 1 (and 5), crash: when the first owner is dropped before its first checkpoint, the
/// next owner takes the shards once their leases lapse and reads every record put after the
/// first reader began.
#[tokio::test(start_paused = true)]
async fn latest_start_survives_a_crash_before_the_first_checkpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = recording(&kinesis, &table, "a", &log, &Gate::closed()).await;
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    sleep(Duration::from_secs(2)).await;
    let records = put(&kinesis, "r", 10);
    sleep(Duration::from_secs(1)).await;
    drop(a); // a crash: nothing released, nothing checkpointed

    let b = recording(&kinesis, &table, "b", &log, &Gate::open()).await;
    eventually(Duration::from_secs(30), || handled_of(&log, &records) == 10).await;
    let got = handled_of(&log, &records);
    assert_eq!(
        (got, held(&b)),
        (10, 2),
        "b handled {got} of 10 records and holds {} shards after a crashed",
        held(&b)
    );
    b.shutdown().await;
}

/// Defect 1, expired iterator: a reader that opened at `LATEST` and sees its iterator expire
/// before its first delivery reopens where it began, not at a new tip: no record is skipped.
#[tokio::test(start_paused = true)]
async fn latest_start_survives_an_expired_iterator_before_the_first_delivery() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = recording(&kinesis, &table, "a", &log, &Gate::open()).await;
    // Taken at 0 s; the reader reads at the tip every poll interval (1 s).
    sleep(Duration::from_millis(2_500)).await;
    assert_eq!(held(&a), 1);
    let records = put(&kinesis, "r", 4);
    kinesis.expire_iterators(); // before the next read at 3 s
    eventually(Duration::from_secs(10), || handled_of(&log, &records) == 4).await;
    let got = handled_of(&log, &records);
    assert_eq!(
        got, 4,
        "{got} of 4 records handled after the iterator expired"
    );
    a.shutdown().await;
}

/// Defect 5: dropping a `RunningBroker` stops its lease keepers and coordinator: the rows'
/// counters stand still, and once the leases lapse another broker takes every shard and
/// handles new records.
#[tokio::test(start_paused = true)]
async fn dropping_a_running_broker_stops_renewals_and_frees_its_shards() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = recording(&kinesis, &table, "a", &log, &Gate::open()).await;
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    sleep(Duration::from_secs(4)).await; // a renewal landed
    drop(a);
    sleep(Duration::from_secs(1)).await;
    let before = rows(&table).await;
    sleep(Duration::from_secs(12)).await;
    let after = rows(&table).await;
    assert_eq!(before, after, "nothing renews the rows of a dropped broker");

    let b = recording(&kinesis, &table, "b", &log, &Gate::open()).await;
    assert!(
        eventually(Duration::from_secs(15), || held(&b) == 2).await,
        "b holds {} of 2 shards once the dropped broker's leases lapsed",
        held(&b)
    );
    sleep(Duration::from_secs(1)).await;
    let records = put(&kinesis, "r", 10);
    eventually(Duration::from_secs(10), || handled_of(&log, &records) == 10).await;
    assert_eq!(handled(&log, Some("b")).len(), 10);
    b.shutdown().await;
}

/// Defect 5: dropping the `DeliveryStream` of a running broker releases every shard it
/// holds (rows without owner), so another broker takes them and handles new records.
#[tokio::test(start_paused = true)]
async fn dropping_the_delivery_stream_releases_every_shard() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let mut broker = builder(&kinesis, &table, "a").build().unwrap();
    let deliveries = broker.subscribe(STREAM).stream().unwrap();
    let a = broker.start().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    drop(deliveries);
    sleep(Duration::from_secs(2)).await;
    let released = rows(&table).await;
    assert!(
        released.values().all(|(owner, _)| owner.is_none()),
        "rows still held after the stream was dropped: {released:?}"
    );

    let b = recording(&kinesis, &table, "b", &log, &Gate::open()).await;
    assert!(
        eventually(Duration::from_secs(5), || held(&b) == 2).await,
        "b holds {} of 2 shards",
        held(&b)
    );
    sleep(Duration::from_secs(1)).await;
    let records = put(&kinesis, "r", 10);
    eventually(Duration::from_secs(10), || handled_of(&log, &records) == 10).await;
    assert_eq!(handled(&log, Some("b")).len(), 10);
    b.shutdown().await;
    a.shutdown().await;
}

/// Defect 5: the shards released because a `DeliveryStream` was dropped are announced
/// (the stream's epoch moves), so a running survivor takes them at its next take round
/// (1 s), without waiting for its list interval (here 30 s) or a lease duration.
#[tokio::test(start_paused = true)]
async fn shards_freed_by_a_dropped_delivery_stream_are_taken_within_a_take_interval() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let mut broker = builder(&kinesis, &table, "a").build().unwrap();
    let deliveries = broker.subscribe(STREAM).stream().unwrap();
    let a = broker.start().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || held(&a) == 1).await);
    let mut b = builder(&kinesis, &table, "b")
        .list_interval(Duration::from_secs(30))
        .build()
        .unwrap();
    record_into(b.subscribe(STREAM), &log, "b", &Gate::open());
    let b = b.start().await.unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(held(&b), 0, "one shard: b does not ask a for it");

    drop(deliveries);
    let dropped = Instant::now();
    eventually(Duration::from_secs(15), || held(&b) == 1).await;
    let took = dropped.elapsed();
    assert!(
        held(&b) == 1 && took <= Duration::from_millis(1_500),
        "b held the freed shard {took:?} after the stream was dropped"
    );
    sleep(Duration::from_secs(1)).await;
    let records = put(&kinesis, "r", 5);
    eventually(Duration::from_secs(10), || handled_of(&log, &records) == 5).await;
    assert_eq!(handled(&log, Some("b")).len(), 5);
    b.shutdown().await;
    a.shutdown().await;
}

/// Defect 7: a subscription at `LATEST` that begins after the stream was resharded skips the
/// closed parent (its row is created finished, `SHARD_END`) and starts the open children at
/// their tip: none of the records put before it began is replayed.
#[tokio::test(start_paused = true)]
async fn latest_on_a_resharded_stream_skips_the_parent_and_starts_children_at_the_tip() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let before_split = put(&kinesis, "parent", 6);
    kinesis.split_evenly(STREAM, SHARD_0).unwrap();
    let in_children = put(&kinesis, "child", 10);
    assert!(in_children.values().all(|shard| shard != SHARD_0));
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let a = recording(&kinesis, &table, "a", &log, &Gate::open()).await;
    sleep(Duration::from_secs(5)).await;
    let records = put(&kinesis, "new", 10);
    eventually(Duration::from_secs(10), || handled_of(&log, &records) == 10).await;
    sleep(Duration::from_secs(3)).await;
    let seen = handled(&log, None);
    let replayed: Vec<&String> = seen
        .iter()
        .filter(|p| before_split.contains_key(*p) || in_children.contains_key(*p))
        .collect();
    assert_eq!(
        (handled_of(&log, &records), replayed.len()),
        (10, 0),
        "records from before the subscription began were replayed: {replayed:?}"
    );
    let parent = MemoryLeaseStore::over(&table)
        .read(&LeaseKey::new(STREAM, SHARD_0).unwrap())
        .await
        .unwrap()
        .expect("the parent's row");
    assert_eq!(parent.checkpoint, Some(Checkpoint::ShardEnd));
    assert_eq!(held(&a), 2, "a reads both children");
    a.shutdown().await;
}

/// Defect 7: `reposition(..)` applies once per subscription. With `reposition(Latest)` on
/// every instance, a shard handed over on request and the shards released by a graceful
/// shutdown resume after the final checkpoint: records put throughout are each handled
/// exactly once, none skipped by a second reposition.
#[tokio::test(start_paused = true)]
async fn reposition_applies_once_per_subscription_across_hand_overs() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let start = |owner: &'static str| {
        let mut broker = builder(&kinesis, &table, owner).build().unwrap();
        record_into(
            broker.subscribe(STREAM).reposition(StartAt::Latest),
            &log,
            owner,
            &Gate::open(),
        );
        broker.start()
    };
    let a = start("a").await.unwrap();
    assert!(eventually(Duration::from_secs(5), || held(&a) == 2).await);
    sleep(Duration::from_secs(2)).await;

    // Two records every 100 ms from now on, until told to stop.
    let produced: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (kinesis, produced, stop) = (kinesis.clone(), produced.clone(), stop.clone());
        tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                produced
                    .lock()
                    .unwrap()
                    .extend(put(&kinesis, &format!("p{round}"), 2));
                round += 1;
                sleep(Duration::from_millis(100)).await;
            }
        })
    };
    sleep(Duration::from_secs(2)).await;
    let b = start("b").await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || held(&b) == 1).await,
        "a handed a shard over"
    );
    sleep(Duration::from_secs(2)).await;
    a.shutdown().await;
    assert!(eventually(Duration::from_secs(5), || held(&b) == 2).await);
    sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    producer.await.unwrap();
    let produced = produced.lock().unwrap().clone();
    eventually(Duration::from_secs(10), || {
        handled_of(&log, &produced) == produced.len()
    })
    .await;
    b.shutdown().await;
    let got = handled_of(&log, &produced);
    let total = log.lock().unwrap().len();
    assert_eq!(
        (got, total),
        (produced.len(), produced.len()),
        "of {} records, {got} handled, {total} handlings: none skipped, none twice",
        produced.len()
    );
}

/// Defect 9: `shutdown()` waits its deadline once for all subscriptions together: with two
/// subscriptions whose handlers both hang, it returns one deadline after it began, not two.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_one_deadline_for_every_subscription() {
    let kinesis = MemoryStream::new();
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .shutdown_deadline(Duration::from_secs(4))
        .build()
        .unwrap();
    let entered = Arc::new(AtomicUsize::new(0));
    for stream in ["s1", "s2"] {
        kinesis.create_stream(stream, 1).unwrap();
        let entered = entered.clone();
        broker
            .subscribe(stream)
            .handle(move |_d: Delivery| {
                let entered = entered.clone();
                async move {
                    entered.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .unwrap();
    }
    let running = broker.start().await.unwrap();
    sleep(Duration::from_secs(2)).await;
    for stream in ["s1", "s2"] {
        kinesis.put(stream, "k", "hangs").unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || entered.load(Ordering::SeqCst)
            == 2)
        .await
    );
    let began = Instant::now();
    let report = running.shutdown().await;
    let took = began.elapsed();
    assert!(!report.handlers_finished);
    assert!(
        took <= Duration::from_millis(4_500),
        "shutdown took {took:?} with a 4 s deadline"
    );
}

/// Defect 9: once `shutdown()` passed its deadline and released the shards, a
/// `DeliveryStream` consumer gets no more deliveries of them (they are revoked and skipped).
#[tokio::test(start_paused = true)]
async fn a_stream_consumer_gets_no_deliveries_of_released_shards_after_shutdown() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let mut broker = builder(&kinesis, &table, "a").build().unwrap();
    let mut deliveries = broker.subscribe(STREAM).stream().unwrap();
    let running = broker.start().await.unwrap();
    sleep(Duration::from_secs(2)).await;
    put(&kinesis, "r", 10);
    let first = timeout(Duration::from_secs(5), deliveries.next())
        .await
        .expect("a delivery")
        .expect("the stream is open");
    sleep(Duration::from_secs(1)).await; // the rest wait in the channel
    let report = running.shutdown().await; // the first is never acked: the deadline passes
    assert!(!report.handlers_finished);
    let mut after = Vec::new();
    while let Ok(Some(d)) = timeout(Duration::from_millis(500), deliveries.next()).await {
        after.push(String::from_utf8_lossy(d.payload()).into_owned());
    }
    assert!(
        after.is_empty(),
        "deliveries of a released shard after shutdown: {after:?}"
    );
    drop(first);
}

/// True when `err` is `BrokerError::InvalidConfig` for `setting`, judged by its message (so
/// this file also builds against code without the variant).
fn is_invalid_config(err: &kinesis_broker::BrokerError, setting: &str) -> bool {
    err.to_string()
        .starts_with(&format!("invalid broker setting `{setting}`"))
}

/// Defect 9: `build()` refuses zero intervals and a renew interval not shorter than the
/// lease with `InvalidConfig` naming the setting, instead of panicking later.
#[tokio::test]
async fn build_refuses_zero_intervals_and_renew_not_shorter_than_the_lease() {
    const ZERO: Duration = Duration::ZERO;
    const TEN: Duration = Duration::from_secs(10);
    type Configure = fn(BrokerBuilder) -> BrokerBuilder;
    let cases: [(&str, Configure); 8] = [
        ("renew_interval", |b| {
            b.lease_duration(TEN).renew_interval(TEN)
        }),
        ("renew_interval", |b| {
            b.renew_interval(Duration::from_secs(12))
                .lease_duration(TEN)
        }),
        ("renew_interval", |b| b.renew_interval(TEN)),
        ("lease_duration", |b| {
            b.lease_duration(ZERO).renew_interval(ZERO)
        }),
        ("take_interval", |b| b.take_interval(ZERO)),
        ("list_interval", |b| b.list_interval(ZERO)),
        ("shard_sync_interval", |b| b.shard_sync_interval(ZERO)),
        ("poll_interval", |b| b.poll_interval(ZERO)),
    ];
    for (setting, configure) in cases {
        let Err(err) = configure(Broker::builder().kinesis(MemoryStream::new())).build() else {
            panic!("{setting}: build() accepted it");
        };
        assert!(is_invalid_config(&err, setting), "{setting}: {err}");
    }
    Broker::builder()
        .kinesis(MemoryStream::new())
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .build()
        .expect("renew shorter than the lease is fine");
}

/// An owner id starting with `*` would name the member row `stream@members:*`, which is the
/// roster's own index row in DynamoDB: refused by `build()`.
#[tokio::test]
async fn build_refuses_an_owner_id_the_lease_table_keeps_for_itself() {
    for owner in ["*", "*epoch", ""] {
        let Err(err) = Broker::builder()
            .kinesis(MemoryStream::new())
            .owner_id(owner)
            .build()
        else {
            panic!("owner id `{owner}` accepted");
        };
        assert!(is_invalid_config(&err, "owner_id"), "{owner}: {err}");
    }
    Broker::builder()
        .kinesis(MemoryStream::new())
        .owner_id("a*b")
        .build()
        .expect("a `*` elsewhere is fine");
}

/// Defect 9: a subscription cannot start or reposition at a sequence number (it names a
/// record of one shard): refused with `InvalidConfig` when the subscription is registered.
#[tokio::test]
async fn a_sequence_number_start_position_is_refused() {
    let seq = SequenceNumber::new(
        "49590338271490256608559692538361571095921575989136588898",
        None,
    )
    .unwrap();
    let mut broker = Broker::builder()
        .kinesis(MemoryStream::new())
        .build()
        .unwrap();
    let ok = |_d: Delivery| std::future::ready(Ok::<(), std::io::Error>(()));
    let err = broker
        .subscribe(STREAM)
        .start_at(StartAt::AtSequence(seq.clone()))
        .handle(ok)
        .expect_err("AtSequence start");
    assert!(is_invalid_config(&err, "start_at"), "{err}");
    let err = broker
        .subscribe(STREAM)
        .start_at(StartAt::AfterSequence(seq.clone()))
        .stream()
        .expect_err("AfterSequence start");
    assert!(is_invalid_config(&err, "start_at"), "{err}");
    let err = broker
        .subscribe(STREAM)
        .reposition(StartAt::AtSequence(seq))
        .handle(ok)
        .expect_err("AtSequence reposition");
    assert!(is_invalid_config(&err, "reposition"), "{err}");
    broker
        .subscribe(STREAM)
        .start_at(StartAt::at_millis(1_700_000_000_000))
        .handle(ok)
        .expect("a timestamp is a subscription position");
}
