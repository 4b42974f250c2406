//! Liveness of the roster watch and of the fair share (issue 28, part "watch").
//!
//! A crashed member's shards are read again once its watcher (the member before it in the ring
//! of owner ids) has seen its member row stand still for a lease and buried it. These tests hold
//! that bound, measured from the crashed instance's last member renewal that landed, when the
//! watcher is shutting down, when one of the watcher's store calls hangs, and when its take
//! rounds are slow; and that a dead member not yet buried does not hold back the rows others
//! free. Each test's doc comment gives what it measured before the fix.
//!
//! Paused time, one `MemoryStream`, brokers with their own `MemoryLeaseStore` (wrapped in a
//! [`Probe`]) over one shared `MemoryLeaseTable`, default timings (lease 10 s, renew 3 s, take
//! interval 1 s, list interval 2 s) and the default start position.

//!
//! The last tests are findings of the hostile review of this change (commit 6c3284e), each a
//! stall that failed on the code under review: rows left free for a whole round are now taken
//! past the fair share (a dead or draining member counts among the owners but takes nothing),
//! and a burial's epoch bump is retried by the watch itself (a draining coordinator no longer
//! ticks to retry an owed one).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    testing::MemoryStream,
    Broker, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_lease_core::{BoxFuture, Holder, Lease, LeaseError, LeaseResult, Outcome, Take};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";
const MEMBERS: &str = "s@members";

// ---------------------------------------------------------------------------------------------
// A store decorator with switches, recording the instance's own member renewals.
// ---------------------------------------------------------------------------------------------

/// A `LeaseStore` over a `MemoryLeaseStore` for one instance (`owner`). Clones share the
/// switches and the record.
#[derive(Debug, Clone)]
struct Probe {
    inner: MemoryLeaseStore,
    owner: String,
    /// `request` never answers (and writes nothing).
    hang_requests: Arc<AtomicBool>,
    /// How many `request` calls hung.
    requests_hung: Arc<AtomicU32>,
    /// Every take of a shard row (not of a member row) waits this long before it reaches the
    /// table.
    slow_takes: Arc<Mutex<Duration>>,
    /// `bump_epoch` never answers (and bumps nothing).
    hang_bumps: Arc<AtomicBool>,
    /// Takes of other instances' member rows (burials) fail, writing nothing.
    refuse_burials: Arc<AtomicBool>,
    /// The instance's own member renewals: when each was sent and whether it landed.
    member_renewals: Arc<Mutex<Vec<(Instant, bool)>>>,
    /// After a burial of another member lands, this many of the next bumps of the
    /// stream's (not the roster's) epoch fail, bumping nothing.
    fail_stream_bumps_after_burial: Arc<AtomicU32>,
    /// Stream-epoch bumps still to fail.
    stream_bumps_to_fail: Arc<AtomicU32>,
    /// When burials of other members landed.
    burials: Arc<Mutex<Vec<Instant>>>,
    /// This many of the next burials land but their answer is lost; and at the same moment
    /// another roster change lands (the roster's epoch moves), so the watcher lists the
    /// roster before it reads the buried row again.
    lose_burial_answers: Arc<AtomicU32>,
    /// Once a burial's answer was lost, reads of other members' rows fail.
    blind_after_lost_burial: Arc<AtomicBool>,
    /// Reads of other members' rows fail (set by the switch above).
    member_reads_fail: Arc<AtomicBool>,
    /// Roster-epoch bumps still to fail, bumping nothing.
    roster_bumps_to_fail: Arc<AtomicU32>,
    /// Deletes still to fail, deleting nothing.
    deletes_to_fail: Arc<AtomicU32>,
}

impl Probe {
    fn new(table: &MemoryLeaseTable, owner: &str) -> Self {
        Self {
            inner: MemoryLeaseStore::over(table),
            owner: owner.to_owned(),
            hang_requests: Arc::default(),
            requests_hung: Arc::default(),
            hang_bumps: Arc::default(),
            slow_takes: Arc::default(),
            refuse_burials: Arc::default(),
            member_renewals: Arc::default(),
            fail_stream_bumps_after_burial: Arc::default(),
            stream_bumps_to_fail: Arc::default(),
            burials: Arc::default(),
            lose_burial_answers: Arc::default(),
            blind_after_lost_burial: Arc::default(),
            member_reads_fail: Arc::default(),
            roster_bumps_to_fail: Arc::default(),
            deletes_to_fail: Arc::default(),
        }
    }

    /// When the last member renewal of this instance that landed was sent: its keepers may
    /// have run until that plus lease - renew, and the crash bound counts from it.
    fn last_landed_member_renewal(&self) -> Instant {
        self.member_renewals
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(_, landed)| *landed)
            .map(|(sent, _)| *sent)
            .expect("a member renewal landed")
    }
}

impl LeaseStore for Probe {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.create(row)
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            if key.stream() == MEMBERS {
                if key.shard() != self.owner && self.refuse_burials.load(Ordering::SeqCst) {
                    return Err(LeaseError::Unavailable {
                        operation: "take",
                        resource: key.to_string(),
                        source: "injected, nothing written".into(),
                    });
                }
            } else {
                let slow = *self.slow_takes.lock().unwrap();
                if !slow.is_zero() {
                    sleep(slow).await;
                }
            }
            let taken = self.inner.take(key, holder, take).await;
            if key.stream() == MEMBERS
                && key.shard() != self.owner
                && matches!(taken, Ok(Outcome::Written(_)))
            {
                self.burials.lock().unwrap().push(Instant::now());
                let n = self.fail_stream_bumps_after_burial.load(Ordering::SeqCst);
                self.stream_bumps_to_fail.fetch_add(n, Ordering::SeqCst);
                if self
                    .lose_burial_answers
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    if self.blind_after_lost_burial.load(Ordering::SeqCst) {
                        self.member_reads_fail.store(true, Ordering::SeqCst);
                    }
                    self.inner.bump_epoch(MEMBERS).await?;
                    return Err(LeaseError::Unavailable {
                        operation: "take",
                        resource: key.to_string(),
                        source: "injected: response lost (the write landed)".into(),
                    });
                }
            }
            taken
        })
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
            let renewed = self.inner.renew(key, holder, ttl, checkpoint).await;
            if key.stream() == MEMBERS && key.shard() == self.owner {
                let landed = matches!(renewed, Ok(Outcome::Written(_)));
                self.member_renewals.lock().unwrap().push((sent, landed));
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
        self.inner.checkpoint(key, holder, checkpoint)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.release(key, holder, checkpoint)
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            if self.hang_requests.load(Ordering::SeqCst) {
                self.requests_hung.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            self.inner.request(key, asker, holder).await
        })
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
        Box::pin(async move {
            let fails = self
                .deletes_to_fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fails {
                return Err(LeaseError::Unavailable {
                    operation: "delete",
                    resource: key.to_string(),
                    source: "injected, nothing deleted".into(),
                });
            }
            self.inner.delete(key, observed).await
        })
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(async move {
            if self.hang_bumps.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let to_fail = match stream {
                MEMBERS => Some(&self.roster_bumps_to_fail),
                STREAM => Some(&self.stream_bumps_to_fail),
                _ => None,
            };
            let fails = to_fail.is_some_and(|n| {
                n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            });
            if fails {
                return Err(LeaseError::Unavailable {
                    operation: "bump_epoch",
                    resource: stream.to_owned(),
                    source: "injected, nothing bumped".into(),
                });
            }
            self.inner.bump_epoch(stream).await
        })
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        self.inner.epoch(stream)
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            if key.stream() == MEMBERS
                && key.shard() != self.owner
                && self.member_reads_fail.load(Ordering::SeqCst)
            {
                return Err(LeaseError::Unavailable {
                    operation: "read",
                    resource: key.to_string(),
                    source: "injected, nothing read".into(),
                });
            }
            self.inner.read(key).await
        })
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        self.inner.list(stream)
    }
}

