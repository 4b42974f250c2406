//! Regression tests for the lease-protocol defects of issue 12 that need the APIs added with
//! the fixes (lease tokens in `LeaseStore`, `BrokerBuilder::wall_clock`,
//! `MemoryStream::trim_shard`, `BrokerError::OwnerInUse`): pinned start positions, fenced takes
//! under clock skew, the keeper's stop timer, one live process per owner id, and trimmed
//! shards. Paused time, a `MemoryStream`, and brokers with their own `MemoryLeaseStore` (or a
//! decorator of one) over one shared `MemoryLeaseTable`; the default start position (`LATEST`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    testing::{MemoryStream, TokioClock},
    Broker, BrokerBuilder, BrokerError, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable,
    ReaderError, RunningBroker, SubscriptionBuilder,
};
use kinesis_lease_core::{BoxFuture, Holder, Lease, LeaseError, LeaseResult, Outcome, Take};
use tokio::time::{sleep, timeout, Instant};

const STREAM: &str = "s";
const SHARD_0: &str = "shardId-000000000000";
const SHARD_1: &str = "shardId-000000000001";
/// The wall-clock time of paused time's start in every clock of these tests.
const BASE_MS: u64 = 1_700_000_000_000;

/// A wall clock that follows tokio's paused clock from [`BASE_MS`] as it is now, shifted by
/// `offset_ms`: clocks made at one moment of paused time differ by their offsets alone.
fn paused_clock(offset_ms: i64) -> TokioClock {
    TokioClock::new(BASE_MS.checked_add_signed(offset_ms).unwrap())
}

/// What renewals do in a [`Faulty`] store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RenewMode {
    /// Delegate.
    Normal,
    /// Fail at once, writing nothing.
    FailFast,
    /// The next renewal lands at once but its answer comes this much later; later renewals
    /// fail fast.
    LandThenAnswerLate(Duration),
}

/// A `LeaseStore` decorator over a `MemoryLeaseStore`: every call takes `latency` before it
/// reaches the table, renewals (of shard rows and member rows alike) follow a [`RenewMode`],
/// and every renewal's row, send time and whether it landed are recorded. Clones share the mode and the record.
#[derive(Debug, Clone)]
struct Faulty {
    inner: MemoryLeaseStore,
    latency: Duration,
    mode: Arc<Mutex<RenewMode>>,
    renewals: Arc<Mutex<Vec<(String, Instant, bool)>>>,
}

impl Faulty {
    fn new(inner: MemoryLeaseStore) -> Self {
        Self {
            inner,
            latency: Duration::ZERO,
            mode: Arc::new(Mutex::new(RenewMode::Normal)),
            renewals: Arc::default(),
        }
    }

    fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    fn set_mode(&self, mode: RenewMode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// The send time that bounds a keeper: per row (the shard's own and the instance's member
    /// row), when its last renewal that landed was sent; the earliest of those.
    fn last_landed_renewal(&self) -> Option<Instant> {
        let mut last: std::collections::HashMap<&str, Instant> = Default::default();
        let renewals = self.renewals.lock().unwrap();
        for (key, sent, landed) in renewals.iter() {
            if *landed {
                last.insert(key.as_str(), *sent);
            }
        }
        last.into_values().min()
    }

    async fn delay(&self) {
        if !self.latency.is_zero() {
            sleep(self.latency).await;
        }
    }
}

macro_rules! delayed {
    ($self:ident, $call:expr) => {
        Box::pin(async move {
            $self.delay().await;
            $call.await
        })
    };
}

impl LeaseStore for Faulty {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        delayed!(self, self.inner.create(row))
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        delayed!(self, self.inner.take(key, holder, take))
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = Instant::now();
            self.delay().await;
            let mode = *self.mode.lock().unwrap();
            if mode == RenewMode::FailFast {
                self.renewals
                    .lock()
                    .unwrap()
                    .push((key.to_string(), sent, false));
                return Err(LeaseError::Unavailable {
                    operation: "renew",
                    resource: key.to_string(),
                    source: "injected failure".into(),
                });
            }
            let renewed = self.inner.renew(key, holder, ttl, checkpoint).await;
            let landed = matches!(renewed, Ok(Outcome::Written(_)));
            self.renewals
                .lock()
                .unwrap()
                .push((key.to_string(), sent, landed));
            if let RenewMode::LandThenAnswerLate(late) = mode {
                self.set_mode(RenewMode::FailFast);
                sleep(late).await;
            }
            renewed
        })
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        delayed!(self, self.inner.checkpoint(key, holder, checkpoint))
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        delayed!(self, self.inner.release(key, holder, checkpoint))
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        delayed!(self, self.inner.request(key, asker, holder))
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        delayed!(self, self.inner.hand_over(key, holder, to, ttl, checkpoint))
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        delayed!(self, self.inner.delete(key, observed))
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        delayed!(self, self.inner.bump_epoch(stream))
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        delayed!(self, self.inner.epoch(stream))
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        delayed!(self, self.inner.read(key))
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        delayed!(self, self.inner.list(stream))
    }
}

