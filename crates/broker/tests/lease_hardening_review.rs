//! Findings of the hostile review of the issue-12 lease protocol. Each test failed on the code
//! under review (commit e44bd6f) because of the bug its doc comment describes, and passes
//! since that bug was fixed; the doc comments keep the description of the bug and say what
//! is expected instead.
//!
//! Paused time, one `MemoryStream`, brokers with their own `MemoryLeaseStore` (or a decorator
//! of one) over one shared `MemoryLeaseTable`, every subscription at `TRIM_HORIZON` so the
//! start position plays no part.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    testing::MemoryStream,
    Broker, BrokerBuilder, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RetryPolicy,
    RunningBroker, StartAt, SubscriptionBuilder,
};
use kinesis_lease_core::{BoxFuture, Holder, Lease, LeaseError, LeaseResult, Outcome, Take};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";

// ---------------------------------------------------------------------------------------------
// A store that can be cut off from the table, or fail the next takes without landing them.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Switch {
    inner: MemoryLeaseStore,
    /// Every call fails, writing nothing (the instance is cut off from the table).
    down: Arc<AtomicBool>,
    /// The next this-many takes fail, writing nothing.
    failing_takes: Arc<AtomicU32>,
}

impl Switch {
    fn new(table: &MemoryLeaseTable) -> Self {
        Self {
            inner: MemoryLeaseStore::over(table),
            down: Arc::default(),
            failing_takes: Arc::default(),
        }
    }

    fn check(&self, operation: &'static str) -> LeaseResult<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable {
                operation,
                resource: "table".into(),
                source: "cut off".into(),
            });
        }
        Ok(())
    }
}

macro_rules! guarded {
    ($self:ident, $op:literal, $call:expr) => {
        Box::pin(async move {
            $self.check($op)?;
            $call.await
        })
    };
}

impl LeaseStore for Switch {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        guarded!(self, "create", self.inner.create(row))
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            self.check("take")?;
            let failing = self
                .failing_takes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return Err(LeaseError::Unavailable {
                    operation: "take",
                    resource: key.to_string(),
                    source: "injected, nothing written".into(),
                });
            }
            self.inner.take(key, holder, take).await
        })
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        guarded!(
            self,
            "renew",
            self.inner.renew(key, holder, ttl, checkpoint)
        )
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        guarded!(
            self,
            "checkpoint",
            self.inner.checkpoint(key, holder, checkpoint)
        )
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        guarded!(self, "release", self.inner.release(key, holder, checkpoint))
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        guarded!(self, "request", self.inner.request(key, asker, holder))
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        guarded!(
            self,
            "hand_over",
            self.inner.hand_over(key, holder, to, ttl, checkpoint)
        )
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        guarded!(self, "delete", self.inner.delete(key, observed))
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        guarded!(self, "bump_epoch", self.inner.bump_epoch(stream))
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        guarded!(self, "epoch", self.inner.epoch(stream))
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        guarded!(self, "read", self.inner.read(key))
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        guarded!(self, "list", self.inner.list(stream))
    }
}

// ---------------------------------------------------------------------------------------------
// A monitor of user code running on each shard's records, per instance.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Monitor {
    running: Mutex<HashMap<String, Vec<String>>>,
    overlaps: Mutex<Vec<String>>,
    /// Completed handler runs: (instance, payload, when it ended).
    done: Mutex<Vec<(String, String, Instant)>>,
}

struct Guard {
    monitor: Arc<Monitor>,
    instance: String,
    shard: String,
}

impl Monitor {
    fn enter(self: &Arc<Self>, instance: &str, shard: &str, what: &str) -> Guard {
        let mut running = self.running.lock().unwrap();
        let on_shard = running.entry(shard.to_owned()).or_default();
        if let Some(other) = on_shard.iter().find(|i| *i != instance) {
            self.overlaps.lock().unwrap().push(format!(
                "{shard}: {instance} began {what} at {:?} while {other} ran user code on the shard",
                Instant::now()
            ));
        }
        on_shard.push(instance.to_owned());
        Guard {
            monitor: self.clone(),
            instance: instance.to_owned(),
            shard: shard.to_owned(),
        }
    }

    fn overlaps(&self) -> Vec<String> {
        self.overlaps.lock().unwrap().clone()
    }

    fn done(&self, instance: &str, payload: &str) {
        self.done
            .lock()
            .unwrap()
            .push((instance.to_owned(), payload.to_owned(), Instant::now()));
    }