// ---------------------------------------------------------------------------------------------
// Brokers, handlers and observations.
// ---------------------------------------------------------------------------------------------

/// Which instances run a handler now, per instance.
#[derive(Debug, Default)]
struct Running(Mutex<HashMap<String, u32>>);

impl Running {
    fn of(&self, instance: &str) -> u32 {
        self.0.lock().unwrap().get(instance).copied().unwrap_or(0)
    }
}

/// A started broker on `store` whose handler takes `n` s of paused time for a record whose
/// payload is `slow-<n>`, and no time for the others.
async fn start(kinesis: &MemoryStream, store: &Probe, running: &Arc<Running>) -> RunningBroker {
    start_with(kinesis, store, running, Some(Duration::from_secs(20))).await
}

/// `start` with a chosen shutdown deadline (`None`: the default, 10 s).
async fn start_with(
    kinesis: &MemoryStream,
    store: &Probe,
    running: &Arc<Running>,
    deadline: Option<Duration>,
) -> RunningBroker {
    let owner = store.owner.clone();
    let mut builder = Broker::builder()
        .kinesis(kinesis.clone())
        .owner_id(owner.as_str())
        .lease_store(store.clone());
    if let Some(deadline) = deadline {
        builder = builder.shutdown_deadline(deadline);
    }
    let mut broker = builder.build().unwrap();
    let running = running.clone();
    broker
        .subscribe(STREAM)
        .handle(move |d: Delivery| {
            let (running, owner) = (running.clone(), owner.clone());
            async move {
                *running.0.lock().unwrap().entry(owner.clone()).or_default() += 1;
                let payload = String::from_utf8_lossy(d.payload()).into_owned();
                if let Some(secs) = payload.strip_prefix("slow-") {
                    sleep(Duration::from_secs(secs.parse().unwrap())).await;
                }
                *running.0.lock().unwrap().get_mut(&owner).unwrap() -= 1;
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    broker.start().await.unwrap()
}

fn held(running: &RunningBroker) -> BTreeSet<String> {
    running
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect()
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

async fn rows(table: &MemoryLeaseTable, stream: &str) -> Vec<Lease> {
    MemoryLeaseStore::over(table).list(stream).await.unwrap()
}

/// The owner of `member`'s member row, if anyone holds it.
async fn member_row_owner(table: &MemoryLeaseTable, member: &str) -> Option<String> {
    MemoryLeaseStore::over(table)
        .read(&LeaseKey::new(MEMBERS, member).unwrap())
        .await
        .unwrap()
        .and_then(|row| row.owner)
}

/// A partition key landing on `shard` of a stream of `shards` shards.
fn key_for(kinesis: &MemoryStream, shards: u32, shard: &str) -> String {
    let probe = format!("probe-{shards}");
    let _ = kinesis.create_stream(&probe, shards);
    (0..1000)
        .map(|i| format!("k{i}"))
        .find(|key| kinesis.put(&probe, key, "x").unwrap().shard == shard)
        .expect("a key for the shard")
}

/// Polls every 100 ms, for at most `limit`, until `done` says so; returns when `done` first held.
async fn poll_until(limit: Duration, mut done: impl AsyncFnMut() -> bool) -> Option<Instant> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if done().await {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(100)).await;
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// When each of `shards` was first held by one of `takers`, polling for at most `limit` until
/// all are.
async fn taken_by(
    takers: &[&RunningBroker],
    shards: &BTreeSet<String>,
    limit: Duration,
) -> BTreeMap<String, Instant> {
    let mut taken: BTreeMap<String, Instant> = BTreeMap::new();
    poll_until(limit, async || {
        let now = Instant::now();
        for shard in takers.iter().flat_map(|t| held(t)) {
            if shards.contains(&shard) {
                taken.entry(shard).or_insert(now);
            }
        }
        taken.len() == shards.len()
    })
    .await;
    taken
}

/// How long after `from` each of `shards` was taken (`None`: never).
fn delays(
    shards: &BTreeSet<String>,
    taken: &BTreeMap<String, Instant>,
    from: Instant,
) -> Vec<Option<Duration>> {
    shards
        .iter()
        .map(|s| taken.get(s).map(|at| at.saturating_duration_since(from)))
        .collect()
}

/// True when every delay is known and at most `limit`.
fn within(delays: &[Option<Duration>], limit: Duration) -> bool {
    delays.iter().all(|d| d.is_some_and(|d| d <= limit))
}

/// a, b, c on a stream of six shards (b watching c), each with its own [`Probe`], 7 s after
/// they started: each holds its two shards.
async fn abc_on_six_shards() -> (MemoryLeaseTable, Vec<RunningBroker>, Vec<Probe>) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (brokers, stores) = start_all(&kinesis, &table, &["a", "b", "c"], &running).await;
    sleep(Duration::from_secs(7)).await;
    (table, brokers, stores)
}

/// Starts brokers for `owners` on `table`, one after the other, each with its own [`Probe`].
async fn start_all(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owners: &[&str],
    running: &Arc<Running>,
) -> (Vec<RunningBroker>, Vec<Probe>) {
    let stores: Vec<Probe> = owners.iter().map(|o| Probe::new(table, o)).collect();
    let mut brokers = Vec::new();
    for store in &stores {
        brokers.push(start(kinesis, store, running).await);
    }
    (brokers, stores)
}

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

/// What [`crash_beside_a_drain`] measured.
#[derive(Debug)]
struct Drained {
    /// Per shard of the crashed member: when read again after its last landed member renewal.
    crashed: Vec<Option<Duration>>,
    /// Per shard of the leaving member: when read again after its release.
    released: Vec<Option<Duration>>,
    /// How long the leaving member's `shutdown()` took.
    shutdown: Duration,
}

/// Members a, b, c on six shards (two each; b watches c). c crashes (nothing written) while b
/// shuts down gracefully with a `drain` handler to finish on one of its shards.
async fn crash_beside_a_drain(drain: u64) -> Drained {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "b", "c"], &running).await;
    sleep(Duration::from_secs(5)).await;
    let shares: Vec<BTreeSet<String>> = brokers.iter().map(held).collect();
    assert!(
        shares.iter().all(|s| s.len() == 2),
        "two shards each: {shares:?}"
    );
    let c = brokers.pop().unwrap();
    let b = brokers.pop().unwrap();
    let a = brokers.pop().unwrap();
    let (b_shards, c_shards) = (shares[1].clone(), shares[2].clone());
    let slow_on = b_shards.iter().next().unwrap().clone();
    kinesis
        .put(
            STREAM,
            &key_for(&kinesis, 6, &slow_on),
            format!("slow-{drain}"),
        )
        .unwrap();
    assert!(
        eventually(Duration::from_secs(3), || running.of("b") == 1).await,
        "b's slow handler never began"
    );
    drop(c);
    let leaving = tokio::spawn(async move {
        let began = Instant::now();
        b.shutdown().await;
        began.elapsed()
    });
    let mut freed: BTreeMap<String, Instant> = BTreeMap::new();
    let mut taken: BTreeMap<String, Instant> = BTreeMap::new();
    let watched = b_shards
        .iter()
        .chain(&c_shards)
        .cloned()
        .collect::<Vec<_>>();
    poll_until(Duration::from_secs(40), async || {
        let now = Instant::now();
        for row in rows(&table, STREAM).await {
            let shard = row.key.shard().to_owned();
            if b_shards.contains(&shard) && row.owner.is_none() {
                freed.entry(shard.clone()).or_insert(now);
            }
        }
        for shard in held(&a) {
            taken.entry(shard).or_insert(now);
        }
        watched.iter().all(|s| taken.contains_key(s))
    })
    .await;
    let shutdown = leaving.await.unwrap();
    a.shutdown().await;
    let drained = Drained {
        crashed: delays(&c_shards, &taken, stores[2].last_landed_member_renewal()),
        released: b_shards
            .iter()
            .map(|s| match (freed.get(s), taken.get(s)) {
                (Some(free), Some(at)) => Some(at.saturating_duration_since(*free)),
                _ => None,
            })
            .collect(),
        shutdown,
    };
    eprintln!("{drain} s drain beside a crash: {drained:?}");
    drained
}

/// DEFECT 1: a crashed member went unread for about 20 s while its watcher shut down. The ring
/// watch ran only in the coordinator's take tick, and a coordinator that began `shutdown()`
/// only waited for its shard tasks: the leaving instance stopped watching its successor while
/// it drained its handlers, and the member watching it next started counting from its own
/// first read, after the leave.
///
/// c crashes while its watcher b drains a 9 s handler in a graceful shutdown (see
/// [`crash_beside_a_drain`]). Expected: c's shards are read again within 15 s of c's last
/// landed member renewal (b goes on watching, and burying, while it leaves), and b's released
/// shards within a few seconds of their release.
///
/// Failed before the fix: c's shards read again 22.05 s after its last landed member renewal;
/// one of b's released shards read again 11 s after its release (the dead c still counted in
/// a's fair share until buried).
#[tokio::test(start_paused = true)]
async fn a_crashed_member_is_found_dead_while_its_watcher_drains() {
    let drained = crash_beside_a_drain(9).await;
    assert!(
        within(&drained.crashed, Duration::from_secs(15))
            && within(&drained.released, Duration::from_secs(5)),
        "the crashed member's shards read again {:?} after its last landed member renewal; the \
         leaving member's shards {:?} after their release",
        drained.crashed,
        drained.released
    );
}

/// DEFECT 1, the watch handed on: the watcher's drain (3 s) ends before it could find its
/// crashed successor dead, so its leave must not restart the count. Expected: c's shards read
/// again within 15 s of its last landed member renewal (b goes on watching c after its leave
/// until it buried it), and b's shutdown takes at most a lease more than its drain.
///
/// Failed before the fix: c's shards read again 16.05 s after its last landed member renewal
/// (b's shutdown took 2.95 s; now 8.95 s, until it buried c).
#[tokio::test(start_paused = true)]
async fn a_watcher_that_leaves_hands_its_watch_on() {
    let drained = crash_beside_a_drain(3).await;
    assert!(
        within(&drained.crashed, Duration::from_secs(15)),
        "the crashed member's shards read again {:?} after its last landed member renewal",
        drained.crashed
    );
    assert!(
        drained.shutdown <= Duration::from_secs(3 + 10 + 2),
        "the leave took {:?}",
        drained.shutdown
    );
}

/// The plain crash, with default timings: the bound the other tests keep. Members a, b, c on
/// six shards; c crashes. Expected: every shard of c read again within 13 s of its last landed
/// member renewal (a lease after its watcher first read that renewal, read every list
/// interval, then one take tick).
///
/// Before the fix: 11.1 s and 10.1 s (it held; kept as a guard that the fixes do not slow it
/// down). After: 10.1 s and 10.1 s (the watch now wakes exactly a lease after its first
/// reading of the last renewal, not at the next take tick).
#[tokio::test(start_paused = true)]
async fn a_plain_crash_is_taken_over_within_thirteen_seconds() {
    let (_, mut brokers, stores) = abc_on_six_shards().await;
    let c = brokers.pop().unwrap();
    let c_shards = held(&c);
    assert_eq!(c_shards.len(), 2);
    drop(c);
    let survivors: Vec<&RunningBroker> = brokers.iter().collect();
    let taken = taken_by(&survivors, &c_shards, Duration::from_secs(30)).await;
    let after = delays(&c_shards, &taken, stores[2].last_landed_member_renewal());
    eprintln!("plain crash: shards read again {after:?} after the last landed member renewal");
    for broker in brokers {
        broker.shutdown().await;
    }
    assert!(
        within(&after, Duration::from_secs(13)),
        "a crashed member's shards read again {after:?} after its last landed member renewal"
    );
}

/// a, b, c on six shards, b watching c and its burials failing; c crashes, and `after_crash`
/// seconds later a leaves gracefully. Returns how long after the leave each of a's rows was
/// read again by b (within 30 s), once it checked that c was never buried.
async fn leave_beside_an_unburied_crash(after_crash: u64) -> Vec<Option<Duration>> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "b", "c"], &running).await;
    sleep(Duration::from_secs(5)).await;
    stores[1].refuse_burials.store(true, Ordering::SeqCst);
    let c = brokers.pop().unwrap();
    let b = brokers.pop().unwrap();
    let a = brokers.pop().unwrap();
    let a_shards = held(&a);
    assert_eq!(a_shards.len(), 2);
    drop(c);
    sleep(Duration::from_secs(after_crash)).await;
    let left = Instant::now();
    a.shutdown().await;
    let taken = taken_by(&[&b], &a_shards, Duration::from_secs(30)).await;
    let after = delays(&a_shards, &taken, left);
    eprintln!(
        "rows a freed {after_crash} s after c's crash read again {after:?} after the leave; b holds {:?}",
        held(&b)
    );
    let c_row = member_row_owner(&table, "c").await;
    b.shutdown().await;
    assert_eq!(
        c_row.as_deref(),
        Some("c"),
        "c was not buried (burials fail)"
    );
    after
}