/// One handler run: which instance handled which record, and when it began and ended.
#[derive(Debug, Clone)]
struct Handled {
    instance: String,
    payload: String,
    began: Instant,
    ended: Instant,
}

/// Records every handler run and every moment two instances ran handlers on one shard's
/// records at once.
#[derive(Debug, Default)]
struct Monitor {
    running: Mutex<HashMap<String, Vec<String>>>,
    overlaps: Mutex<Vec<(Instant, String)>>,
    log: Mutex<Vec<Handled>>,
}

/// A handler run in progress; leaves the monitor when dropped (also when aborted).
struct Running {
    monitor: Arc<Monitor>,
    instance: String,
    shard: String,
}

impl Monitor {
    fn enter(self: &Arc<Self>, instance: &str, shard: &str) -> Running {
        let mut running = self.running.lock().unwrap();
        let on_shard = running.entry(shard.to_owned()).or_default();
        if let Some(other) = on_shard.iter().find(|i| *i != instance) {
            self.overlaps.lock().unwrap().push((
                Instant::now(),
                format!("{shard}: {instance} began while {other} ran"),
            ));
        }
        on_shard.push(instance.to_owned());
        Running {
            monitor: self.clone(),
            instance: instance.to_owned(),
            shard: shard.to_owned(),
        }
    }

    fn log(&self) -> Vec<Handled> {
        self.log.lock().unwrap().clone()
    }

    fn handled(&self, instance: Option<&str>) -> BTreeSet<String> {
        self.log()
            .into_iter()
            .filter(|h| instance.is_none_or(|i| h.instance == i))
            .map(|h| h.payload)
            .collect()
    }

    /// When two instances ran handlers on one shard at once, and which.
    fn overlaps(&self) -> Vec<(Instant, String)> {
        self.overlaps.lock().unwrap().clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.monitor.running.lock().unwrap();
        let on_shard = running.get_mut(&self.shard).unwrap();
        let at = on_shard.iter().position(|i| *i == self.instance).unwrap();
        on_shard.remove(at);
    }
}

