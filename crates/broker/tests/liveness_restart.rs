//! Regression tests for issue 28 ("restart"): a restart with the same owner id while another
//! instance asks the crashed one for a shard, a `SHARD_END` release whose answer was lost, and
//! parents read before children when the first ListShards and a parent's row creation failed.
//! Paused time, a `MemoryStream`, and brokers with their own `MemoryLeaseStore` (or a
//! decorator of one) over one shared `MemoryLeaseTable`; the default start position (`LATEST`)
//! and default timings unless a test says otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::{MemoryStream, Op};
use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    Broker, BrokerError, Checkpoint, Delivery, Hooks, MemoryLeaseStore, MemoryLeaseTable,
    RunningBroker, ShardInfo, StartAt,
};
use kinesis_lease_core::{BoxFuture, Holder, Lease, LeaseError, LeaseResult, Outcome, Take};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";
const PARENT: &str = "shardId-000000000000";

/// A `LeaseStore` decorator over a `MemoryLeaseStore` with two faults, each armed once: the
/// next `SHARD_END` release lands but its answer is an error (recording when it landed), and
/// the next `create`s of one shard's row fail without writing. Clones share the faults.
#[derive(Debug, Clone)]
struct Tap {
    inner: MemoryLeaseStore,
    lose_shard_end_answer: Arc<AtomicBool>,
    shard_end_landed: Arc<Mutex<Option<Instant>>>,
    /// The shard whose row's creation fails, and how many more times.
    fail_create_of: Arc<Mutex<Option<(String, u32)>>>,
}

impl Tap {
    fn over(table: &MemoryLeaseTable) -> Self {
        Self {
            inner: MemoryLeaseStore::over(table),
            lose_shard_end_answer: Arc::default(),
            shard_end_landed: Arc::default(),
            fail_create_of: Arc::default(),
        }
    }

    fn unavailable(operation: &'static str, key: &LeaseKey) -> LeaseError {
        LeaseError::Unavailable {
            operation,
            resource: key.to_string(),
            source: "injected: the answer was lost".into(),
        }
    }
}

impl LeaseStore for Tap {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let fail = {
                let mut fail = self.fail_create_of.lock().unwrap();
                match fail.as_mut() {
                    Some((shard, n)) if shard == row.key.shard() => {
                        *n -= 1;
                        if *n == 0 {
                            *fail = None;
                        }
                        true
                    }
                    _ => false,
                }
            };
            if fail {
                return Err(Self::unavailable("create", &row.key));
            }
            self.inner.create(row).await
        })
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.take(key, holder, take)
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.renew(key, holder, ttl, checkpoint)
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.checkpoint(key, holder, checkpoint)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let released = self.inner.release(key, holder, checkpoint).await;
            if checkpoint == Some(&Checkpoint::ShardEnd)
                && matches!(released, Ok(Outcome::Written(_)))
                && self.lose_shard_end_answer.swap(false, Ordering::SeqCst)
            {
                *self.shard_end_landed.lock().unwrap() = Some(Instant::now());
                return Err(Self::unavailable("release", key));
            }
            released
        })
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.request(key, asker, holder)
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.hand_over(key, holder, to, ttl, checkpoint)
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.delete(key, observed)
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        self.inner.bump_epoch(stream)
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        self.inner.epoch(stream)
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        self.inner.read(key)
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        self.inner.list(stream)
    }
}

/// One handled record: which instance, which shard, which payload, and when.
#[derive(Debug, Clone)]
struct Handled {
    instance: String,
    shard: String,
    payload: String,
    at: Instant,
}

type Log = Arc<Mutex<Vec<Handled>>>;

/// A broker reading [`STREAM`] from `store` as `owner`, logging every record to `log`.
fn broker(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    hooks: Hooks,
    log: &Log,
) -> Broker {
    broker_at(kinesis, store, owner, hooks, log, None)
}