/// SUSPICION S2 (PROVEN): a dead member not yet buried counted in the fair share, so rows a
/// graceful leave freed waited for its burial. Here the burial cannot land (the watcher's
/// takes of member rows fail), so they waited forever.
///
/// Members a, b, c on six shards; b watches c, and b's burials fail. c crashes; once b has seen
/// c's member row stand still for a lease, a leaves gracefully. Expected: b takes both rows a
/// released within a few seconds (c's rows stay c's: a present member's rows are never taken).
///
/// Failed before the fix: one of a's released rows was still unread 30 s after a's leave
/// (b took one, its share with c counted, and left the other).
#[tokio::test(start_paused = true)]
async fn a_dead_member_not_yet_buried_does_not_hold_back_freed_rows() {
    // b reads c's member row every list interval: by then it has seen it stand still for a
    // lease.
    let after = leave_beside_an_unburied_crash(14).await;
    assert!(
        within(&after, Duration::from_secs(3)),
        "rows freed by a graceful leave read again {after:?} after it, beside a dead member"
    );
}

/// SUSPICION S1 (PROVEN): a coordinator store call without a time limit. `request` (asking for a
/// shard) was awaited without one, in the take tick that also ran the ring watch: one call
/// that never answers stopped the instance's watching and taking for good, while its member
/// task went on renewing, so it looked alive.
///
/// a and c share six shards; b joins and asks for one, and its `request` never answers. Then c
/// (watched by b) crashes. Expected: c's shards read again within 15 s of its last landed
/// member renewal.
///
/// Failed before the fix: never (still unread 40 s after; b never watched again).
#[tokio::test(start_paused = true)]
async fn a_hanging_request_stops_neither_the_watch_nor_the_takes() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "c"], &running).await;
    sleep(Duration::from_secs(5)).await;
    let b_store = Probe::new(&table, "b");
    b_store.hang_requests.store(true, Ordering::SeqCst);
    let b = start(&kinesis, &b_store, &running).await;
    assert!(
        eventually(Duration::from_secs(5), || b_store
            .requests_hung
            .load(Ordering::SeqCst)
            > 0)
        .await,
        "b never asked for a shard"
    );
    let c = brokers.pop().unwrap();
    let c_shards = held(&c);
    assert_eq!(c_shards.len(), 3);
    drop(c);
    let a = brokers.pop().unwrap();
    let taken = taken_by(&[&a, &b], &c_shards, Duration::from_secs(40)).await;
    let after = delays(&c_shards, &taken, stores[1].last_landed_member_renewal());
    eprintln!("hanging request: shards read again {after:?} after the last landed member renewal");
    a.shutdown().await;
    // A coordinator stuck in a call that never answers would never finish its shutdown.
    let shut = tokio::time::timeout(Duration::from_secs(60), b.shutdown()).await;
    assert!(
        within(&after, Duration::from_secs(15)),
        "a crashed member's shards read again {after:?} after its last landed member renewal, \
         its watcher's `request` hanging"
    );
    assert!(shut.is_ok(), "b's shutdown never finished");
}