/// Finishes `sub` with a serial handler that takes `work` of paused time per record and
/// reports each run to `monitor`.
fn monitored(sub: SubscriptionBuilder<'_>, monitor: &Arc<Monitor>, instance: &str, work: Duration) {
    let (monitor, instance) = (monitor.clone(), instance.to_owned());
    sub.handle(move |d: Delivery| {
        let (monitor, instance) = (monitor.clone(), instance.clone());
        async move {
            let shard = d.shard().to_owned();
            let began = Instant::now();
            let running = monitor.enter(&instance, &shard);
            if !work.is_zero() {
                sleep(work).await;
            }
            drop(running);
            monitor.log.lock().unwrap().push(Handled {
                instance,
                payload: String::from_utf8_lossy(d.payload()).into_owned(),
                began,
                ended: Instant::now(),
            });
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

/// A started broker on `store`, its handler reporting to `monitor`.
async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    monitor: &Arc<Monitor>,
) -> RunningBroker {
    let mut broker = builder(kinesis, owner).lease_store(store).build().unwrap();
    monitored(broker.subscribe(STREAM), monitor, owner, Duration::ZERO);
    broker.start().await.unwrap()
}

/// Puts records in the background: `per_tick` every `every`, until stopped.
struct Producer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(Instant, String)>>,
}

impl Producer {
    fn start(kinesis: &MemoryStream, per_tick: usize, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (kinesis, flag) = (kinesis.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut put = Vec::new();
            let mut i = 0;
            while !flag.load(Ordering::SeqCst) {
                for _ in 0..per_tick {
                    let payload = format!("p-{i}");
                    kinesis
                        .put(STREAM, &format!("key-{i}"), payload.clone())
                        .unwrap();
                    put.push((Instant::now(), payload));
                    i += 1;
                }
                sleep(every).await;
            }
            put
        });
        Self { stop, task }
    }

    /// Stops and returns every record put, with when.
    async fn stop(self) -> Vec<(Instant, String)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
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

async fn row(table: &MemoryLeaseTable, shard: &str) -> Lease {
    MemoryLeaseStore::over(table)
        .read(&LeaseKey::new(STREAM, shard).unwrap())
        .await
        .unwrap()
        .expect("the row exists")
}

/// Defect 1: the first take of a row without checkpoint writes
/// `AT_TIMESTAMP(wall clock at the take - 30 s)` into it, read from the broker's
/// `wall_clock`, while the reader itself opens at `LATEST`: records put before the
/// subscription began are not handled.
#[tokio::test(start_paused = true)]
async fn the_first_take_pins_latest_as_the_wall_clock_less_thirty_seconds() {
    let clock = paused_clock(0);
    let kinesis = MemoryStream::new().with_clock(clock);
    kinesis.create_stream(STREAM, 1).unwrap();
    kinesis.put(STREAM, "k", "before").unwrap();
    sleep(Duration::from_secs(5)).await;
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let mut broker = builder(&kinesis, "a")
        .lease_store(MemoryLeaseStore::over(&table))
        .wall_clock(clock)
        .build()
        .unwrap();
    monitored(broker.subscribe(STREAM), &monitor, "a", Duration::ZERO);
    let a = broker.start().await.unwrap(); // taken now, at BASE_MS + 5 s
    assert!(eventually(Duration::from_secs(2), || held(&a) == 1).await);
    assert_eq!(
        row(&table, SHARD_0).await.checkpoint,
        Some(Checkpoint::AtTimestamp(BASE_MS + 5_000 - 30_000))
    );
    sleep(Duration::from_secs(2)).await;
    kinesis.put(STREAM, "k", "after").unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        monitor.handled(None),
        BTreeSet::from(["after".to_owned()]),
        "the first reader opened at the tip"
    );
    a.shutdown().await;
}

/// What one run of two brokers with skewed wall clocks came to.
#[derive(Debug, PartialEq, Eq)]
struct SkewRun {
    /// Handler runs begun while another broker ran one on the same shard.
    overlaps: usize,
    /// From the first such run to the last.
    overlapping_for: Duration,
    /// Handler runs beyond one per record.
    handled_twice: usize,
    /// Records put once both readers opened and never handled.
    missing: usize,
}

/// Brokers `a` and `b` with wall clocks (store and pin clocks alike) skewed by `a_skew_ms` and
/// `b_skew_ms`, on a table that answers after 100 ms, start together on 4 shards while records
/// are put, balance, and then `a` shuts down gracefully.
async fn skewed_run(a_skew_ms: i64, b_skew_ms: i64) -> SkewRun {
    let kinesis = MemoryStream::new().with_clock(paused_clock(0));
    kinesis.create_stream(STREAM, 4).unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let broker = |owner: &str, skew_ms: i64| {
        let clock = paused_clock(skew_ms);
        let store = Faulty::new(MemoryLeaseStore::over(&table).with_clock(clock))
            .with_latency(Duration::from_millis(100));
        let mut broker = builder(&kinesis, owner)
            .lease_store(store)
            .wall_clock(clock)
            .build()
            .unwrap();
        monitored(
            broker.subscribe(STREAM),
            &monitor,
            owner,
            Duration::from_millis(20),
        );
        broker
    };
    let (a, b) = (broker("a", a_skew_ms), broker("b", b_skew_ms));
    let (a, b) = tokio::join!(a.start(), b.start());
    let (a, b) = (a.unwrap(), b.unwrap());
    let producer = Producer::start(&kinesis, 4, Duration::from_millis(100));
    let opened = Instant::now() + Duration::from_secs(3);
    assert!(
        eventually(Duration::from_secs(30), || held(&a) == 2 && held(&b) == 2).await,
        "balanced 2 + 2: a holds {}, b {}",
        held(&a),
        held(&b)
    );
    sleep(Duration::from_secs(5)).await;
    a.shutdown().await;
    assert!(eventually(Duration::from_secs(5), || held(&b) == 4).await);
    sleep(Duration::from_secs(5)).await;
    let put = producer.stop().await;
    let expected: BTreeSet<String> = put
        .into_iter()
        .filter(|(at, _)| *at >= opened)
        .map(|(_, p)| p)
        .collect();
    eventually(Duration::from_secs(10), || {
        monitor.handled(None).is_superset(&expected)
    })
    .await;
    b.shutdown().await;
    let runs = monitor.log().len();
    let overlaps = monitor.overlaps();
    SkewRun {
        overlaps: overlaps.len(),
        overlapping_for: match (overlaps.first(), overlaps.last()) {
            (Some((first, _)), Some((last, _))) => *last - *first,
            _ => Duration::ZERO,
        },
        handled_twice: runs - monitor.handled(None).len(),
        missing: expected.difference(&monitor.handled(None)).count(),
    }
}

/// Defect 2: two brokers whose wall clocks are 10 s apart (-5 s and +5 s; each order, since
/// the race needs the slow clock's take to land first) start together on a slow table,
/// balance, and one shuts down gracefully. Every take is fenced on the counter seen, so no
/// shard ever has handlers of both brokers running at overlapping times, no record is handled
/// twice (every move is planned), and every record put once both readers opened is handled.
#[tokio::test(start_paused = true)]
async fn skewed_wall_clocks_never_run_one_shard_in_two_brokers() {
    for (a_skew, b_skew) in [(-5_000, 5_000), (5_000, -5_000)] {
        let run = skewed_run(a_skew, b_skew).await;
        assert_eq!(
            run,
            SkewRun {
                overlaps: 0,
                overlapping_for: Duration::ZERO,
                handled_twice: 0,
                missing: 0
            },
            "clocks a {a_skew} ms, b {b_skew} ms"
        );
    }
}

/// Waits (polling stats every 50 ms) until `running` holds no shard; returns when.
async fn stopped_holding(running: &RunningBroker, limit: Duration) -> Instant {
    assert!(
        eventually(limit, || held(running) == 0).await,
        "still holding after {limit:?}"
    );
    Instant::now()
}

/// Defect 3: with renewals failing fast, the keeper stops the reader on a timer at
/// (send time of the last renewal that landed) + lease - renew = 7 s with the defaults, not
/// at a later renew tick: the shard leaves the stats by then and its handlers receive no
/// record afterwards.
#[tokio::test(start_paused = true)]
async fn failing_renewals_stop_the_reader_seven_seconds_after_the_last_landed_send() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let store = Faulty::new(MemoryLeaseStore::over(&table));
    let monitor = Arc::new(Monitor::default());
    let a = start(&kinesis, store.clone(), "a", &monitor).await;
    assert!(eventually(Duration::from_secs(2), || held(&a) == 1).await);
    let _producer = Producer::start(&kinesis, 1, Duration::from_millis(200));
    sleep(Duration::from_millis(4_500)).await; // the renewal at 3 s landed
    store.set_mode(RenewMode::FailFast);
    let stopped = stopped_holding(&a, Duration::from_secs(15)).await;
    let last = store.last_landed_renewal().expect("a renewal landed");
    let after = stopped - last;
    assert!(
        after >= Duration::from_millis(6_950) && after <= Duration::from_millis(7_100),
        "stopped {after:?} after the last landed renewal was sent (lease - renew = 7 s)"
    );
    // The next take of the row (by this instance, once it stood still for a lease) comes at
    // 10 s at the earliest; until then nothing may be handled.
    sleep(Duration::from_secs(2)).await;
    let late: Vec<Handled> = monitor
        .log()
        .into_iter()
        .filter(|h| h.began > last + Duration::from_millis(7_050))
        .collect();
    assert!(late.is_empty(), "handled after the stop: {late:?}");
    drop(a);
}