    /// How many times each payload was handled to completion, with by whom.
    fn counts(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (instance, payload, _) in self.done.lock().unwrap().iter() {
            out.entry(payload.clone())
                .or_default()
                .push(instance.clone());
        }
        out
    }

    fn duplicates(&self) -> BTreeMap<String, Vec<String>> {
        self.counts()
            .into_iter()
            .filter(|(_, by)| by.len() > 1)
            .collect()
    }

    fn handled_at(&self, payload: &str) -> Option<Instant> {
        self.done
            .lock()
            .unwrap()
            .iter()
            .find(|(_, p, _)| p == payload)
            .map(|(_, _, at)| *at)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut running = self.monitor.running.lock().unwrap();
        let on_shard = running.get_mut(&self.shard).unwrap();
        let at = on_shard.iter().position(|i| *i == self.instance).unwrap();
        on_shard.remove(at);
    }
}

/// Finishes `sub` with a handler reporting to `monitor`: it takes `work(payload)` of paused
/// time and fails records whose payload starts with `poison`.
fn monitored(
    sub: SubscriptionBuilder<'_>,
    monitor: &Arc<Monitor>,
    instance: &str,
    work: fn(&str) -> Duration,
) {
    let (monitor, instance) = (monitor.clone(), instance.to_owned());
    sub.handle(move |d: Delivery| {
        let (monitor, instance) = (monitor.clone(), instance.clone());
        async move {
            let payload = String::from_utf8_lossy(d.payload()).into_owned();
            let guard = monitor.enter(&instance, d.shard(), "a handler");
            let work = work(&payload);
            if !work.is_zero() {
                sleep(work).await;
            }
            drop(guard);
            if payload.starts_with("poison") {
                return Err(std::io::Error::other("poison"));
            }
            monitor.done(&instance, &payload);
            Ok::<(), std::io::Error>(())
        }
    })
    .unwrap();
}

fn builder(kinesis: &MemoryStream, owner: &str) -> BrokerBuilder {
    Broker::builder()
        .kinesis(kinesis.clone())
        .owner_id(owner)
        .shutdown_deadline(Duration::from_secs(2))
}

async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    monitor: &Arc<Monitor>,
    work: fn(&str) -> Duration,
) -> RunningBroker {
    let mut broker = builder(kinesis, owner).lease_store(store).build().unwrap();
    monitored(
        broker.subscribe(STREAM).start_at(StartAt::TrimHorizon),
        monitor,
        owner,
        work,
    );
    broker.start().await.unwrap()
}

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

fn held(running: &RunningBroker) -> Vec<String> {
    running
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect()
}

async fn row(table: &MemoryLeaseTable, shard: &str) -> Lease {
    MemoryLeaseStore::over(table)
        .read(&LeaseKey::new(STREAM, shard).unwrap())
        .await
        .unwrap()
        .expect("the row exists")
}

/// A partition key landing on each of the stream's shards, by shard id.
fn keys_per_shard(kinesis: &MemoryStream, shards: usize) -> BTreeMap<String, Vec<String>> {
    let probe = MemoryStream::new();
    probe.create_stream("probe", shards as u32).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..200 {
        let key = format!("k{i}");
        let shard = probe.put("probe", &key, "x").unwrap().shard;
        out.entry(shard).or_default().push(key);
    }
    let _ = kinesis;
    out
}

fn no_work(_: &str) -> Duration {
    Duration::ZERO
}

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

/// TWO OWNERS after a lost lease. When the keeper gives up (crates/fleet/src/keeper.rs
/// `lose`, at `sent + lease - renew`), it revokes the settlement, but a handler already running
/// goes on (crates/dispatch/src/dispatcher.rs `run_one` never stops a running attempt). The
/// only margin is the renew interval (3 s): a handler that runs longer than that past the stop
/// overlaps the next owner, who takes the row at `sent + lease`. Here instance `a` is cut off
/// from the table while it runs a 15 s handler; `b` takes the shard after the lease and runs
/// the same record while `a`'s attempt still runs.
///
/// Expected: never two instances running handlers on one shard's records at once. Either the
/// keeper waits (bounded by the lease) for running attempts before the row can be taken, or a
/// revoked attempt is cancelled (its future dropped) when the lease is lost.
#[tokio::test(start_paused = true)]
async fn a_lost_lease_leaves_a_running_handler_beside_the_next_owner() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    kinesis.put(STREAM, "k", "slow-0").unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let cut = Switch::new(&table);
    let a = start(&kinesis, cut.clone(), "a", &monitor, |p| {
        if p.starts_with("slow") {
            Duration::from_secs(15)
        } else {
            Duration::ZERO
        }
    })
    .await;
    assert!(eventually(Duration::from_secs(2), || held(&a).len() == 1).await);
    sleep(Duration::from_millis(500)).await;
    cut.down.store(true, Ordering::SeqCst); // a's renewals fail from now on
    let b = start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "b",
        &monitor,
        |p| {
            if p.starts_with("slow") {
                Duration::from_secs(15)
            } else {
                Duration::ZERO
            }
        },
    )
    .await;
    assert!(
        eventually(Duration::from_secs(20), || held(&b).len() == 1).await,
        "b never took the lapsed shard"
    );
    sleep(Duration::from_secs(20)).await;
    let overlaps = monitor.overlaps();
    drop(a);
    b.shutdown().await;
    assert!(
        overlaps.is_empty(),
        "two instances ran handlers on one shard at once: {overlaps:#?}"
    );
}