/// SUSPICION S1, the epoch bumps (PROVEN): `Shared::bump_epoch` and the leaving instance's
/// last bumps awaited the store without a time limit, so a bump that never answers stopped
/// the coordinator; on the way out, the shutdown itself never ended.
///
/// a alone on two shards; its bumps never answer from some point on; it shuts down. Expected:
/// the shutdown ends within the bounds of its two last bumps (a lease each), its rows
/// released.
///
/// Failed before the fix: the shutdown had not ended 60 s later.
#[tokio::test(start_paused = true)]
async fn a_shutdown_whose_epoch_bumps_never_answer_still_ends() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let store = Probe::new(&table, "a");
    let a = start(&kinesis, &store, &running).await;
    assert!(eventually(Duration::from_secs(5), || held(&a).len() == 2).await);
    store.hang_bumps.store(true, Ordering::SeqCst);
    let began = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(60), a.shutdown()).await;
    let took = began.elapsed();
    eprintln!("shutdown with hanging bumps took {took:?}");
    let free = rows(&table, STREAM).await.iter().all(|r| r.owner.is_none());
    assert!(ended.is_ok(), "the shutdown had not ended {took:?} later");
    assert!(
        took <= Duration::from_secs(25),
        "the shutdown took {took:?}"
    );
    assert!(free, "every row released");
}

/// SUSPICION S3 (PROVEN): a long take round delayed the watch by as much. The watch ran in the
/// take tick, between rounds, and a round's takes each may take up to a lease.
///
/// b starts alone on nine shards, its store taking 5 s per shard-row take; its second round
/// tries the eight rows left (40 s). a and c join meanwhile and take their shares; then c
/// (watched by b) crashes. Expected: b buries c within 13 s of c's last landed member renewal
/// (the watch keeps its own schedule), and a, whose takes are fast, takes its new share (five
/// of nine, c's rows or rows still free) within a take tick or two of the burial. (The rows
/// left to b wait for its slow takes: that is the store's own latency, not the watch's.)
///
/// Failed before the fix: c buried 53.6 s after its last landed member renewal (48.6 s with
/// only the keeper fixed, whose leases taken by slow takes lapsed at once: see
/// `a_take_answered_late_keeps_its_lease`). After: 11.6 s, and a's share taken 0.5 s after.
#[tokio::test(start_paused = true)]
async fn slow_takes_do_not_delay_the_watch() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 9).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let b_store = Probe::new(&table, "b");
    *b_store.slow_takes.lock().unwrap() = Duration::from_secs(5);
    let b = start(&kinesis, &b_store, &running).await;
    assert!(
        eventually(Duration::from_secs(8), || held(&b).len() == 1).await,
        "b's first take never landed"
    );
    // b's second round (a list interval after its first) tries the eight rows left.
    sleep(Duration::from_millis(1500)).await;
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "c"], &running).await;
    assert!(
        eventually(Duration::from_secs(6), || brokers
            .iter()
            .all(|r| held(r).len() == 3))
        .await,
        "a and c never took their shares"
    );
    let c = brokers.pop().unwrap();
    drop(c);
    let a = brokers.pop().unwrap();
    let crashed = Instant::now();
    let buried_at = poll_until(Duration::from_secs(60), async || {
        member_row_owner(&table, "c").await.as_deref() == Some("b")
    })
    .await;
    // Nine shards over a and b: a's own share is five.
    let shared_at = poll_until(Duration::from_secs(20), async || held(&a).len() == 5).await;
    let renewed = stores[1].last_landed_member_renewal();
    assert!(renewed <= crashed);
    let buried = buried_at.map(|at| at - renewed);
    let shared = buried_at
        .zip(shared_at)
        .map(|(buried, shared)| shared.saturating_duration_since(buried));
    eprintln!("slow takes: buried {buried:?} after the last landed member renewal; a's share taken {shared:?} after the burial");
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        within(&[buried], Duration::from_secs(13)) && within(&[shared], Duration::from_secs(2)),
        "with slow takes, the crashed member was buried {buried:?} after its last landed member \
         renewal, and the fast member took its share {shared:?} after the burial"
    );
}

