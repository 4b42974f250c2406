//! Lifecycle hooks on a MemoryStream with paused time, at the default `LATEST` start unless a
//! test says otherwise: taken before the first record, the final checkpoint after the hook (with
//! the lease still held while it runs), hand-over, loss, shard end, and hooks that hang or panic.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{LeaseKey, LeaseStore};
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{
    Broker, Checkpoint, Delivery, Hooks, MemoryLeaseStore, MemoryLeaseTable, Publisher, PutEntry,
    Release, RunningBroker, ShardInfo, StartAt,
};
use kinesis_lease_core::testkit::Outage;

const STREAM: &str = "s";

/// What happened, in order: hooks and handled records.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Taken(String, Option<Checkpoint>),
    Final(String, Release, Option<Checkpoint>),
    Lost(String),
    Ended(String, Option<Checkpoint>),
    Handled(String, String),
}

type Log = Arc<Mutex<Vec<Event>>>;

fn recording_hooks(log: &Log) -> Hooks {
    let (t, f, l, e) = (log.clone(), log.clone(), log.clone(), log.clone());
    Hooks::new()
        .on_taken(move |s: ShardInfo| {
            t.lock().unwrap().push(Event::Taken(s.shard, s.checkpoint));
            async {}
        })
        .before_final_checkpoint(move |s: ShardInfo, why| {
            f.lock()
                .unwrap()
                .push(Event::Final(s.shard, why, s.checkpoint));
            async {}
        })
        .on_lost(move |s: ShardInfo| {
            l.lock().unwrap().push(Event::Lost(s.shard));
            async {}
        })
        .on_ended(move |s: ShardInfo| {
            e.lock().unwrap().push(Event::Ended(s.shard, s.checkpoint));
            async {}
        })
}

fn broker(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    hooks: Hooks,
    log: &Log,
    start_at: Option<StartAt>,
) -> Broker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .unwrap();
    let log = log.clone();
    let mut sub = broker.subscribe(STREAM).hooks(hooks);
    if let Some(start_at) = start_at {
        sub = sub.start_at(start_at);
    }
    sub.handle(move |d: Delivery| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(Event::Handled(
                d.shard().to_owned(),
                String::from_utf8_lossy(d.payload()).into_owned(),
            ));
            Ok::<(), std::io::Error>(())
        }
    })
    .unwrap();
    broker
}

async fn publish(kinesis: &MemoryStream, from: usize, n: usize) {
    let entries = (from..from + n)
        .map(|i| PutEntry::new(format!("{i}"), format!("key-{i}")))
        .collect();
    Publisher::new(kinesis.clone(), STREAM)
        .put_all(entries)
        .await
        .unwrap();
}

async fn row(table: &MemoryLeaseTable, shard: &str) -> kinesis_broker::lease::Lease {
    let key = LeaseKey::new(STREAM, shard).unwrap();
    MemoryLeaseStore::over(table)
        .read(&key)
        .await
        .unwrap()
        .expect("row")
}

fn events(log: &Log) -> Vec<Event> {
    log.lock().unwrap().clone()
}