/// As [`broker`], starting at `start_at` when given.
fn broker_at(
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
        .shutdown_deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let (log, instance) = (log.clone(), owner.to_owned());
    let mut sub = broker.subscribe(STREAM).hooks(hooks);
    if let Some(start_at) = start_at {
        sub = sub.start_at(start_at);
    }
    sub.handle(move |d: Delivery| {
        let (log, instance) = (log.clone(), instance.clone());
        async move {
            log.lock().unwrap().push(Handled {
                instance,
                shard: d.shard().to_owned(),
                payload: String::from_utf8_lossy(d.payload()).into_owned(),
                at: Instant::now(),
            });
            Ok::<(), std::io::Error>(())
        }
    })
    .unwrap();
    broker
}

fn held(running: &RunningBroker) -> BTreeSet<String> {
    running
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect()
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

/// Puts `n` records with payloads `{tag}-{i}`; returns the shard of each payload.
fn put(kinesis: &MemoryStream, tag: &str, n: usize) -> BTreeMap<String, String> {
    (0..n)
        .map(|i| {
            let payload = format!("{tag}-{i}");
            let stored = kinesis
                .put(STREAM, &format!("key-{tag}-{i}"), payload.clone())
                .unwrap();
            (payload, stored.shard)
        })
        .collect()
}

fn payloads(log: &Log) -> BTreeSet<String> {
    log.lock()
        .unwrap()
        .iter()
        .map(|h| h.payload.clone())
        .collect()
}

/// Defect 2: x holds four shards and crashes (its `RunningBroker` dropped, nothing released);
/// x restarts with the same owner id while a new instance y starts and, below its fair share,
/// asks x's still-present member for a row (`request`: the row's counter moves, same owner,
/// same token). That is no renewal by another process, so the restart starts, and x and y
/// together hold every shard and read every shard again.
///
/// Failed before the fix: `start()` of the restarted x returned `OwnerInUse` (its start
/// probe counted y's request as a renewal by a live twin). After: it starts, and 17 s after
/// the restart began x and y hold 2 + 2 shards and every record is handled.
#[tokio::test(start_paused = true)]
async fn a_restart_with_the_same_id_starts_while_another_instance_asks_for_its_shard() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let crashed = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "x",
        Hooks::new(),
        &log,
    )
    .start()
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || held(&crashed).len() == 4).await);
    sleep(Duration::from_secs(4)).await;
    drop(crashed);
    // Records put while nobody reads: read from the crashed run's checkpoints.
    let missed = put(&kinesis, "missed", 40);

    // The restart's probe reads x's rows, waits, reads them again; y starts meanwhile.
    let restart = tokio::spawn({
        let (kinesis, table, log) = (kinesis.clone(), table.clone(), log.clone());
        async move {
            broker(
                &kinesis,
                MemoryLeaseStore::over(&table),
                "x",
                Hooks::new(),
                &log,
            )
            .start()
            .await
        }
    });
    sleep(Duration::from_secs(1)).await;
    let y = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "y",
        Hooks::new(),
        &log,
    )
    .start()
    .await
    .unwrap();
    // y asks the crashed x (still a member) for one of its rows.
    let store = MemoryLeaseStore::over(&table);
    let mut asked = false;
    for _ in 0..40 {
        let rows = store.list(STREAM).await.unwrap();
        if rows.iter().any(|r| r.wanted_by.as_deref() == Some("y")) {
            asked = true;
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    assert!(
        asked,
        "y never asked x for a shard: the scenario did not arise"
    );
    assert!(
        !restart.is_finished(),
        "the restart's probe was over before y asked"
    );
    let x = match restart.await.unwrap() {
        Ok(x) => x,
        Err(error) => panic!("the restart with the same owner id was refused: {error}"),
    };

    let all: BTreeSet<String> = kinesis
        .shards(STREAM)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    // Between them they hold every shard, and the restarted x takes its share back.
    let split = |x: &RunningBroker, y: &RunningBroker| {
        let (hx, hy) = (held(x), held(y));
        let covered = hx.is_disjoint(&hy) && hx.union(&hy).cloned().collect::<BTreeSet<_>>() == all;
        (covered, hx.len(), hy.len())
    };
    assert!(
        eventually(Duration::from_secs(90), || split(&x, &y) == (true, 2, 2)).await,
        "x holds {:?}, y holds {:?}",
        held(&x),
        held(&y)
    );
    let mut after = put(&kinesis, "after", 40);
    after.extend(missed);
    assert_eq!(
        after.values().collect::<BTreeSet<_>>().len(),
        4,
        "the records cover every shard"
    );
    assert!(
        eventually(Duration::from_secs(30), || {
            let handled = payloads(&log);
            after.keys().all(|p| handled.contains(p))
        })
        .await,
        "records not handled after the restart: {:?}",
        after
            .iter()
            .filter(|(p, _)| !payloads(&log).contains(*p))
            .collect::<Vec<_>>()
    );
    y.shutdown().await;
    x.shutdown().await;
}

/// A twin that holds no shard row yet (only its member row, renewed every renew interval) is
/// refused at start too: the probe reads the id's member row with the shard rows, and a
/// member row's counter moves only by its holder's renewals (nobody asks for member rows).
///
/// Before the fix `start()` returned `Ok` here (the probe read shard rows only); the
/// subscription failed later, when joining the roster.
#[tokio::test(start_paused = true)]
async fn a_twin_holding_only_its_member_row_is_refused_at_start() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let other = MemoryLeaseStore::over(&table);
    let key = LeaseKey::new(format!("{STREAM}@members"), "x").unwrap();
    // The other process's member row, in the roster's token format.
    let holder = Holder::new("x", "r1.the-other-process");
    assert!(other
        .take(&key, &holder, &Take::fenced(Duration::from_secs(10), 0))
        .await
        .unwrap()
        .is_written());
    let renewing = tokio::spawn(async move {
        loop {
            sleep(Duration::from_secs(3)).await;
            let renewed = other
                .renew(&key, &holder, Duration::from_secs(10), None)
                .await
                .unwrap();
            assert!(renewed.is_written());
        }
    });
    let log = Log::default();
    let started = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "x",
        Hooks::new(),
        &log,
    )
    .start()
    .await;
    match started {
        Err(BrokerError::OwnerInUse { owner, stream, .. }) => {
            assert_eq!((owner.as_str(), stream.as_str()), ("x", STREAM));
        }
        Err(other) => panic!("refused, but not as OwnerInUse: {other}"),
        Ok(_) => panic!("a broker started beside a live twin holding its member row"),
    }
    renewing.abort();
}

