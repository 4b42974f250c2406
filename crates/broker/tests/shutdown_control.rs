//! Shutdown under the service's control: `run_until(future)` and a cloneable
//! `ShutdownHandle`, on a MemoryStream with paused time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, Publisher, StartAt};
use kinesis_lease_core::testkit::Outage;

fn counting_broker(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    seen: Arc<AtomicUsize>,
) -> Broker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .build()
        .unwrap();
    broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .handle(move |_d: Delivery| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    broker
}

/// `run_until` returns once the given future resolves, after a clean shutdown: every row is
/// released with its final checkpoint, so another broker resumes at once and handles nothing
/// twice.
#[tokio::test(start_paused = true)]
async fn run_until_shuts_down_cleanly_when_the_future_resolves() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    Publisher::new(kinesis.clone(), "s")
        .put_all(
            (0..50)
                .map(|i| kinesis_broker::PutEntry::new(format!("{i}"), format!("k{i}")))
                .collect(),
        )
        .await
        .unwrap();
    let table = MemoryLeaseTable::new();
    let seen = Arc::new(AtomicUsize::new(0));
    let running = counting_broker(&kinesis, &table, "a", seen.clone())
        .start()
        .await
        .unwrap();
    let stop = tokio::time::sleep(Duration::from_secs(5));
    let report = running.run_until(stop).await.unwrap();
    assert!(report.handlers_finished);
    assert_eq!(seen.load(Ordering::SeqCst), 50);
    let rows = MemoryLeaseStore::over(&table);
    for row in kinesis_broker::lease::LeaseStore::list(&rows, "s")
        .await
        .unwrap()
    {
        assert_eq!(row.owner, None, "{row:?} released");
        assert!(row.checkpoint.is_some(), "{row:?} checkpointed");
    }
    // A second broker resumes after the final checkpoints: nothing again.
    let again = Arc::new(AtomicUsize::new(0));
    let b = counting_broker(&kinesis, &table, "b", again.clone())
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(b.stats().shards("s").len(), 2);
    b.shutdown().await;
    assert_eq!(again.load(Ordering::SeqCst), 0);
}

/// A handle taken before `start()` and cloned into a handler stops the broker from inside:
/// `run_until` on a future that never resolves still returns, and every clone sees the request.
#[tokio::test(start_paused = true)]
async fn a_cloned_handle_stops_the_broker_from_a_handler() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
    let handle = broker.shutdown_handle();
    let inside = handle.clone();
    assert!(!handle.is_requested());
    broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .handle(move |d: Delivery| {
            let inside = inside.clone();
            async move {
                if d.payload().as_ref() == b"stop" {
                    inside.shutdown();
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    assert!(!running.shutdown_handle().is_requested());
    Publisher::new(kinesis.clone(), "s")
        .put("k", "stop")
        .await
        .unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        running.run_until(std::future::pending::<()>()),
    )
    .await
    .expect("the handle ends run_until")
    .unwrap();
    assert!(report.handlers_finished);
    assert!(handle.is_requested());
}

/// A request made before `run_until` is called is not missed.
#[tokio::test(start_paused = true)]
async fn a_request_before_run_until_is_kept() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let running = counting_broker(&kinesis, &MemoryLeaseTable::new(), "a", seen)
        .start()
        .await
        .unwrap();
    running.shutdown_handle().shutdown();
    tokio::time::timeout(
        Duration::from_secs(60),
        running.run_until(std::future::pending::<()>()),
    )
    .await
    .expect("an earlier request ends run_until at once")
    .unwrap();
}

/// Review finding: a subscription that failed is reported even when a shutdown was asked for
/// at the same time (the two used to race, and half the time the failure was lost).
#[tokio::test(start_paused = true)]
async fn a_failure_is_not_lost_to_a_shutdown_asked_at_the_same_time() {
    for _ in 0..8 {
        let kinesis = MemoryStream::new();
        kinesis.create_stream("s", 1).unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let running = counting_broker(&kinesis, &MemoryLeaseTable::new(), "a", seen)
            .start()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        kinesis.delete_stream("s").unwrap();
        tokio::time::timeout(Duration::from_secs(60), running.failed())
            .await
            .expect("the deleted stream fails the subscription");
        running.shutdown_handle().shutdown();
        let outcome = running.run_until(std::future::pending::<()>()).await;
        assert!(
            matches!(outcome, Err(kinesis_broker::BrokerError::Subscription { ref stream, .. }) if stream == "s"),
            "{outcome:?}"
        );
    }
}

/// Instance "a" alone on stream "s" of 4 shards (handlers that return at once), behind a
/// switch on its lease table, once its first take round has taken its one row (alone, an
/// instance takes one row at its first round and the rest a list interval later).
async fn alone_on_a_switched_table(
    table: &MemoryLeaseTable,
) -> (
    kinesis_broker::RunningBroker,
    kinesis_lease_core::testkit::OutageSwitch,
) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(table)));
    let mut broker = Broker::builder()
        .kinesis(kinesis)
        .lease_store(store)
        .owner_id("a")
        .build()
        .unwrap();
    broker
        .subscribe("s")
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .unwrap();
    let running = broker.start().await.unwrap();
    for _ in 0..100 {
        if !running.stats().shards("s").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        running.stats().shards("s").len(),
        1,
        "the first round takes one row"
    );
    (running, switch)
}