/// Default start (LATEST): each shard's `on_taken` runs before any of its records is handled;
/// on shutdown `before_final_checkpoint` runs once per shard (reason `Stopping`) after every
/// record was handled, and the released row's checkpoint is the one the hook was told.
#[tokio::test(start_paused = true)]
async fn taken_then_records_then_final_checkpoint_on_shutdown() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let running = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        recording_hooks(&log),
        &log,
        None,
    )
    .start()
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    publish(&kinesis, 0, 40).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let report = running.shutdown().await;
    assert!(report.handlers_finished);
    let events = events(&log);
    let handled = events
        .iter()
        .filter(|e| matches!(e, Event::Handled(..)))
        .count();
    assert_eq!(handled, 40, "nothing lost at the default start: {events:?}");
    for shard in ["shardId-000000000000", "shardId-000000000001"] {
        let taken = events
            .iter()
            .position(|e| matches!(e, Event::Taken(s, _) if s == shard))
            .unwrap_or_else(|| panic!("{shard} taken: {events:?}"));
        let first = events
            .iter()
            .position(|e| matches!(e, Event::Handled(s, _) if s == shard));
        assert!(first.is_none_or(|first| taken < first), "{events:?}");
        let finals: Vec<_> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Event::Final(s, ..) if s == shard))
            .collect();
        assert_eq!(finals.len(), 1, "{shard}: {events:?}");
        let (at, Event::Final(_, why, told)) = finals[0] else {
            unreachable!()
        };
        assert_eq!(*why, Release::Stopping);
        assert!(
            events[at..]
                .iter()
                .all(|e| !matches!(e, Event::Handled(s, _) if s == shard)),
            "nothing of {shard} handled after its final hook: {events:?}"
        );
        let row = row(&table, shard).await;
        assert_eq!(row.owner, None, "released");
        assert_eq!(&row.checkpoint, told, "the checkpoint the hook was told");
    }
}

/// The final-checkpoint hook runs while the lease is still held (the last chance to flush
/// under it): it reads its own row and finds this instance as owner. A slow hook (4 s, past a
/// renewal) keeps the lease: the keeper renews meanwhile.
#[tokio::test(start_paused = true)]
async fn the_final_hook_runs_under_the_lease_and_a_slow_one_is_renewed_through() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let owners: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let (t, o) = (table.clone(), owners.clone());
    let hooks = Hooks::new()
        .before_final_checkpoint(move |s: ShardInfo, _| {
            let (t, o) = (t.clone(), o.clone());
            async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                let key = LeaseKey::new(&s.stream, &s.shard).unwrap();
                let row = MemoryLeaseStore::over(&t)
                    .read(&key)
                    .await
                    .unwrap()
                    .unwrap();
                o.lock().unwrap().push(row.owner);
            }
        })
        .bound(Duration::from_secs(6));
    let running = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        hooks,
        &log,
        None,
    )
    .start()
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    publish(&kinesis, 0, 5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    running.shutdown().await;
    assert_eq!(*owners.lock().unwrap(), vec![Some("a".to_owned())]);
    assert_eq!(row(&table, "shardId-000000000000").await.owner, None);
}

/// A graceful hand-over: the giver's hook is told `HandOver { to }` and the checkpoint it
/// writes; the taker's `on_taken` sees that checkpoint, and no record is handled twice.
#[tokio::test(start_paused = true)]
async fn hand_over_runs_the_givers_final_hook_and_the_takers_taken_hook() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let (log_a, log_b) = (Log::default(), Log::default());
    let a = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        recording_hooks(&log_a),
        &log_a,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    publish(&kinesis, 0, 50).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "b",
        recording_hooks(&log_b),
        &log_b,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    while b.stats().shards(STREAM).is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    publish(&kinesis, 50, 50).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let given: Vec<(String, Option<Checkpoint>)> = events(&log_a)
        .into_iter()
        .filter_map(|e| match e {
            Event::Final(shard, Release::HandOver { to }, cp) => {
                assert_eq!(to, "b");
                Some((shard, cp))
            }
            _ => None,
        })
        .collect();
    assert_eq!(given.len(), 1, "{:?}", events(&log_a));
    let (shard, checkpoint) = &given[0];
    assert!(
        events(&log_b).contains(&Event::Taken(shard.clone(), checkpoint.clone())),
        "b resumes where a's hook was told: {:?}",
        events(&log_b)
    );
    shut(a).await;
    shut(b).await;
    let mut handled: Vec<String> = events(&log_a)
        .into_iter()
        .chain(events(&log_b))
        .filter_map(|e| match e {
            Event::Handled(_, p) => Some(p),
            _ => None,
        })
        .collect();
    handled.sort();
    let n = handled.len();
    handled.dedup();
    assert_eq!(
        (n, handled.len()),
        (100, 100),
        "nothing lost, nothing twice"
    );
}