/// Defect 3: a renewal that lands but is answered 2.5 s late, followed by renewals failing
/// fast, counts from when it was sent: the reader stops 7 s after the send that bounds it (the
/// earlier of its row's and its member row's last landed renewal). Another broker takes the
/// shard only after seeing the member row stand still for a lease, so the two never run
/// handlers at once, and every record is handled.
#[tokio::test(start_paused = true)]
async fn a_late_answered_renewal_counts_from_its_send_time() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let store = Faulty::new(MemoryLeaseStore::over(&table));
    let monitor = Arc::new(Monitor::default());
    let a = start(&kinesis, store.clone(), "a", &monitor).await;
    assert!(eventually(Duration::from_secs(2), || held(&a) == 1).await);
    let b = start(&kinesis, MemoryLeaseStore::over(&table), "b", &monitor).await;
    sleep(Duration::from_secs(1)).await;
    let producer = Producer::start(&kinesis, 1, Duration::from_millis(200));
    sleep(Duration::from_millis(3_500)).await; // the renewal at 3 s landed
    store.set_mode(RenewMode::LandThenAnswerLate(Duration::from_millis(2_500)));
    let stopped = stopped_holding(&a, Duration::from_secs(15)).await;
    let last = store.last_landed_renewal().expect("a renewal landed");
    let after = stopped - last;
    assert!(
        after >= Duration::from_millis(6_950) && after <= Duration::from_millis(7_100),
        "stopped {after:?} after the late-answered renewal was sent (lease - renew = 7 s)"
    );
    assert!(
        eventually(Duration::from_secs(15), || held(&b) == 1).await,
        "b took the shard over"
    );
    sleep(Duration::from_secs(2)).await;
    let put = producer.stop().await;
    let expected: BTreeSet<String> = put.into_iter().map(|(_, p)| p).collect();
    eventually(Duration::from_secs(10), || {
        monitor.handled(None).is_superset(&expected)
    })
    .await;
    let log = monitor.log();
    let a_last = log
        .iter()
        .filter(|h| h.instance == "a")
        .map(|h| h.ended)
        .max();
    let b_first = log
        .iter()
        .filter(|h| h.instance == "b")
        .map(|h| h.began)
        .min();
    assert!(
        a_last.is_some() && b_first.is_some() && a_last < b_first,
        "a handled until {:?}, b from {:?} (since paused time began)",
        a_last.map(|t| t - last),
        b_first.map(|t| t - last)
    );
    assert_eq!(monitor.overlaps(), Vec::new(), "two owners at once");
    let missing = expected.difference(&monitor.handled(None)).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} records not handled",
        expected.len()
    );
    b.shutdown().await;
    drop(a);
}