/// A shutdown that begins while a take round waits on a slow lease table takes nothing more:
/// the rows that round would have taken are never written, rather than taken after the drain
/// began and held unread until it ended (the simulation's seed 6695: a leaving instance took
/// a row freed by another leave, and the shard was read again 11.5 s after that leave).
#[tokio::test(start_paused = true)]
async fn a_shutdown_during_a_slow_take_round_takes_nothing_more() {
    let table = MemoryLeaseTable::new();
    let (running, switch) = alone_on_a_switched_table(&table).await;
    switch.slow(Duration::from_secs(3));
    let direct = MemoryLeaseStore::over(&table);
    let before = kinesis_broker::lease::LeaseStore::list(&direct, "s")
        .await
        .unwrap();
    // The next round is waiting on its reads when the shutdown begins.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    running.shutdown().await;
    let after = kinesis_broker::lease::LeaseStore::list(&direct, "s")
        .await
        .unwrap();
    for row in before.iter().filter(|r| r.owner.is_none()) {
        let now = after
            .iter()
            .find(|r| r.key == row.key)
            .expect("the row is still listed");
        assert_eq!(
            (now.counter, &now.owner),
            (row.counter, &None),
            "{} was free when the shutdown began and was never taken: {now:?}",
            row.key.shard()
        );
    }
}