/// Found with S3: a take answered late lost its lease at once. The keeper counts its stop time
/// from the take's send (`sent + lease - renew`, 7 s) but renewed first a renew interval after
/// it started, so a take answered more than `lease - 2 renew` (4 s) after its send lapsed
/// before its first renewal; though a take may take up to a lease. Expected: a shard taken
/// by a take answered 5 s late stays held.
///
/// Failed before the fix: the shard was lost 2.0 s after the take's answer, and so again after
/// every take back.
#[tokio::test(start_paused = true)]
async fn a_take_answered_late_keeps_its_lease() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let store = Probe::new(&table, "b");
    *store.slow_takes.lock().unwrap() = Duration::from_secs(5);
    let b = start(&kinesis, &store, &running).await;
    let taken = poll_until(Duration::from_secs(8), async || held(&b).len() == 1)
        .await
        .expect("taken");
    let lost = poll_until(Duration::from_secs(20), async || held(&b).is_empty()).await;
    let renewed = rows(&table, STREAM).await[0].counter;
    b.shutdown().await;
    assert!(
        lost.is_none(),
        "a take answered 5 s late lost its lease {:?} after the answer",
        lost.map(|at| at - taken)
    );
    assert!(renewed > 5, "the row was renewed (counter {renewed})");
}

/// The price of handing the watch on, when nothing crashed: a graceful leave beside live
/// members waits, after its rows are released and the others told, until it sees its successor
/// renew after `left - renew`: at most a renew and a take interval (and usually not at all:
/// its reads while it drains show that renewal). Members a, b, c on six shards; b leaves at
/// several points of c's renewal cycle. Expected: each `shutdown()` returns within 5 s, and
/// b's rows are read again as soon as before (the wait comes after their release).
///
/// Before the fix: every shutdown took 0 s (nothing was handed on), b's rows read again 0.6 s
/// to 1.1 s after the call; after it, three of the six shutdowns took 2 s to 3 s, the rows
/// read again as before.
#[tokio::test(start_paused = true)]
async fn a_graceful_leave_beside_live_members_waits_little() {
    let mut took = Vec::new();
    for offset_ms in [0, 500, 1000, 1500, 2000, 2500] {
        let kinesis = MemoryStream::new();
        kinesis.create_stream(STREAM, 6).unwrap();
        let table = MemoryLeaseTable::new();
        let running = Arc::new(Running::default());
        let (mut brokers, _stores) = start_all(&kinesis, &table, &["a", "b", "c"], &running).await;
        sleep(Duration::from_secs(6) + Duration::from_millis(offset_ms)).await;
        let c = brokers.pop().unwrap();
        let b = brokers.pop().unwrap();
        let a = brokers.pop().unwrap();
        let b_shards = held(&b);
        let began = Instant::now();
        let leaving = tokio::spawn(async move {
            b.shutdown().await;
            began.elapsed()
        });
        let taken = taken_by(&[&a, &c], &b_shards, Duration::from_secs(10)).await;
        let after = delays(&b_shards, &taken, began);
        let shutdown = leaving.await.unwrap();
        took.push((shutdown, after));
        a.shutdown().await;
        c.shutdown().await;
    }
    eprintln!("graceful leaves beside live members: {took:?}");
    assert!(
        took.iter()
            .all(|(shutdown, after)| *shutdown <= Duration::from_secs(5)
                && within(after, Duration::from_secs(3))),
        "graceful leaves (shutdown, rows read again after its call): {took:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Findings of the hostile review
// ---------------------------------------------------------------------------------------------

/// Finding 1 (failed on 6c3284e: of the two rows a freed, one was not read within 30 s). Stale
/// exclusion is never re-evaluated. The fix "a member seen still for a lease
/// leaves the fair share" is applied only inside a take round, and nothing schedules a round
/// for the moment a counted member *becomes* stale. Rows freed by a graceful leave shortly
/// after a crash are taken up to the share that still counts the dead member; the rest stay
/// free until some unrelated epoch move (in practice: the burial; here burials fail, so never).
///
/// Same setup as `a_dead_member_not_yet_buried_does_not_hold_back_freed_rows`, but a leaves
/// 2 s after c's crash instead of 14 s. Expected (module docs of coordinator/mod.rs): the rows a
/// freed are not left waiting for c's share, at the latest once b has seen c stand still for a
/// lease (about 10 s after the leave).
#[tokio::test(start_paused = true)]
async fn rows_freed_just_after_a_crash_are_read_although_the_dead_member_counts() {
    let after = leave_beside_an_unburied_crash(2).await;
    assert!(
        within(&after, Duration::from_secs(12)),
        "rows freed by a graceful leave read again {after:?} after it, beside a member b had seen \
         stand still for a lease from about 10 s after the leave on"
    );
}

/// burial during a drain (a burial made while the coordinator drains: its failed epoch bump is owed to a
/// tick that no longer runs). The ring watch now runs, and buries, while its instance drains
/// (the point of the change), but `Shared::bump_epoch` leaves a failed bump to
/// `bump_owed`, which only `State::tick` retries, and the coordinator's loop has exited at
/// `Draining`. Nobody else reads the buried member's row (its only watcher is the drainer),
/// so the survivors learn of the burial only from the drainer's "rows released" bump at the
/// end of its drain.
///
/// a, b, c on six shards, b watches c; b drains a 19 s handler (shutdown deadline 20 s); c
/// crashes as b's shutdown begins; the stream-epoch bump right after b's burial of c fails
/// once (one store hiccup). Expected: c's shards read again within 15 s of c's last landed
/// member renewal.
#[tokio::test(start_paused = true)]
async fn a_burial_during_a_drain_whose_epoch_bump_fails_once_is_still_announced() {
    r2(1).await;
}

/// Finding 2 without the failed bump (failed on 6c3284e too, by finding 3: 11.05 s and
/// 22.05 s).
#[tokio::test(start_paused = true)]
async fn a_burial_during_a_drain_frees_every_shard_of_the_dead_member() {
    r2(0).await;
}

async fn r2(failures: u32) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "b", "c"], &running).await;
    sleep(Duration::from_secs(5)).await;
    let shares: Vec<BTreeSet<String>> = brokers.iter().map(held).collect();
    assert!(
        shares.iter().all(|s| s.len() == 2),
        "two shards each: {shares:?}"
    );
    let c = brokers.pop().unwrap();
    let b = brokers.pop().unwrap();
    let a = brokers.pop().unwrap();
    let (b_shards, c_shards) = (shares[1].clone(), shares[2].clone());
    let slow_on = b_shards.iter().next().unwrap().clone();
    kinesis
        .put(STREAM, &key_for(&kinesis, 6, &slow_on), "slow-19")
        .unwrap();
    assert!(
        eventually(Duration::from_secs(3), || running.of("b") == 1).await,
        "b's slow handler never began"
    );
    stores[1]
        .fail_stream_bumps_after_burial
        .store(failures, Ordering::SeqCst);
    drop(c);
    let leaving = tokio::spawn(async move {
        let began = Instant::now();
        b.shutdown().await;
        began.elapsed()
    });
    let taken = taken_by(&[&a], &c_shards, Duration::from_secs(40)).await;
    let shutdown = leaving.await.unwrap();
    let renewed = stores[2].last_landed_member_renewal();
    let after = delays(&c_shards, &taken, renewed);
    let burials: Vec<Duration> = stores[1]
        .burials
        .lock()
        .unwrap()
        .iter()
        .map(|at| at.saturating_duration_since(renewed))
        .collect();
    eprintln!(
        "burial during a drain ({failures} failed bump): c buried by b {burials:?} after c's last landed member renewal; c's shards read \
         again {after:?} after it; b's shutdown took {shutdown:?}"
    );
    a.shutdown().await;
    assert!(
        within(&after, Duration::from_secs(15)),
        "c's shards read again {after:?} after its last landed member renewal (buried {burials:?} \
         after it, during b's drain; one failed epoch bump)"
    );
}