/// Defect 4: starting a second broker with the owner id of a live one on the same table is
/// refused with `OwnerInUse` (the start probe sees the rows renewed), and the first goes on
/// reading undisturbed. Once the first shut down cleanly, the id may start again.
#[tokio::test(start_paused = true)]
async fn starting_a_second_broker_with_a_live_owner_id_is_refused() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let first = start(&kinesis, MemoryLeaseStore::over(&table), "x", &monitor).await;
    assert!(eventually(Duration::from_secs(2), || held(&first) == 2).await);
    sleep(Duration::from_secs(4)).await;

    let mut twin = builder(&kinesis, "x")
        .lease_store(MemoryLeaseStore::over(&table))
        .build()
        .unwrap();
    monitored(twin.subscribe(STREAM), &monitor, "twin", Duration::ZERO);
    let Err(err) = twin.start().await else {
        panic!("a second broker started with the live owner id `x`");
    };
    assert!(
        matches!(&err, BrokerError::OwnerInUse { owner, stream, .. } if owner == "x" && stream == STREAM),
        "{err}"
    );

    kinesis.put(STREAM, "k1", "one").unwrap();
    kinesis.put(STREAM, "k2", "two").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || monitor.handled(Some("x")).len()
            == 2)
        .await
    );
    assert_eq!(held(&first), 2);
    assert!(monitor.handled(Some("twin")).is_empty());
    first.shutdown().await;

    let again = start(&kinesis, MemoryLeaseStore::over(&table), "x", &monitor).await;
    assert!(eventually(Duration::from_secs(3), || held(&again) == 2).await);
    again.shutdown().await;
}

/// Defect 4: the start probe refuses only a live id: after a crash (rows still naming the id,
/// but nobody renewing them) a broker with the same id starts, and takes the shards once
/// their leases lapse.
#[tokio::test(start_paused = true)]
async fn a_restart_after_a_crash_with_the_same_owner_id_starts() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let crashed = start(&kinesis, MemoryLeaseStore::over(&table), "x", &monitor).await;
    assert!(eventually(Duration::from_secs(2), || held(&crashed) == 2).await);
    sleep(Duration::from_secs(4)).await;
    drop(crashed);
    let restarted = start(&kinesis, MemoryLeaseStore::over(&table), "x", &monitor).await;
    assert!(
        eventually(Duration::from_secs(15), || held(&restarted) == 2).await,
        "the restarted broker holds {} of 2 shards",
        held(&restarted)
    );
    restarted.shutdown().await;
}