/// TWO OWNERS (and a record dead-lettered twice) on a planned hand-over. A dead-letter callback
/// is user code run on the shard's record, but `Ctx::exhaust` (crates/dispatch/src/
/// dispatcher.rs) runs it without the `Running` guard that `run_one` holds around the handler.
/// The keeper's hand-over (keeper.rs `hand_off`) waits for `settlement.idle()`, which counts
/// only guarded attempts, so it hands the row over while the callback still runs; the new
/// owner reads the record again, its handler fails again, and its own callback runs beside the
/// first one.
///
/// Expected: the callback counts as a running attempt, so the hand-over waits for it (and the
/// callback's ack lands in the final checkpoint, so the record is dead-lettered once).
#[tokio::test(start_paused = true)]
async fn a_hand_over_does_not_wait_for_a_running_dead_letter_callback() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let keys = keys_per_shard(&kinesis, 2);
    for (shard, ks) in &keys {
        kinesis
            .put(STREAM, &ks[0], format!("poison-{shard}"))
            .unwrap();
    }
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let dead_lettered: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let broker = |owner: &'static str| {
        let mut broker = builder(&kinesis, owner)
            .lease_store(MemoryLeaseStore::over(&table))
            .build()
            .unwrap();
        let (monitor_dl, dl) = (monitor.clone(), dead_lettered.clone());
        let retry =
            RetryPolicy::default()
                .max_attempts(1)
                .then_dead_letter(move |d: Delivery, _error| {
                    let (monitor, dl) = (monitor_dl.clone(), dl.clone());
                    async move {
                        // A slow dead-letter queue: 20 s.
                        let guard = monitor.enter(owner, d.shard(), "a dead-letter callback");
                        sleep(Duration::from_secs(20)).await;
                        drop(guard);
                        dl.lock().unwrap().push((
                            owner.to_owned(),
                            String::from_utf8_lossy(d.payload()).into_owned(),
                        ));
                        Ok::<(), std::io::Error>(())
                    }
                });
        monitored(
            broker
                .subscribe(STREAM)
                .start_at(StartAt::TrimHorizon)
                .workers(2)
                .retry(retry),
            &monitor,
            owner,
            no_work,
        );
        broker
    };
    let a = broker("a").start().await.unwrap();
    assert!(eventually(Duration::from_secs(2), || held(&a).len() == 2).await);
    sleep(Duration::from_secs(1)).await;
    let b = broker("b").start().await.unwrap();
    // b asks for one of a's two shards; a hands it over at a renewal.
    assert!(
        // The hand-over first lets what was handed out settle (up to two leases), so it
        // waits for the 20 s callback.
        eventually(Duration::from_secs(40), || held(&b).len() == 1).await,
        "no hand-over"
    );
    sleep(Duration::from_secs(25)).await;
    let overlaps = monitor.overlaps();
    let dl = dead_lettered.lock().unwrap().clone();
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        overlaps.is_empty(),
        "user code of two instances ran on one shard at once: {overlaps:#?}\ndead-lettered: {dl:?}"
    );
}