async fn shut(running: RunningBroker) {
    assert!(running.shutdown().await.handlers_finished);
}

/// A lease store outage longer than lease - renew: the lease is lost, `on_lost` runs once per
/// shard and no final hook runs (nothing more is written). Once the store answers again the
/// broker takes the shard back (`on_taken` again).
#[tokio::test(start_paused = true)]
async fn a_lost_lease_runs_on_lost_and_no_final_hook() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(&table)));
    let running = broker(&kinesis, store, "a", recording_hooks(&log), &log, None)
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    switch.cut();
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(running.stats().shards(STREAM).is_empty());
    let shard = "shardId-000000000000".to_owned();
    let seen = events(&log);
    assert!(
        matches!(
            &seen[..],
            [Event::Taken(a, Some(Checkpoint::AtTimestamp(_))), Event::Lost(b)] if *a == shard && *b == shard
        ),
        "taken at the pinned LATEST start, then lost: {seen:?}"
    );
    switch.restore();
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        running.stats().shards(STREAM).len(),
        1,
        "{:?}",
        events(&log)
    );
    assert!(matches!(events(&log).last(), Some(Event::Taken(s, _)) if *s == shard));
    running.shutdown().await;
}

/// A split: the parent is read to its end, its final hook runs with reason `ShardEnd`, then
/// `on_ended` with `SHARD_END` written; each child is taken after that.
#[tokio::test(start_paused = true)]
async fn a_split_runs_the_final_hook_then_on_ended_then_takes_the_children() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let running = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        recording_hooks(&log),
        &log,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    publish(&kinesis, 0, 20).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let parent = "shardId-000000000000".to_owned();
    kinesis.split_evenly(STREAM, &parent).unwrap();
    publish(&kinesis, 20, 20).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let events = events(&log);
    let fin = events
        .iter()
        .position(|e| {
            *e == Event::Final(
                parent.clone(),
                Release::ShardEnd,
                Some(Checkpoint::ShardEnd),
            )
        })
        .unwrap_or_else(|| panic!("{events:?}"));
    let ended = events
        .iter()
        .position(|e| *e == Event::Ended(parent.clone(), Some(Checkpoint::ShardEnd)))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(fin < ended);
    let children: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::Taken(s, _) if *s != parent))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(children.len(), 2, "{events:?}");
    assert!(children.iter().all(|&i| i > fin), "{events:?}");
    let handled = events
        .iter()
        .filter(|e| matches!(e, Event::Handled(..)))
        .count();
    assert_eq!(handled, 40);
    running.shutdown().await;
}

/// Hooks that never finish or panic cannot stall or kill a shard: a hanging `on_taken` is
/// abandoned at its bound and reading starts; a panicking final hook is logged and the release
/// is still written; shutdown ends.
#[tokio::test(start_paused = true)]
async fn hanging_and_panicking_hooks_are_bounded() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let hooks = Hooks::new()
        .on_taken(|_s: ShardInfo| std::future::pending::<()>())
        .before_final_checkpoint(|_s: ShardInfo, _| async { panic!("a hook bug") })
        .bound(Duration::from_secs(2));
    let running = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        hooks,
        &log,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    publish(&kinesis, 0, 10).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(events(&log).len(), 10, "read once the hook's bound passed");
    tokio::time::timeout(Duration::from_secs(30), running.shutdown())
        .await
        .expect("shutdown ends despite the panicking hook");
    let row = row(&table, "shardId-000000000000").await;
    assert_eq!(row.owner, None);
    assert!(
        matches!(row.checkpoint, Some(Checkpoint::Sequence(_))),
        "{row:?}"
    );
}