/// Defect 4: a running broker that sees a row carrying its own owner id with a token it never
/// wrote being renewed (another process with the same id) fails its subscription with
/// `OwnerInUse` naming that shard, and releases what it holds.
#[tokio::test(start_paused = true)]
async fn a_running_broker_fails_when_another_process_renews_with_its_owner_id() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    // The other process took shard 0 with the id `x` and a token of its own.
    let other = MemoryLeaseStore::over(&table);
    let key = LeaseKey::new(STREAM, SHARD_0).unwrap();
    assert!(other
        .create(&Lease::new(key.clone(), Vec::new()))
        .await
        .unwrap());
    let holder = Holder::new("x", "the-other-process");
    let taken = other
        .take(&key, &holder, &Take::fenced(Duration::from_secs(10), 1))
        .await
        .unwrap();
    assert!(taken.is_written());

    // It does not renew during the start probe, so this broker starts.
    let monitor = Arc::new(Monitor::default());
    let x = start(&kinesis, MemoryLeaseStore::over(&table), "x", &monitor).await;
    assert!(eventually(Duration::from_secs(3), || held(&x) == 1).await);
    assert_eq!(x.stats().shards(STREAM)[0].shard, SHARD_1);

    // Now it renews, every 3 s.
    let renewing = tokio::spawn(async move {
        loop {
            let renewed = other
                .renew(&key, &holder, Duration::from_secs(10), None)
                .await
                .unwrap();
            assert!(renewed.is_written());
            sleep(Duration::from_secs(3)).await;
        }
    });
    let err = timeout(Duration::from_secs(10), x.failed())
        .await
        .expect("the subscription failed");
    match &err {
        BrokerError::Subscription { stream, source } => {
            assert_eq!(stream, STREAM);
            assert!(
                matches!(&**source, ReaderError::OwnerInUse { owner, shard, .. } if owner == "x" && shard == SHARD_0),
                "{source}"
            );
        }
        other => panic!("not a failed subscription: {other}"),
    }
    assert!(
        eventually(Duration::from_secs(5), || held(&x) == 0).await,
        "still reading after the failure"
    );
    assert_eq!(row(&table, SHARD_1).await.owner, None, "shard 1 released");
    renewing.abort();
    x.shutdown().await;
}

/// Defect 6: a closed parent that aged out of the stream (ResourceNotFound for its shard)
/// while its row was unfinished counts as ended: the subscription does not fail, the parent's
/// row gets `SHARD_END`, and its children are read from their first record.
#[tokio::test(start_paused = true)]
async fn a_trimmed_parent_counts_as_ended_and_its_children_are_read() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let monitor = Arc::new(Monitor::default());
    let a = start(&kinesis, MemoryLeaseStore::over(&table), "a", &monitor).await;
    assert!(eventually(Duration::from_secs(2), || held(&a) == 1).await);
    sleep(Duration::from_secs(2)).await;
    kinesis.put(STREAM, "k", "parent").unwrap();
    sleep(Duration::from_secs(4)).await;
    a.shutdown().await;
    assert!(matches!(
        row(&table, SHARD_0).await.checkpoint,
        Some(Checkpoint::Sequence(_))
    ));

    // Split while nobody reads; the parent ages out before anyone reads it to its end.
    kinesis.split_evenly(STREAM, SHARD_0).unwrap();
    let children: BTreeMap<String, String> = (0..10)
        .map(|i| {
            let payload = format!("child-{i}");
            let shard = kinesis
                .put(STREAM, &format!("key-{i}"), payload.clone())
                .unwrap()
                .shard;
            (payload, shard)
        })
        .collect();
    kinesis.trim_shard(STREAM, SHARD_0).unwrap();

    let b = start(&kinesis, MemoryLeaseStore::over(&table), "b", &monitor).await;
    let expected: BTreeSet<String> = children.keys().cloned().collect();
    eventually(Duration::from_secs(20), || {
        monitor.handled(Some("b")).is_superset(&expected)
    })
    .await;
    assert!(
        timeout(Duration::ZERO, b.failed()).await.is_err(),
        "the subscription failed"
    );
    assert_eq!(
        monitor.handled(Some("b")),
        expected,
        "b reads the children from their first record"
    );
    assert_eq!(
        row(&table, SHARD_0).await.checkpoint,
        Some(Checkpoint::ShardEnd)
    );
    assert_eq!(held(&b), 2);
    b.shutdown().await;
}