/// draining member (a draining member still counts in the survivors' fair share, and takes nothing):
/// with default timings (shutdown deadline 10 s), no fault at all. a, b, c on six shards, b
/// watches c. c crashes; 5 s later b begins a graceful shutdown while one of its handlers
/// needs 30 s (so b drains for the whole 10 s deadline). b buries c during its drain (as the
/// change intends), a takes c's rows, but only up to its share counting the draining b
/// (6 / 2 = 3): the second of c's shards waits for b's leave. Expected: every shard of c read
/// again within 15 s of c's last landed member renewal.
#[tokio::test(start_paused = true)]
async fn a_draining_member_does_not_hold_back_a_crashed_members_shards() {
    r3(5).await;
}

/// Finding 3, worst case (failed on 6c3284e: 11.05 s and 19.05 s): b's shutdown begins 6 s after c's crash (still before the burial: c's row stays c's, not b's).
#[tokio::test(start_paused = true)]
async fn a_draining_member_does_not_hold_back_a_crashed_members_shards_six_seconds_on() {
    r3(6).await;
}

async fn r3(shutdown_after_crash: u64) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let stores: Vec<Probe> = ["a", "b", "c"]
        .iter()
        .map(|o| Probe::new(&table, o))
        .collect();
    let mut brokers = Vec::new();
    for store in &stores {
        brokers.push(start_with(&kinesis, store, &running, None).await);
    }
    sleep(Duration::from_secs(5)).await;
    let shares: Vec<BTreeSet<String>> = brokers.iter().map(held).collect();
    assert!(
        shares.iter().all(|s| s.len() == 2),
        "two shards each: {shares:?}"
    );
    let c = brokers.pop().unwrap();
    let b = brokers.pop().unwrap();
    let a = brokers.pop().unwrap();
    let (b_shards, c_shards) = (shares[1].clone(), shares[2].clone());
    drop(c);
    sleep(Duration::from_secs(shutdown_after_crash)).await;
    let slow_on = b_shards.iter().next().unwrap().clone();
    kinesis
        .put(STREAM, &key_for(&kinesis, 6, &slow_on), "slow-30")
        .unwrap();
    assert!(
        eventually(Duration::from_secs(3), || running.of("b") == 1).await,
        "b's slow handler never began"
    );
    let leaving = tokio::spawn(async move {
        let began = Instant::now();
        b.shutdown().await;
        began.elapsed()
    });
    let watch_a = async {
        poll_until(Duration::from_secs(30), async || {
            member_row_owner(&table, "c").await.as_deref() == Some("b")
        })
        .await;
        sleep(Duration::from_secs(3)).await;
        let owners: Vec<(String, Option<String>)> = rows(&table, STREAM)
            .await
            .into_iter()
            .map(|r| (r.key.shard().to_owned(), r.owner))
            .collect();
        eprintln!(
            "draining member: 3 s after c's burial a holds {:?}; rows {owners:?}",
            held(&a)
        );
    };
    let takers = [&a];
    let (taken, ()) = tokio::join!(
        taken_by(&takers, &c_shards, Duration::from_secs(40)),
        watch_a
    );
    let shutdown = leaving.await.unwrap();
    let renewed = stores[2].last_landed_member_renewal();
    let after = delays(&c_shards, &taken, renewed);
    let burials: Vec<Duration> = stores[1]
        .burials
        .lock()
        .unwrap()
        .iter()
        .map(|at| at.saturating_duration_since(renewed))
        .collect();
    eprintln!(
        "draining member (b leaves {shutdown_after_crash} s after the crash): c buried by b {burials:?} after c's last landed member renewal; c's shards read \
         again {after:?} after it; b's shutdown took {shutdown:?}"
    );
    a.shutdown().await;
    assert!(
        within(&after, Duration::from_secs(15)),
        "c's shards read again {after:?} after its last landed member renewal (buried {burials:?} \
         after it, during b's drain)"
    );
}