/// A take sent before the shutdown began and landing after it is let go at once (released,
/// the epoch moved), not held unread until the drain ends: a keeper renews a held row while
/// handlers finish, and this one would never be read. The table turns slow (3 s a call) once
/// the first row is held, so the next round's take is on its way when the shutdown begins;
/// a handler that never returns holds the drain for its whole deadline (30 s).
#[tokio::test(start_paused = true)]
async fn a_take_that_lands_after_the_shutdown_began_is_let_go_at_once() {
    const DEADLINE: Duration = Duration::from_secs(30);
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    // A record in every shard: the first shard read hangs its handler.
    let mut shards = std::collections::BTreeSet::new();
    for i in 0.. {
        shards.insert(kinesis.put("s", &format!("k{i}"), "x").unwrap().shard);
        if shards.len() == 4 {
            break;
        }
    }
    let table = MemoryLeaseTable::new();
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(&table)));
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id("a")
        .shutdown_deadline(DEADLINE)
        .build()
        .unwrap();
    broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .handle(|_d: Delivery| async {
            std::future::pending::<()>().await;
            Ok::<(), std::io::Error>(())
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    let direct = MemoryLeaseStore::over(&table);
    let held_by_a = |rows: &[kinesis_broker::lease::Lease]| -> std::collections::BTreeSet<String> {
        rows.iter()
            .filter(|r| r.owner.as_deref() == Some("a"))
            .map(|r| r.key.shard().to_owned())
            .collect()
    };
    let list = || kinesis_broker::lease::LeaseStore::list(&direct, "s");
    let mut first = Default::default();
    for _ in 0..100 {
        first = held_by_a(&list().await.unwrap());
        if !first.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(first.len(), 1, "the first round takes one row");
    switch.slow(Duration::from_secs(3));
    // The next round reads the epoch and lists (3 s a call), then sends its first take 10 s
    // after the table turned slow, which lands 3 s later: the shutdown begins in between.
    tokio::time::sleep(Duration::from_millis(SHUTDOWN_AFTER_MS)).await;
    let began = tokio::time::Instant::now();
    let shutdown = tokio::spawn(running.shutdown());
    // Sampled every 100 ms: when each row was first seen held by "a" after the shutdown
    // began, and when it was seen free again.
    let mut taken_at = std::collections::BTreeMap::new();
    let mut freed_at = std::collections::BTreeMap::new();
    while !shutdown.is_finished() && began.elapsed() < DEADLINE + Duration::from_secs(10) {
        let held = held_by_a(&list().await.unwrap());
        for shard in held.difference(&first) {
            taken_at.entry(shard.clone()).or_insert(began.elapsed());
        }
        for shard in taken_at.keys() {
            if !held.contains(shard) {
                freed_at.entry(shard.clone()).or_insert(began.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.await.unwrap();
    assert!(
        !taken_at.is_empty(),
        "a take was on its way when the shutdown began (else this test proves nothing)"
    );
    for (shard, taken) in &taken_at {
        let freed = freed_at.get(shard).copied();
        assert!(
            freed.is_some_and(|f| f <= *taken + Duration::from_secs(7)),
            "{shard}, taken {taken:?} after the shutdown began, was held until {freed:?} \
             (the drain lasts {DEADLINE:?}): a row nobody reads must go at once"
        );
    }
}

/// When `a_take_that_lands_after_the_shutdown_began_is_let_go_at_once` begins its shutdown,
/// after the table turned slow: its next take round sends its first take at 10 s, landing at
/// 13 s (then 16 s and 19 s for the others; the timeline is fixed on paused time).
const SHUTDOWN_AFTER_MS: u64 = 11_500;

/// A take whose answer is lost, landing after the shutdown began, is never adopted (no listing
/// runs any more): its row, held under this instance's token with no keeper, is released when
/// the drain ends instead of being left held until the leave (nobody takes a present member's
/// row; the others take it once its owner left the roster). The same timeline as
/// `a_take_that_lands_after_the_shutdown_began_is_let_go_at_once`, the take's answer lost.
#[tokio::test(start_paused = true)]
async fn a_take_whose_answer_was_lost_during_the_shutdown_is_released_when_it_ends() {
    let table = MemoryLeaseTable::new();
    let (running, switch) = alone_on_a_switched_table(&table).await;
    let direct = MemoryLeaseStore::over(&table);
    let held_by_a = || async {
        kinesis_broker::lease::LeaseStore::list(&direct, "s")
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.owner.as_deref() == Some("a"))
            .map(|r| r.key.shard().to_owned())
            .collect::<Vec<_>>()
    };
    switch.slow(Duration::from_secs(3));
    switch.lose_take_answers(true);
    tokio::time::sleep(Duration::from_millis(SHUTDOWN_AFTER_MS)).await;
    let shutdown = tokio::spawn(running.shutdown());
    let mut landed = false;
    while !shutdown.is_finished() {
        landed |= held_by_a().await.len() > 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.await.unwrap();
    assert!(
        landed,
        "a take landed (its answer lost) after the shutdown began (else this test proves nothing)"
    );
    assert_eq!(
        held_by_a().await,
        Vec::<String>::new(),
        "every row is let go once the shutdown returned"
    );
}

/// A broker on stream "s" whose handler takes `slow` for every record, reading from the trim
/// horizon, with a shutdown deadline of `drain`.
async fn slow_broker(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    slow: Duration,
    drain: Duration,
) -> kinesis_broker::RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .shutdown_deadline(drain)
        .build()
        .unwrap();
    broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .handle(move |_d: Delivery| async move {
            tokio::time::sleep(slow).await;
            Ok::<(), std::io::Error>(())
        })
        .unwrap();
    broker.start().await.unwrap()
}

/// `a` holds four shards with a backlog on each, 5 s a record (so it hands a shard over only
/// after its 20-s settle wait); `b` joins, takes one by hand-over, spends a minute on a record
/// of it (so its shutdown, with a deadline of a minute, drains that long) and asks for a
/// second. Once `b` is busy and its request stands, `b` begins its shutdown. `a`
/// releases the shard instead of handing it to `b`, and holds it again at once. Handed to
/// `b`, which takes nothing once its shutdown began, the shard stayed unread until `b` left, a
/// minute later.
#[tokio::test(start_paused = true)]
async fn a_shard_asked_for_by_an_instance_that_began_its_shutdown_is_not_handed_to_it() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let table = MemoryLeaseTable::new();
    let rows = MemoryLeaseStore::over(&table);
    let minute = Duration::from_secs(60);
    let a = slow_broker(&kinesis, &table, "a", Duration::from_secs(5), minute).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while a.stats().shards("s").len() < 4 {
        assert!(
            tokio::time::Instant::now() < until,
            "a never held the four shards"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A backlog on every shard: a hands a shard over only after its 20-s settle wait.
    for n in 0..40 {
        kinesis.put("s", &format!("k{n}"), "x").unwrap();
    }
    let b = slow_broker(&kinesis, &table, "b", minute, minute).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    let wanted = loop {
        let busy = b.stats().shards("s").iter().any(|s| s.in_flight > 0);
        let listed = rows.list("s").await.unwrap();
        let asked = listed
            .iter()
            .find(|r| r.owner.as_deref() == Some("a") && r.wanted_by.as_deref() == Some("b"));
        if let (true, Some(row)) = (busy, asked) {
            break row.key.clone();
        }
        assert!(
            tokio::time::Instant::now() < until,
            "b never stood busy with a request for a second shard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let began = tokio::time::Instant::now();
    let stopping = tokio::spawn(async move {
        b.shutdown().await;
        began.elapsed()
    });
    // b says at once that it is leaving, not at its next member renewal.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let member = rows
        .read(&kinesis_lease_core::LeaseKey::member("s", "b").unwrap())
        .await
        .unwrap()
        .and_then(|row| row.load);
    assert_eq!(
        member.and_then(|load| load.capacity_milli),
        Some(0),
        "b's member row 50 ms into its shutdown"
    );
    let until = began + Duration::from_secs(90);
    let (mut handed_to_b, mut freed, mut again) = (false, None, None);
    while again.is_none() && tokio::time::Instant::now() < until {
        let row = rows.read(&wanted).await.unwrap().expect("the row");
        handed_to_b |= row.owner.as_deref() == Some("b");
        if freed.is_none() && row.wanted_by.is_none() {
            freed = Some(began.elapsed());
        }
        if row.owner.as_deref() == Some("a") && row.token.is_some() && row.wanted_by.is_none() {
            again = Some(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b_left = stopping.await.unwrap();
    a.shutdown().await;
    let shard = wanted.shard();
    assert!(
        !handed_to_b,
        "{shard} was handed to b, which was shutting down"
    );
    let (freed, again) = (
        freed.expect("never let go"),
        again.expect("never held again"),
    );
    assert!(
        again <= freed + Duration::from_secs(3),
        "{shard} let go {freed:?} after b began its shutdown, held again only after {again:?}"
    );
    assert!(
        again + Duration::from_secs(20) < b_left,
        "{shard} held again {again:?} after b began its shutdown, b left after {b_left:?}"
    );
}