/// DUPLICATES ON A PLANNED HAND-OVER with lanes by key. The keeper's hand-over stops the
/// reader, waits at most lease/2 (5 s) for everything handed out to settle, then revokes the
/// settlement: records already routed to a lane but not started are dropped
/// (dispatcher.rs `run_one` returns on a revoked delivery), while later records of the same
/// shard in other lanes have completed. The settled prefix stops at the first dropped record,
/// so the new owner handles every completed record after it again. Graceful shutdown drains
/// the lanes for exactly this reason (dispatcher.rs module docs); hand-over does not.
///
/// Here one shard carries a slow key (2 s per record, 6 records queued in its lane) interleaved
/// with a fast key; a second instance asks for the shard.
///
/// Expected: a planned hand-over causes no duplicate (let the lanes finish what was routed to
/// them, as shutdown does, renewing meanwhile, or checkpoint a gap-free set).
#[tokio::test(start_paused = true)]
async fn a_hand_over_with_lanes_redelivers_records_that_completed() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let keys = keys_per_shard(&kinesis, 2);
    // Two keys of each shard in different lanes of 2.
    let mut plan = Vec::new();
    for (shard, ks) in &keys {
        let slow = ks
            .iter()
            .find(|k| kinesis_dispatch_lane(k) == 0)
            .unwrap()
            .clone();
        let fast = ks
            .iter()
            .find(|k| kinesis_dispatch_lane(k) == 1)
            .unwrap()
            .clone();
        plan.push((shard.clone(), slow, fast));
    }
    for i in 0..6 {
        for (shard, slow, fast) in &plan {
            kinesis
                .put(STREAM, slow, format!("slow-{shard}-{i}"))
                .unwrap();
            kinesis
                .put(STREAM, fast, format!("fast-{shard}-{i}"))
                .unwrap();
        }
    }
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let work: fn(&str) -> Duration = |p| {
        if p.starts_with("slow") {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(10)
        }
    };
    let broker = |owner: &'static str| {
        let mut broker = builder(&kinesis, owner)
            .lease_store(MemoryLeaseStore::over(&table))
            .build()
            .unwrap();
        monitored(
            broker
                .subscribe(STREAM)
                .start_at(StartAt::TrimHorizon)
                .workers(2)
                .by_key()
                .lane_capacity(16),
            &monitor,
            owner,
            work,
        );
        broker
    };
    let a = broker("a").start().await.unwrap();
    assert!(eventually(Duration::from_secs(2), || held(&a).len() == 2).await);
    sleep(Duration::from_millis(500)).await;
    let b = broker("b").start().await.unwrap();
    assert!(
        // The hand-over first lets what was handed out settle (up to two leases), so it
        // waits for the 20 s callback.
        eventually(Duration::from_secs(40), || held(&b).len() == 1).await,
        "no hand-over"
    );
    sleep(Duration::from_secs(40)).await;
    let counts = monitor.counts();
    let duplicates = monitor.duplicates();
    a.shutdown().await;
    b.shutdown().await;
    assert_eq!(counts.len(), 24, "every record handled: {counts:?}");
    assert!(
        duplicates.is_empty(),
        "a planned hand-over re-delivered {} completed records: {duplicates:?}",
        duplicates.len()
    );
}

/// The lane `workers(2).by_key()` puts a partition key in.
fn kinesis_dispatch_lane(key: &str) -> usize {
    kinesis_dispatch::lane_of(key, 2)
}

/// DUPLICATE + LAPSE on a planned hand-over with a slow handler. After its settle wait the
/// keeper revokes and waits for running attempts with `timeout_at(deadline, idle())`
/// (keeper.rs `hand_off`), but it no longer renews while it waits, so `deadline` (set by the
/// last renewal) passes while a handler still runs: the keeper gives up
/// ("handlers still running when the lease lapses"), writes no final checkpoint and does not
/// hand over. The asker then waits a whole lease for the row to stand still, and handles the
/// slow record again although `a` completed it.
///
/// Expected: the keeper keeps renewing while it waits for running attempts (it holds the lease
/// the whole time), then hands over with the record in the checkpoint: no duplicate, and the
/// asker reads the shard as soon as the handler ends.
#[tokio::test(start_paused = true)]
async fn a_hand_over_waiting_for_a_slow_handler_lets_the_lease_lapse() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let keys = keys_per_shard(&kinesis, 2);
    // One key per shard, in different lanes of `workers(2).by_key()`: both slow records run
    // at once, and each shard's later record waits behind its slow one in the same lane, so
    // no record completes past an unsettled one: only the keeper's lapse can re-deliver.
    for (lane, (shard, ks)) in keys.iter().enumerate() {
        let key = ks
            .iter()
            .find(|k| kinesis_dispatch_lane(k) == lane)
            .unwrap();
        kinesis.put(STREAM, key, format!("slow-{shard}")).unwrap();
        kinesis.put(STREAM, key, format!("after-{shard}")).unwrap();
    }
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let work: fn(&str) -> Duration = |p| {
        if p.starts_with("slow") {
            Duration::from_secs(14)
        } else {
            Duration::ZERO
        }
    };
    let broker = |owner: &'static str| {
        let mut broker = builder(&kinesis, owner)
            .lease_store(MemoryLeaseStore::over(&table))
            .build()
            .unwrap();
        monitored(
            broker
                .subscribe(STREAM)
                .start_at(StartAt::TrimHorizon)
                .workers(2)
                .by_key(),
            &monitor,
            owner,
            work,
        );
        broker
    };
    let a = broker("a").start().await.unwrap();
    assert!(eventually(Duration::from_secs(2), || held(&a).len() == 2).await);
    sleep(Duration::from_millis(500)).await;
    let b = broker("b").start().await.unwrap();
    assert!(
        eventually(Duration::from_secs(40), || held(&b).len() == 1).await,
        "no hand-over"
    );
    sleep(Duration::from_secs(45)).await;
    let duplicates = monitor.duplicates();
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        duplicates.is_empty(),
        "a planned hand-over re-handled records a completed: {duplicates:?}"
    );
}