/// Hooks recording `on_ended` and `on_lost` per shard.
fn ending_hooks(ended: &Arc<Mutex<Vec<String>>>, lost: &Arc<Mutex<Vec<String>>>) -> Hooks {
    let (e, l) = (ended.clone(), lost.clone());
    Hooks::new()
        .on_ended(move |s: ShardInfo| {
            e.lock().unwrap().push(s.shard);
            async {}
        })
        .on_lost(move |s: ShardInfo| {
            l.lock().unwrap().push(s.shard);
            async {}
        })
}

/// Suspicion S4: the keeper's `SHARD_END` release lands but its answer is lost (an error);
/// the retry is refused (the row is released already). That is the shard ending, not a lost
/// lease: `on_ended` runs once and `on_lost` never, and the children are listed and read at
/// once, not at the next shard sync.
///
/// Failed before the fix: `on_lost` ran for the parent and `on_ended` never; the children's
/// first record was handled 7.8 s after the `SHARD_END` landed (at the next shard sync).
/// After: `on_ended` once, the children's first record well under 0.1 s after it.
#[tokio::test(start_paused = true)]
async fn a_shard_end_whose_answer_was_lost_ends_the_shard() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let store = Tap::over(&table);
    let (log, ended, lost) = (Log::default(), Arc::default(), Arc::default());
    let x = broker(
        &kinesis,
        store.clone(),
        "x",
        ending_hooks(&ended, &lost),
        &log,
    )
    .start()
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || held(&x).len() == 1).await);
    let before = put(&kinesis, "parent", 10);
    assert!(
        eventually(Duration::from_secs(5), || {
            let handled = payloads(&log);
            before.keys().all(|p| handled.contains(p))
        })
        .await
    );
    // The parent closes between two shard syncs; its SHARD_END release lands unanswered.
    sleep(Duration::from_secs(1)).await;
    store.lose_shard_end_answer.store(true, Ordering::SeqCst);
    kinesis.split_evenly(STREAM, PARENT).unwrap();
    let children = put(&kinesis, "child", 20);
    assert!(children.values().all(|s| s != PARENT));
    assert!(
        eventually(Duration::from_secs(30), || {
            let handled = payloads(&log);
            children.keys().all(|p| handled.contains(p))
        })
        .await,
        "the children were not read"
    );
    let landed = store
        .shard_end_landed
        .lock()
        .unwrap()
        .expect("the SHARD_END release landed through the fault");
    let first_child = log
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.shard != PARENT)
        .map(|h| h.at)
        .min()
        .unwrap();
    let waited = first_child.duration_since(landed);
    assert_eq!(*lost.lock().unwrap(), Vec::<String>::new(), "on_lost ran");
    assert_eq!(*ended.lock().unwrap(), vec![PARENT.to_owned()], "on_ended");
    assert!(
        waited < Duration::from_secs(1),
        "the children's first record came {waited:?} after the SHARD_END landed"
    );
    x.shutdown().await;
}