/// Found by the simulation (seed 16969): a burial whose answer was lost, with the roster
/// listed before the watcher read the buried row again. The listing no longer showed the dead
/// member (its row now names the watcher), so the watcher stopped watching it without ever
/// announcing the burial: no epoch bump, no relisting, and the dead member's expired rows sat
/// unread until something else changed. a, b on four shards; b crashes; a's burial of b lands
/// but its answer is lost, and the roster's epoch moves at the same moment. Before the fix: b's
/// shards never read again (60 s). After: within the crash bound of 15 s.
#[tokio::test(start_paused = true)]
async fn a_burial_whose_answer_was_lost_is_still_announced() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, stores) = start_all(&kinesis, &table, &["a", "b"], &running).await;
    sleep(Duration::from_secs(7)).await;
    stores[0].lose_burial_answers.store(1, Ordering::SeqCst);
    let b = brokers.pop().unwrap();
    let b_shards = held(&b);
    assert_eq!(b_shards.len(), 2);
    drop(b);
    let survivors: Vec<&RunningBroker> = brokers.iter().collect();
    let taken = taken_by(&survivors, &b_shards, Duration::from_secs(60)).await;
    let after = delays(&b_shards, &taken, stores[1].last_landed_member_renewal());
    eprintln!(
        "lost burial answer: shards read again {after:?} after the last landed member renewal"
    );
    let lost = stores[0].lose_burial_answers.load(Ordering::SeqCst);
    for broker in brokers {
        broker.shutdown().await;
    }
    assert_eq!(lost, 0, "the burial's answer was lost");
    assert!(
        within(&after, Duration::from_secs(15)),
        "a dead member's shards read again {after:?} after its last landed member renewal"
    );
}

/// From the hostile review of the fix above: a watcher that leaves with a burial still
/// unconfirmed (its answer lost, every read of the buried row failing since). The row names
/// the watcher, so no roster listing shows the dead member and nobody else watches it. a, b, c
/// on six shards, b watching c; c crashes; b's burial of c lands but its answer is lost, b's
/// reads of member rows fail from then on, and b shuts down. Measured: c's shards are read by
/// a within the bound, before the review's fix too, because b's leave bumps the epochs after
/// the burial landed and a's listing then sees c gone. The fix (the hand-on announces an
/// unconfirmed burial when it gives up) covers a burial landing after that bump, which this
/// test cannot time; the test holds the bound for the order it can.
#[tokio::test(start_paused = true)]
async fn a_watcher_leaving_with_an_unconfirmed_burial_still_announces_it() {
    let (_, mut brokers, stores) = abc_on_six_shards().await;
    stores[1].lose_burial_answers.store(1, Ordering::SeqCst);
    stores[1]
        .blind_after_lost_burial
        .store(true, Ordering::SeqCst);
    let c = brokers.pop().unwrap();
    let c_shards = held(&c);
    assert_eq!(c_shards.len(), 2);
    drop(c);
    let lost = poll_until(Duration::from_secs(30), async || {
        stores[1].lose_burial_answers.load(Ordering::SeqCst) == 0
    })
    .await;
    assert!(lost.is_some(), "b's burial of c was lost");
    let b = brokers.pop().unwrap();
    let leaving = tokio::spawn(b.shutdown());
    let a = brokers.pop().unwrap();
    let taken = taken_by(&[&a], &c_shards, Duration::from_secs(60)).await;
    let after = delays(&c_shards, &taken, stores[2].last_landed_member_renewal());
    eprintln!("unconfirmed burial at a leave: shards read again {after:?} after c's last renewal");
    leaving.await.unwrap();
    a.shutdown().await;
    assert!(
        within(&after, Duration::from_secs(40)),
        "a dead member's shards read again {after:?} after its last landed member renewal"
    );
}

/// Members a, c and e on six shards (c watches e), 7 s in, e then crashed (dropped).
struct ECrashed {
    kinesis: MemoryStream,
    table: MemoryLeaseTable,
    running: Arc<Running>,
    /// a's and c's brokers.
    brokers: Vec<RunningBroker>,
    /// The shards e held.
    e_shards: BTreeSet<String>,
    e_store: Probe,
}

async fn e_crashed() -> ECrashed {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 6).unwrap();
    let table = MemoryLeaseTable::new();
    let running = Arc::new(Running::default());
    let (mut brokers, mut stores) = start_all(&kinesis, &table, &["a", "c", "e"], &running).await;
    sleep(Duration::from_secs(7)).await;
    let e = brokers.pop().unwrap();
    let e_shards = held(&e);
    assert_eq!(e_shards.len(), 2);
    drop(e);
    ECrashed {
        kinesis,
        table,
        running,
        brokers,
        e_shards,
        e_store: stores.pop().unwrap(),
    }
}

impl ECrashed {
    /// How long after e's last landed member renewal each of its shards was held by one of
    /// `takers` (within `limit`), printed under `what`.
    async fn read_again(
        &self,
        takers: &[&RunningBroker],
        limit: Duration,
        what: &str,
    ) -> Vec<Option<Duration>> {
        let taken = taken_by(takers, &self.e_shards, limit).await;
        let after = delays(
            &self.e_shards,
            &taken,
            self.e_store.last_landed_member_renewal(),
        );
        eprintln!("{what}: e's shards read again {after:?} after its last landed member renewal");
        after
    }
}

/// a, c and e on six shards (c watches e); e crashes, and 6 s later d joins: d sorts between
/// c and e, so from its join d watches e and c watches d. e's shards must still be read again
/// within 13 s of e's last landed member renewal: c had been counting e's standing still all
/// along, d only from its join.
///
/// Found by the chaos campaign (`cargo xtask chaos`, seed 1: a process killed and restarted 6 s
/// later under a new owner id that sorted just before the dead one's; its shards were read again
/// 17.5 s after the kill). Before the fix: 17.1 and 18.1 s here (d found e dead a lease after
/// its own first reading). After: 10.1 s, c burying e on its own count.
#[tokio::test(start_paused = true)]
async fn a_member_joining_before_a_crashed_one_does_not_restart_its_count() {
    let mut fleet = e_crashed().await;
    sleep(Duration::from_secs(6)).await;
    let d = start(
        &fleet.kinesis,
        &Probe::new(&fleet.table, "d"),
        &fleet.running,
    )
    .await;
    fleet.brokers.push(d);
    let takers: Vec<&RunningBroker> = fleet.brokers.iter().collect();
    let after = fleet
        .read_again(
            &takers,
            Duration::from_secs(40),
            "crash, then a join before it",
        )
        .await;
    let buried_by = member_row_owner(&fleet.table, "e").await;
    for broker in fleet.brokers {
        broker.shutdown().await;
    }
    assert!(
        within(&after, Duration::from_secs(13)),
        "a crashed member's shards read again {after:?} after its last landed member renewal, a member having joined before it in the ring"
    );
    assert_eq!(
        buried_by.as_deref(),
        Some("c"),
        "e buried by its watcher before the join, on its own count"
    );
}