/// STALL on a planned shutdown: a shard handed to an instance that already shut down stays
/// unread for a whole lease. `b` asks `a` for a shard (coordinator.rs `ask_for_one`), then shuts
/// down cleanly before `a`'s next renewal. Shutdown leaves `wanted_by = b` in the row, and the
/// keeper hands over to whoever asked without checking it is still there (keeper.rs
/// `hand_off`): the row now names `b`, with no token, and nobody reads it until `a` has seen it
/// stand still for a lease (10 s), against the README's "the other instances take the shards
/// within about a second".
///
/// Expected: a departing instance withdraws its requests (or releases rows handed to it), so a
/// record put after the move is handled within a few seconds.
#[tokio::test(start_paused = true)]
async fn a_shard_handed_to_an_instance_that_shut_down_stays_unread_for_a_lease() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let keys = keys_per_shard(&kinesis, 2);
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let a = start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "a",
        &monitor,
        no_work,
    )
    .await;
    assert!(eventually(Duration::from_secs(2), || held(&a).len() == 2).await);
    sleep(Duration::from_millis(1500)).await;
    let b = start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        "b",
        &monitor,
        no_work,
    )
    .await;
    let shards: Vec<String> = keys.keys().cloned().collect();
    let mut asked = false;
    for _ in 0..40 {
        for shard in &shards {
            if row(&table, shard).await.wanted_by.as_deref() == Some("b") {
                asked = true;
            }
        }
        if asked {
            break;
        }
        sleep(Duration::from_millis(25)).await;
    }
    assert!(asked, "b never asked for a shard");
    b.shutdown().await; // holds nothing yet: releases nothing
    sleep(Duration::from_secs(4)).await; // a's renewal sees the request and hands over
    let put_at = Instant::now();
    for (shard, ks) in &keys {
        kinesis
            .put(STREAM, &ks[0], format!("late-{shard}"))
            .unwrap();
    }
    let handled = eventually(Duration::from_secs(30), || {
        shards
            .iter()
            .all(|s| monitor.handled_at(&format!("late-{s}")).is_some())
    })
    .await;
    let delays: Vec<Duration> = shards
        .iter()
        .map(|s| {
            monitor
                .handled_at(&format!("late-{s}"))
                .map_or(Duration::MAX, |at| at - put_at)
        })
        .collect();
    a.shutdown().await;
    assert!(handled, "records never handled");
    assert!(
        delays.iter().all(|d| *d <= Duration::from_secs(4)),
        "after a planned shutdown a shard went unread: record handled {delays:?} after its put"
    );
}

/// STALL after one failed take. A take that fails (the store refused it; nothing landed) is
/// parked as pending (coordinator.rs `take_round` / `adopt_pending`) and the shard is excluded
/// from candidates until a whole lease has passed since the take was sent, so one transient
/// error leaves a free shard unread for about 10 s, even with a single instance.
///
/// Expected: a take whose outcome is known not to have landed (the row does not carry its
/// token and stood still / is still free) is retried at the next take round: the shard is read
/// within a couple of seconds.
#[tokio::test(start_paused = true)]
async fn one_failed_take_leaves_a_free_shard_unread_for_a_lease() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let store = Switch::new(&table);
    store.failing_takes.store(1, Ordering::SeqCst);
    let began = Instant::now();
    let a = start(&kinesis, store.clone(), "a", &monitor, no_work).await;
    let read = eventually(Duration::from_secs(20), || held(&a).len() == 1).await;
    let after = began.elapsed();
    a.shutdown().await;
    assert!(read, "never taken");
    assert!(
        after <= Duration::from_secs(4),
        "a free shard stayed unread {after:?} after one failed take"
    );
}