/// Suspicion S5: the stream split before the subscription (at `TRIM_HORIZON`; the closed
/// parent still has records). Instance a creates the rows, but the parent's `create` fails
/// (its children's land); instance b starts while ListShards fails, so its first take round
/// has no listing of the stream's shards. The parent has no row and is in no listing b has:
/// that is not "gone from the stream". No record of a child is handled before every record of
/// the parent.
///
/// Failed before the fix: b took a child in its first round and handled 6 of its records
/// (all of that child's) before the parent's last record.
#[tokio::test(start_paused = true)]
async fn a_child_waits_for_its_parent_when_listing_and_the_parents_row_failed() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let parent = put(&kinesis, "parent", 10);
    kinesis.split_evenly(STREAM, PARENT).unwrap();
    let children = put(&kinesis, "child", 10);
    assert!(children.values().all(|s| s != PARENT));
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let store = Tap::over(&table);
    // The coordinator lists the shards twice as it starts (before its loop and at the loop's
    // first shard-sync tick): both creations of the parent's row fail.
    *store.fail_create_of.lock().unwrap() = Some((PARENT.to_owned(), 2));
    let a = broker_at(
        &kinesis,
        store.clone(),
        "a",
        Hooks::new(),
        &log,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    sleep(Duration::from_millis(500)).await;
    let rows = MemoryLeaseStore::over(&table).list(STREAM).await.unwrap();
    assert_eq!(rows.len(), 2, "the children's rows only: {rows:?}");
    assert!(store.fail_create_of.lock().unwrap().is_none());

    let b = broker_at(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "b",
        Hooks::new(),
        &log,
        Some(StartAt::TrimHorizon),
    )
    .start()
    .await
    .unwrap();
    // b's coordinator has not run yet: its listings as it starts (before its loop, at the
    // first shard-sync tick, and at the first take tick, which retries a failed one) fail.
    let calls = kinesis.calls(Op::ListShards);
    kinesis.fail_next(Op::ListShards, 3);
    let all: Vec<String> = parent.keys().chain(children.keys()).cloned().collect();
    assert!(
        eventually(Duration::from_secs(60), || {
            let handled = payloads(&log);
            all.iter().all(|p| handled.contains(p))
        })
        .await,
        "not every record was handled"
    );
    assert!(
        kinesis.calls(Op::ListShards) >= calls + 3,
        "the injected ListShards failures were not consumed"
    );
    let handled = log.lock().unwrap().clone();
    let last_parent = handled.iter().rposition(|h| h.shard == PARENT).unwrap();
    let early: Vec<&Handled> = handled[..last_parent]
        .iter()
        .filter(|h| h.shard != PARENT)
        .collect();
    assert!(
        early.is_empty(),
        "{} child records handled before the parent's last: {:?}",
        early.len(),
        early
            .iter()
            .map(|h| (&h.instance, &h.payload))
            .collect::<Vec<_>>()
    );
    b.shutdown().await;
    a.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// A crashed run's last renewal, already on its way, lands after the restart's first read.
// ---------------------------------------------------------------------------------------------

/// A store whose next member-row renewal, once armed, is sent on a task of its own and lands
/// `late`: a request already on the wire when the process died lands all the same. With
/// `mute_roster`, every bump of the roster's epoch (`s@members`) fails: the instance's join is
/// never announced to the others' ring watch.
#[derive(Debug, Clone)]
struct OnTheWire {
    inner: MemoryLeaseStore,
    armed: Arc<AtomicBool>,
    in_flight: Arc<AtomicBool>,
    /// How long the armed renewal takes to land.
    late: Duration,
    mute_roster: bool,
}

impl OnTheWire {
    fn over(table: &MemoryLeaseTable, late: Duration) -> Self {
        Self {
            inner: MemoryLeaseStore::over(table),
            armed: Arc::default(),
            in_flight: Arc::default(),
            late,
            mute_roster: false,
        }
    }
}

macro_rules! forward {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $out:ty;)*) => {
        $(fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, LeaseResult<$out>> {
            self.inner.$name($($arg),*)
        })*
    };
}