/// A zero bound is refused at start, naming the setting and the stream.
#[tokio::test]
async fn a_zero_hook_bound_is_refused() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let log = Log::default();
    let err = broker(
        &kinesis,
        MemoryLeaseStore::new(),
        "a",
        Hooks::new().bound(Duration::ZERO),
        &log,
        None,
    )
    .start()
    .await
    .unwrap_err();
    let text = kinesis_broker::lease::ErrorChain(&err).to_string();
    assert!(
        text.contains("hook bound") && text.contains("`s`"),
        "{text}"
    );
}

/// Review finding: a shutdown (or hand-over) while `on_taken` still runs waits for it, so a
/// holding's final-checkpoint hook never runs before its `on_taken` has returned (it used to
/// run beside it, and a resource opened by `on_taken` after the final hook closed it leaked).
#[tokio::test(start_paused = true)]
async fn the_final_hook_never_runs_before_on_taken_returned() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let (t, f) = (log.clone(), log.clone());
    let hooks = Hooks::new()
        .on_taken(move |_s: ShardInfo| {
            let t = t.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(4)).await;
                t.lock().unwrap().push("taken done");
            }
        })
        .before_final_checkpoint(move |_s: ShardInfo, _| {
            f.lock().unwrap().push("final");
            async {}
        });
    let events = Log::default();
    let running = broker(&kinesis, MemoryLeaseStore::new(), "a", hooks, &events, None)
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(running.stats().shards(STREAM).len(), 1);
    assert!(log.lock().unwrap().is_empty(), "on_taken still running");
    running.shutdown().await;
    assert_eq!(*log.lock().unwrap(), vec!["taken done", "final"]);
}

/// Review finding: a hook bound too large to add to the clock (`Duration::MAX`) used to panic
/// the shard task at shutdown (no release written, the shard stuck as held); now the hook runs
/// and the release is written.
#[tokio::test(start_paused = true)]
async fn a_huge_hook_bound_does_not_overflow_the_clock() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let hooks = recording_hooks(&log).bound(Duration::MAX);
    let running = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        hooks,
        &log,
        None,
    )
    .start()
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    running.shutdown().await;
    assert!(
        events(&log)
            .iter()
            .any(|e| matches!(e, Event::Final(_, Release::Stopping, _))),
        "{:?}",
        events(&log)
    );
    assert_eq!(row(&table, "shardId-000000000000").await.owner, None);
}

/// An operator's release (an eviction) during the drain: the keeper learns of it by a renewal
/// before its final hook, so `on_lost` runs and the final hook does not (it said the lease
/// was being let go while another could hold it; the simulation's seed 28445: 1.3 s after the
/// operator's release). No listing nudges a draining keeper, and the hook came first.
#[tokio::test(start_paused = true)]
async fn an_operators_release_during_the_drain_runs_on_lost_not_the_final_hook() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("a")
        .build()
        .unwrap();
    let g = gate.clone();
    broker
        .subscribe(STREAM)
        .start_at(StartAt::TrimHorizon)
        .hooks(recording_hooks(&log))
        .handle(move |_d: Delivery| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    publish(&kinesis, 0, 1).await;
    let running = broker.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let shard = "shardId-000000000000";
    assert_eq!(row(&table, shard).await.owner.as_deref(), Some("a"));
    // The handler holds the drain; the operator releases the row meanwhile, then the handler
    // returns at once (before the keeper's next renewal).
    let shutdown = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = row(&table, shard).await;
    let key = LeaseKey::new(STREAM, shard).unwrap();
    let evicted = MemoryLeaseStore::over(&table)
        .evict(&key, held.counter, None, None)
        .await
        .unwrap();
    assert!(matches!(
        evicted,
        kinesis_broker::lease::Outcome::Written(_)
    ));
    gate.notify_waiters();
    shutdown.await.unwrap();
    let seen = events(&log);
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Final(..))),
        "no final hook for a row the operator released: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::Lost(s) if s == shard)),
        "on_lost ran: {seen:?}"
    );
}