/// As above, twice over: e crashes, d joins between c and e 4 s later and crashes 2 s after
/// its join, then "cz" joins between c and d. c must still bury e on its own count (it
/// watches every former successor, not only the last), and e's shards are read again within
/// 13 s of its last landed member renewal.
#[tokio::test(start_paused = true)]
async fn two_members_joining_in_turn_before_a_crashed_one_do_not_restart_its_count() {
    let mut fleet = e_crashed().await;
    sleep(Duration::from_secs(4)).await;
    let d = start(
        &fleet.kinesis,
        &Probe::new(&fleet.table, "d"),
        &fleet.running,
    )
    .await;
    sleep(Duration::from_secs(2)).await;
    drop(d);
    let cz = start(
        &fleet.kinesis,
        &Probe::new(&fleet.table, "cz"),
        &fleet.running,
    )
    .await;
    fleet.brokers.push(cz);
    let takers: Vec<&RunningBroker> = fleet.brokers.iter().collect();
    let after = fleet
        .read_again(
            &takers,
            Duration::from_secs(40),
            "crash, then two joins before it",
        )
        .await;
    let buried_by = member_row_owner(&fleet.table, "e").await;
    for broker in fleet.brokers {
        broker.shutdown().await;
    }
    assert!(
        within(&after, Duration::from_secs(13)),
        "a crashed member's shards read again {after:?} after its last landed member renewal, two members having joined before it in turn"
    );
    assert_eq!(buried_by.as_deref(), Some("c"));
}

/// e crashes, d joins between c and e 4 s later, and 2 s after that c (e's watcher until the
/// join) shuts down gracefully: c goes on watching e, its former successor, while it hands its
/// watch on, so e's shards are still read again within 13 s of its last landed member renewal.
/// (Found by the review of the fix above: the hand-on watched only the successor.)
#[tokio::test(start_paused = true)]
async fn a_watcher_leaving_after_a_join_still_watches_its_former_successor() {
    let mut fleet = e_crashed().await;
    sleep(Duration::from_secs(4)).await;
    let d = start(
        &fleet.kinesis,
        &Probe::new(&fleet.table, "d"),
        &fleet.running,
    )
    .await;
    sleep(Duration::from_secs(2)).await;
    let c = fleet.brokers.pop().unwrap();
    let leaving = tokio::spawn(c.shutdown());
    let a = fleet.brokers.pop().unwrap();
    let after = fleet
        .read_again(
            &[&a, &d],
            Duration::from_secs(40),
            "crash, a join before it, its old watcher leaving",
        )
        .await;
    leaving.await.unwrap();
    a.shutdown().await;
    d.shutdown().await;
    assert!(
        within(&after, Duration::from_secs(13)),
        "a crashed member's shards read again {after:?} after its last landed member renewal, its old watcher leaving after a join"
    );
}

/// c and e crash together and c restarts at once under its own id (a container restart keeping
/// its hostname): a buries c, and the restarted c takes its member row again within a renewal.
/// e, after c in the ring, must then be a's to watch on a's own count (e stood still since the
/// crash), not the restarted c's from its first reading: a buries e at its first watch after
/// c's burial, counting from its last glance at e (the member after its successor, read once a
/// lease), and e's shards are read again 14.1 and 15.1 s after e's last landed member renewal
/// (one or two take ticks apart: the taker may take the two shards in two rounds); before the
/// fix 22.1 and 23.1 s (the restarted c counted e from its own first reading). Found by the
/// review of the join fix: the burial left c among the members a had seen, so c's return did
/// not count as a join. Without the glance (the roster no longer listed every lease) 20.1 s.
#[tokio::test(start_paused = true)]
async fn a_neighbour_restarting_under_its_own_id_does_not_restart_the_count_of_the_next() {
    let mut fleet = e_crashed().await;
    // c crashes at the same moment as e, and restarts at once under its own id.
    drop(fleet.brokers.pop().unwrap());
    let c_again = start(
        &fleet.kinesis,
        &Probe::new(&fleet.table, "c"),
        &fleet.running,
    )
    .await;
    fleet.brokers.push(c_again);
    let takers: Vec<&RunningBroker> = fleet.brokers.iter().collect();
    let after = fleet
        .read_again(
            &takers,
            Duration::from_secs(60),
            "two neighbours crash, the first restarts under its id",
        )
        .await;
    for broker in fleet.brokers {
        broker.shutdown().await;
    }
    assert!(
        within(&after, Duration::from_millis(17_500)),
        "the second crashed neighbour's shards read again {after:?} after its last landed member renewal"
    );
}

/// a, b, c on six shards; c crashes and b, its watcher, buries it, but the burial's bump of the
/// roster's epoch fails (the stream's lands). The janitor (a, the first id) notes departed
/// member rows from its own roster listings and deletes them ten leases later; it lists the
/// roster when the roster's count moves, so c's row must still go.
///
/// Before the fix: the failed roster bump was not owed, and a's watch listed the roster only for
/// members the coordinator's listing showed it did not know, never for one gone: c's row stood
/// for the rest of the run (the simulation's seed 518 with its tail, through a failed listing).
/// After: deleted 103 s after the burial.
#[tokio::test(start_paused = true)]
async fn a_buried_members_row_is_deleted_though_the_burials_roster_bump_failed() {
    c_buried_then_deleted_in_time(|stores| {
        stores[1].roster_bumps_to_fail.store(1, Ordering::SeqCst);
    })
    .await;
}

/// As above, with the burial's bumps landing but the janitor's first delete of c's row failing.
///
/// Before the fix: the janitor dropped the row from those due before it deleted, and learnt of
/// it again only at the next change of the roster: the row stood for the rest of the run.
/// After: deleted 102 s after the burial (the second try, a watch later).
#[tokio::test(start_paused = true)]
async fn a_departed_members_row_whose_delete_failed_is_deleted_at_the_next_watch() {
    c_buried_then_deleted_in_time(|stores| {
        stores[0].deletes_to_fail.store(1, Ordering::SeqCst);
    })
    .await;
}

/// a, b, c on six shards with `switch` applied to their stores; c crashes and b buries it.
/// Asserts that c's member row was deleted within 120 s of the burial (ten leases and a
/// cadence).
async fn c_buried_then_deleted_in_time(switch: impl FnOnce(&[Probe])) {
    let (table, mut brokers, stores) = abc_on_six_shards().await;
    switch(&stores);
    drop(brokers.pop());
    let buried = poll_until(Duration::from_secs(30), async || {
        member_row_owner(&table, "c").await.as_deref() == Some("b")
    })
    .await
    .expect("c buried by b");
    let deleted = poll_until(Duration::from_secs(200), async || {
        rows(&table, MEMBERS)
            .await
            .iter()
            .all(|r| r.key.shard() != "c")
    })
    .await;
    let after = deleted.map(|at| at.duration_since(buried));
    eprintln!("c's member row deleted {after:?} after its burial");
    for broker in brokers {
        broker.shutdown().await;
    }
    assert!(
        after.is_some_and(|d| d <= Duration::from_secs(120)),
        "c's departed member row deleted {after:?} after its burial (ten leases and a cadence)"
    );
}