impl LeaseStore for OnTheWire {
    forward! {
        create(row: &'a Lease) -> bool;
        take(key: &'a LeaseKey, holder: &'a Holder, take: &'a Take) -> Outcome;
        checkpoint(key: &'a LeaseKey, holder: &'a Holder, checkpoint: &'a kinesis_broker::Checkpoint) -> Outcome;
        release(key: &'a LeaseKey, holder: &'a Holder, checkpoint: Option<&'a kinesis_broker::Checkpoint>) -> Outcome;
        request(key: &'a LeaseKey, asker: &'a str, holder: &'a str) -> Outcome;
        hand_over(key: &'a LeaseKey, holder: &'a Holder, to: &'a str, ttl: Duration, checkpoint: Option<&'a kinesis_broker::Checkpoint>) -> Outcome;
        delete(key: &'a LeaseKey, observed: u64) -> bool;
        epoch(stream: &'a str) -> u64;
        read(key: &'a LeaseKey) -> Option<Lease>;
        list(stream: &'a str) -> Vec<Lease>;
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        if self.mute_roster && stream.ends_with("@members") {
            return Box::pin(async move {
                Err(LeaseError::Unavailable {
                    operation: "bump_epoch",
                    resource: stream.to_owned(),
                    source: "roster bumps fail".into(),
                })
            });
        }
        self.inner.bump_epoch(stream)
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a kinesis_broker::Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        let member = key.stream().ends_with("@members");
        if !(member && self.armed.swap(false, Ordering::SeqCst)) {
            return self.inner.renew(key, holder, ttl, checkpoint);
        }
        self.in_flight.store(true, Ordering::SeqCst);
        let (inner, key, holder, late) =
            (self.inner.clone(), key.clone(), holder.clone(), self.late);
        let sent = tokio::spawn(async move {
            sleep(late).await;
            inner.renew(&key, &holder, ttl, None).await
        });
        Box::pin(async move {
            sent.await.unwrap_or_else(|_| {
                Err(LeaseError::Unavailable {
                    operation: "renew",
                    resource: "member".into(),
                    source: "cancelled".into(),
                })
            })
        })
    }
}

/// x reads two shards, sends a member renewal that lands `late`, and crashes at once (its
/// `RunningBroker` dropped): the renewal lands after the crash all the same.
async fn crash_with_a_renewal_on_the_wire(late: Duration) -> (MemoryStream, MemoryLeaseTable, Log) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let wire = OnTheWire::over(&table, late);
    let crashed = broker(&kinesis, wire.clone(), "x", Hooks::new(), &log)
        .start()
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || held(&crashed).len() == 2).await);
    wire.armed.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(5), || wire
            .in_flight
            .load(Ordering::SeqCst))
        .await
    );
    drop(crashed);
    (kinesis, table, log)
}

/// A pod that crashes just after sending its member renewal, and is restarted at once with the
/// same owner id: the renewal lands 100 ms after the crash, inside the restart's check for a
/// live process with the id. Found by the simulation (seed 392); failed before the fix: `start()`
/// refused the restart with `OwnerInUse` ("it renews `s@members:x`"). One write landing is no
/// proof of a live process (its next renewal would come a renew interval later); the restart
/// starts, and reads every shard again.
#[tokio::test(start_paused = true)]
async fn a_crashed_runs_last_renewal_landing_late_does_not_refuse_the_restart() {
    let (kinesis, table, log) = crash_with_a_renewal_on_the_wire(Duration::from_millis(100)).await;
    let restarted = match broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "x",
        Hooks::new(),
        &log,
    )
    .start()
    .await
    {
        Ok(running) => running,
        Err(error) => panic!("the restart with the same owner id was refused: {error}"),
    };
    assert!(
        eventually(Duration::from_secs(30), || held(&restarted).len() == 2).await,
        "the restart holds {:?}",
        held(&restarted)
    );
    let put = put(&kinesis, "after", 20);
    assert!(
        eventually(Duration::from_secs(10), || payloads(&log)
            .is_superset(&put.keys().cloned().collect()))
        .await,
        "records put after the restart were not all handled"
    );
}

// ---------------------------------------------------------------------------------------------
// A member whose join was never announced.
// ---------------------------------------------------------------------------------------------

/// An instance joins but its roster bump never lands (then, in production: it crashed right
/// after joining, or its store failed every bump). The others' ring watch lists the roster only
/// when its epoch moves, so nobody watches the new member. Found by the simulation (seed 3026)
/// when such a member took its share: after its crash its shards were still unread 60 s later
/// (its member row never buried). A fix that listed the roster every lease made every instance
/// read every other's member row every 10 s (reads growing with the square of the fleet); now
/// an instance takes nothing until its join's bump has landed, so an unannounced member holds
/// nothing a crash could strand: here it takes no shard in a minute, the others keep all six
/// read throughout, and its crash moves nothing.
#[tokio::test(start_paused = true)]
async fn a_member_whose_join_was_never_announced_takes_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let log = Log::default();
    let mut fleet = Vec::new();
    for owner in ["a", "b"] {
        let running = broker(
            &kinesis,
            MemoryLeaseStore::over(&table),
            owner,
            Hooks::new(),
            &log,
        )
        .start()
        .await
        .unwrap();
        fleet.push(running);
    }
    assert!(
        eventually(Duration::from_secs(10), || fleet
            .iter()
            .map(|r| held(r).len())
            .sum::<usize>()
            == 6)
        .await
    );
    let c = broker(
        &kinesis,
        OnTheWire {
            mute_roster: true,
            ..OnTheWire::over(&table, Duration::ZERO)
        },
        "c",
        Hooks::new(),
        &log,
    )
    .start()
    .await
    .unwrap();
    // Checked every 100 ms for a minute, not only at the end.
    for _ in 0..600 {
        assert!(held(&c).is_empty(), "c took {:?} unannounced", held(&c));
        let by_others: usize = fleet.iter().map(|r| held(r).len()).sum();
        assert_eq!(by_others, 6, "the others hold {by_others} of 6");
        sleep(Duration::from_millis(100)).await;
    }
    drop(c);
    for _ in 0..300 {
        let by_others: usize = fleet.iter().map(|r| held(r).len()).sum();
        assert_eq!(
            by_others, 6,
            "after c's crash the others hold {by_others} of 6"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// The same, the crashed run's last renewal landing 9 s late: after the restart's start-up check
/// (two windows of 4 s, nothing moved), while the restarted run's join watches its old member
/// row stand still. Found by the simulation (seed 12016); failed before the fix: the running
/// broker's subscription failed with `OwnerInUse` ("it renews `s@members:x`") though no other
/// process used the id. Now one move restarts the watch; a live twin would move it again.
#[tokio::test(start_paused = true)]
async fn a_crashed_runs_renewal_landing_during_the_join_does_not_fail_the_restart() {
    let (kinesis, table, log) = crash_with_a_renewal_on_the_wire(Duration::from_secs(9)).await;
    let restarted = broker(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "x",
        Hooks::new(),
        &log,
    )
    .start()
    .await
    .expect("the start-up check saw nothing move");
    let reading = eventually(Duration::from_secs(40), || held(&restarted).len() == 2).await;
    let failed = tokio::time::timeout(Duration::ZERO, restarted.failed()).await;
    assert!(
        failed.is_err(),
        "the restart's subscription failed: {}",
        failed.map(|e| e.to_string()).unwrap_or_default()
    );
    assert!(reading, "the restart holds {:?}", held(&restarted));
}
