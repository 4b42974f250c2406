//! The simulated world of one seed: a stream, a lease table, brokers coming and going, a
//! producer, a monitor, and the scenario that injects the plan's faults.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    testing::{MemoryStream, Op},
    BatchFailure, Broker, BrokerError, Delivery, Hooks, MemoryLeaseStore, MemoryLeaseTable,
    Release, RunningBroker, ShardInfo, StartAt,
};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use crate::clock::{SimClock, BASE_MS};
use crate::faults::{FaultyStore, Freeze, SimKinesis, StoreFaults};
use crate::liveness::{BURY_BOUND, CRASH_TAKEOVER_BOUND, HOOK_SLACK, LEAVE_BOUND, READ_SLACK};
use crate::plan::{Fault, Mode, Plan, Start};
use crate::record::{Put, Recorder};

mod import;
mod operator;

/// The stream every broker reads.
pub(crate) const STREAM: &str = "sim";
/// How long faults are injected.
pub const FAULT_PHASE: Duration = Duration::from_secs(90);
/// How long records are still put once faults stop.
pub const CALM_PUTS: Duration = Duration::from_secs(20);
/// The bound stated for recovery: once faults stop and the last record is put, every shard is
/// held and every expected record handled within this.
pub const SETTLE_BOUND: Duration = Duration::from_secs(60);
/// The hard bound for a fleet still working through a backlog at `SETTLE_BOUND`.
pub const SETTLE_CAP: Duration = Duration::from_secs(180);
/// The settlement-window bound every shard must keep (the broker's default).
/// Quiet idle shards: the writer's cycle, and the burst of puts at its start (see `run`).
const QUIET_CYCLE_MS: u128 = 60_000;
const QUIET_BURST_MS: u128 = 10_000;
const MAX_UNSETTLED: u64 = 10_000;
/// The lease, in ms (the brokers' default).
const LEASE_MS: u64 = 10_000;
/// How long a watcher goes on watching a former successor after a member joined between them,
/// from when the join shows in the table: a lease and a list interval (2 s) from when the
/// watcher saw the change (`ring_watch`), which is at its next watch after its next epoch
/// read (up to a take interval and a list interval later).
const FORMER_WATCH_MS: u64 = LEASE_MS + 2_000 + 1_000 + 2_000;
/// At most this many brokers run at once.
const MAX_BROKERS: usize = 6;
/// At most this many open shards.
const MAX_OPEN_SHARDS: usize = 8;
/// The `AT_TIMESTAMP` start, in ms after the simulated epoch.
const AT_TIMESTAMP_MS: u64 = 3_000;

/// The janitor deletes a departed member row once it stood still this long (ten leases), and
/// this much more for the janitor's own cadence: member rows never outnumber the live
/// instances plus the ones departed within this.
const MEMBER_ROW_GRACE_MS: u64 = 120_000;
/// Loops under `Mode::Workers` (one-record handlers in no order).
const WORKERS: u32 = 3;
/// Loops under `Mode::BatchWorkers` (batch handlers in no order).
const BATCH_WORKERS: u32 = 2;

/// A slow handler attempt (planned `SlowHandlers`) takes 1 to 15 s, one attempt in 1,000.
const SLOW_HANDLER_MS: std::ops::RangeInclusive<u64> = 1_000..=15_000;

/// One broker of the fleet.
struct Instance {
    id: String,
    running: Option<RunningBroker>,
    faults: Arc<StoreFaults>,
    freeze: Arc<Freeze>,
    clock: SimClock,
    /// Its handlers take 1 to 9 s each until then (a slow drain).
    slow_until: Arc<std::sync::Mutex<Option<Instant>>>,
    /// The shards it held at the last sample.
    held: BTreeSet<String>,
    /// Of those, the shards it was handing over at the last sample, with its reader stopped
    /// and no handler running (`ShardStats::handing_to`): it reads none of them.
    handing: BTreeSet<String>,
    /// When it started (ms since the start).
    started_ms: u64,
    /// The token its id's member row carried before it started (a twin's, a crashed or
    /// stopped run's): it has joined once the row is its id's under another token.
    start_token: Option<String>,
}

/// What became of an owner id's processes, for the roster and subscription invariants.
#[derive(Debug, Default, Clone, Copy)]
struct IdLife {
    /// Processes with this id running or shutting down now.
    live: u32,
    /// When a process with this id last crashed, or last ended (ms since the start).
    departed_ms: Option<u64>,
    /// When one last crashed (ms), no process with the id having started since.
    crashed_ms: Option<u64>,
    /// When one last started (ms).
    started_ms: u64,
}

/// The orphan's watcher before a join still counts: its clock goes on from when that watcher
/// began, for each of its shards.
fn continue_with_old(orphan: &Orphan, rec: &Recorder) {
    for shard in &orphan.shards {
        rec.hold_back(shard, orphan.since_ms);
    }
}

/// A crashed member not yet buried: the shards it held, who watches it in the roster, and
/// since when that watcher has watched it (the crash, or the watcher's change: a watcher that
/// came later can only judge the row from its own first sight).
#[derive(Debug, Clone)]
struct Orphan {
    shards: Vec<String>,
    /// The watcher's id, member-row token (a restarted watcher is a new process), whether its
    /// process is alive (a crashed watcher watches nobody), and when the process running the
    /// id started: a watcher that crashed and restarted at once keeps its old member row, and
    /// its token, until the new process joins, but is a new process that watches nobody yet
    /// (seed 204797: the checker counted the bound from the crashed one's start).
    watcher: Option<(String, Option<String>, bool, u64)>,
    since_ms: u64,
    /// The crashed run's member-row token: the orphan is adopted once the row carries another.
    token: Option<String>,
    /// When a member was first seen joined between the watcher and the orphan while that
    /// watcher goes on counting on its own (`ring_watch`: former successors, for a lease and a
    /// list interval after the change, then the newcomer's count holds).
    joined_ms: Option<u64>,
}

pub(crate) struct World {
    plan: Plan,
    rng: fastrand::Rng,
    rec: Recorder,
    kinesis: MemoryStream,
    sim_kinesis: SimKinesis,
    table: MemoryLeaseTable,
    /// What eventually consistent reads of every instance may answer (see `faults::Replicas`).
    replicas: Arc<crate::faults::Replicas>,
    events: Arc<AtomicU64>,
    clock: SimClock,
    instances: Vec<Instance>,
    /// Owner ids no longer running (crashed or stopped), for reuse.
    retired: Vec<String>,
    next_id: usize,
    initial_shards: BTreeSet<String>,
    shutdowns: Vec<JoinHandle<()>>,
    faults_on: bool,
    stats: Stats,
    /// Per owner id: how many processes use it, and when one last left.
    ids: Arc<std::sync::Mutex<BTreeMap<String, IdLife>>>,
    /// The stall bound of this plan (ms): crash takeover, read slack, hooks.
    stall_bound: u64,
    /// The bound after a graceful leave (ms), with the hooks' slack.
    leave_bound: u64,
    /// Crashed members whose rows are still present, by owner id.
    orphans: BTreeMap<String, Orphan>,
    /// Who held each shard at the last sample.
    last_holders: BTreeMap<String, String>,
    /// Shards two running, unfrozen instances both read at the last sample, and since when.
    double_held: BTreeMap<String, Instant>,
    /// True while a crashed member is not buried (the monitor's last sample).
    unburied: Arc<std::sync::atomic::AtomicBool>,
    /// Kinesis faults not consumed by then are cleared: an episode lasts [`KINESIS_EPISODE`].
    kinesis_clear_at: Option<Instant>,
    /// A join owed by [`Fault::JoinBeforeCrashed`]: when, and the newcomer's owner id.
    join_before: Option<(Instant, String)>,
    /// A crash owed by [`Fault::UnannouncedJoin`]: when, and the owner id.
    unannounced: Option<(Instant, String)>,
    /// The next instance started has its roster bumps fail for this long.
    next_unannounced: Option<Duration>,
    /// Owner ids of instances whose roster bumps fail (until the faults stop): nobody is told
    /// of their join, so they must hold no shard, and once crashed their member row waits for
    /// the next roster change to be buried.
    unannounced_ids: BTreeSet<String>,
    /// When each id once unannounced was announced (a roster bump landed after its join).
    announced_at: BTreeMap<String, u64>,
    /// Per owner id whose member row is no longer its own (it left, or was buried): since
    /// when a sample saw it so (ms).
    unpresent_since: BTreeMap<String, u64>,
    /// Per owner id whose member row is its own: since when a sample saw it so under its
    /// present token (ms): when its incarnation joined, to a sample.
    present_since: BTreeMap<String, (Option<String>, u64)>,
    /// Per shard row, whom it was marked wanted by at the last sample.
    wanted_by: BTreeMap<String, String>,
    /// The roster's epoch at the last sample: when it moves, every member row is listed by
    /// every instance, so crashed unannounced members are watched from then on.
    roster_epoch: u64,
    /// The sample (ms) that last saw the roster's epoch move.
    roster_moved_ms: u64,
    /// Rows in the operator's hold, by shard: when the operator moved them (ms).
    evicted: BTreeMap<String, u64>,
    /// Per owner id: its member row's token at the last sample, and since when it carries it
    /// (ms): an instance that joins the roster again (found dead, a twin) watches rows afresh.
    joins: BTreeMap<String, (Option<String>, u64)>,
}

/// How long a Kinesis fault episode lasts: throttles and failures not consumed by then are
/// dropped (else they would wait, unconsumed, for the next reader of a quiet operation).
const KINESIS_EPISODE: Duration = Duration::from_secs(5);
/// A subscription may fail as a twin for this long after the other process with its id ended:
/// two leases, the time the evidence (its renewals, watched for a lease) takes to surface.
const TWIN_EVIDENCE_MS: u64 = 20_000;
/// Fault time after a consumer's deletion ended: registering it again (describes up to 5 s apart
/// until it is gone, and again until the new one is ACTIVE), joining, taking, subscribing.
const DEREGISTER_EXCUSE_MS: u64 = 12_000;
/// Fault time of a Kinesis episode: the episode, then the readers' backoff after it.
const KINESIS_EXCUSE_MS: u64 = 10_000;

/// Counts for the report.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Records put.
    pub puts: u64,
    /// Records expected to be handled.
    pub expected: u64,
    /// Completions (records handled, counting duplicates).
    pub handled: u64,
    /// Records completed more than once.
    pub duplicates: u64,
    /// Events injected, by kind.
    pub injected: BTreeMap<String, u64>,
    /// Store calls failed or whose response was lost.
    pub store_faults: u64,
    /// Hand-overs: shards a running instance let go to another running one (the row names it,
    /// not taken yet, or had been marked wanted by it): count balance's, and, balanced by
    /// load, the planner's moves and exchanges.
    pub hand_overs: u64,
    /// Seconds from the last put until every expected record was handled.
    pub settle_secs: f64,
}

impl World {
    pub(crate) fn new(plan: Plan, rec: Recorder) -> Self {
        let clock = SimClock::new(Instant::now());
        let kinesis = MemoryStream::new().with_clock(clock.clone());
        let events = Arc::new(AtomicU64::new(0));
        let sim_kinesis = SimKinesis::new(kinesis.clone(), events.clone(), plan.seed ^ 0x6b);
        if plan.mode.is_ordered() {
            rec.check_order();
        }
        if matches!(plan.mode, Mode::Serial | Mode::Batch) {
            rec.single_lane();
        }
        match plan.mode {
            Mode::Workers => rec.loops_in_no_order(WORKERS),
            Mode::BatchWorkers => rec.loops_in_no_order(BATCH_WORKERS),
            _ => {}
        }
        let hooks = if plan.hooks { HOOK_SLACK } else { 0 };
        // Epoch reads up to 2 s late: each take tick waits for its read, so rows freed by a
        // leave (or a burial) are noticed later (seed 1755: 7.5 s after a leave, bound 7.5 s;
        // see `EPOCH_SLACK`).
        let epochs = if plan.has(Fault::EpochFaults) {
            crate::liveness::EPOCH_SLACK
        } else {
            0
        };
        let stall_bound = CRASH_TAKEOVER_BOUND + READ_SLACK + hooks + epochs;
        let leave_bound = LEAVE_BOUND + hooks + epochs;
        Self {
            rng: fastrand::Rng::with_seed(plan.seed),
            plan,
            rec,
            kinesis,
            sim_kinesis,
            table: MemoryLeaseTable::new(),
            replicas: Arc::default(),
            events,
            clock,
            instances: Vec::new(),
            retired: Vec::new(),
            next_id: 0,
            initial_shards: BTreeSet::new(),
            shutdowns: Vec::new(),
            faults_on: true,
            stats: Stats::default(),
            ids: Arc::default(),
            stall_bound,
            leave_bound,
            orphans: BTreeMap::new(),
            kinesis_clear_at: None,
            join_before: None,
            unannounced: None,
            next_unannounced: None,
            unannounced_ids: BTreeSet::new(),
            announced_at: BTreeMap::new(),
            unpresent_since: BTreeMap::new(),
            present_since: BTreeMap::new(),
            wanted_by: BTreeMap::new(),
            roster_epoch: 0,
            roster_moved_ms: 0,
            unburied: Arc::default(),
            last_holders: BTreeMap::new(),
            double_held: BTreeMap::new(),
            evicted: BTreeMap::new(),
            joins: BTreeMap::new(),
        }
    }

    fn id_life(&self, id: &str) -> IdLife {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
            .unwrap_or_default()
    }

    fn with_id(&self, id: &str, change: impl FnOnce(&mut IdLife)) {
        change(
            self.ids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(id.to_owned())
                .or_default(),
        );
    }

    /// Tells the recorder every shard's parents, as the stream lists them now.
    fn note_parents(&self) {
        for shard in self.kinesis.shards(STREAM).unwrap_or_default() {
            self.rec.parents(&shard.id, shard.parents().to_vec());
        }
    }

    fn count(&mut self, what: &str) {
        *self.stats.injected.entry(what.to_owned()).or_default() += 1;
    }

    pub(crate) async fn run(mut self) -> Stats {
        self.kinesis
            .create_stream(STREAM, self.plan.shards)
            .expect("stream");
        if self.plan.resharded_before {
            let first = self.open_shards()[0].clone();
            self.kinesis.split_evenly(STREAM, &first).expect("split");
            self.rec
                .note(format!("resharded before start: split {first}"));
        }
        if let Some(import) = self.plan.import {
            self.import_table(import).await;
        }
        self.initial_shards = self.open_shards().into_iter().collect();
        self.note_parents();
        self.rec.note(format!("plan: {}", self.plan));
        for _ in 0..self.plan.brokers {
            self.start_new(None).await;
        }
        let start = Instant::now();
        let mut next_put = start;
        let mut next_event = start + Duration::from_secs(2);
        let mut next_check = start;
        let produce_until = start + FAULT_PHASE + CALM_PUTS;
        let fault_end = start + FAULT_PHASE;
        // For `LATEST`, the subscription begins where each shard was first opened: put
        // nothing before the fleet has opened every shard (or 30 s passed).
        let put_from = start + Duration::from_secs(1);
        loop {
            let now = Instant::now();
            if now >= produce_until {
                break;
            }
            if self.faults_on && now >= fault_end {
                self.calm_down().await;
            }
            self.clear_kinesis_if_due();
            if let Some((at, id)) = self.join_before.take() {
                if now >= at {
                    self.rec
                        .note(format!("{id} joins, just before the crashed member"));
                    self.start_new(Some(id)).await;
                } else {
                    self.join_before = Some((at, id));
                }
            }
            if let Some((at, id)) = self.unannounced.take() {
                if now >= at {
                    let live = self.live();
                    if let Some(i) = live.into_iter().find(|i| self.instances[*i].id == id) {
                        // Its life counts as fault time (`unannounced_join`) until its crash
                        // was due; a start that held this loop up (a twin's, refused after a
                        // lease) crashes it later: that time counts too (seed 240, 6.5 s).
                        let late = now.duration_since(at).as_millis() as u64;
                        let now_ms = self.rec.now_ms();
                        self.rec
                            .delaying_fault_between(now_ms.saturating_sub(late), now_ms);
                        self.rec.note(format!("{id} (never announced) crashes"));
                        self.crash(i).await;
                    }
                } else {
                    self.unannounced = Some((at, id));
                }
            }
            if now >= next_check {
                self.monitor().await;
                next_check = now + Duration::from_millis(250);
            }
            if now >= next_put && now >= put_from {
                self.put_one();
                next_put = now + Duration::from_millis(self.rng.u64(50..300));
                // Quiet idle shards: puts in bursts of 10 s every 60 s, so rows go idle (no
                // checkpoint moves, no write) for 50 s at a time, longer than a lease, and
                // faults and operator moves meet idle rows.
                if self.plan.quiet != crate::plan::Quiet::Off {
                    let into = next_put.duration_since(start).as_millis() % QUIET_CYCLE_MS;
                    if into >= QUIET_BURST_MS {
                        next_put += Duration::from_millis((QUIET_CYCLE_MS - into) as u64);
                    }
                }
            }
            if self.faults_on && now >= next_event {
                self.inject().await;
                next_event = now + Duration::from_millis(self.rng.u64(1_000..6_000));
            }
            let wake = [next_put, next_check, next_event, produce_until]
                .into_iter()
                .chain(self.kinesis_clear_at)
                .chain(self.join_before.as_ref().map(|(at, _)| *at))
                .chain(self.unannounced.as_ref().map(|(at, _)| *at))
                .filter(|t| *t > now)
                .min()
                .unwrap_or(now + Duration::from_millis(10));
            tokio::time::sleep_until(wake).await;
        }
        let last_put = Instant::now();
        self.rec
            .note("last record put; waiting for every expected record");
        // Every expected record handled within SETTLE_BOUND of the last put, or, while the
        // fleet still completes records (a backlog one instance works through; the liveness
        // checker has watched for stalls all along), by SETTLE_CAP.
        let (deadline, cap) = (last_put + SETTLE_BOUND, last_put + SETTLE_CAP);
        let mut handled = self.rec.handled();
        let mut progressed_at = Instant::now();
        loop {
            self.monitor().await;
            if self.rec.missing().is_empty() && self.every_shard_held().await {
                break;
            }
            if self.rec.handled() != handled {
                handled = self.rec.handled();
                progressed_at = Instant::now();
            }
            let working = progressed_at.elapsed() < Duration::from_secs(20);
            if Instant::now() >= cap || (Instant::now() >= deadline && !working) {
                for instance in &self.instances {
                    if let Some(running) = &instance.running {
                        for shard in running.stats().shards(STREAM) {
                            self.rec.note(format!("{}: {shard:?}", instance.id));
                        }
                    }
                }
                self.rec.note(format!(
                    "handlers running now: {:?}",
                    self.rec.running_now()
                ));
                let store = MemoryLeaseStore::over(&self.table);
                for stream in [STREAM.to_owned(), format!("{STREAM}@members")] {
                    for row in store.list(&stream).await.unwrap_or_default() {
                        self.rec.note(format!(
                            "row {}: owner {:?} token {:?} counter {} wanted by {:?} checkpoint {:?}",
                            row.key,
                            row.owner,
                            row.token.as_deref().map(|t| &t[..t.len().min(8)]),
                            row.counter,
                            row.wanted_by,
                            row.checkpoint.as_ref().map(ToString::to_string)
                        ));
                    }
                }
                let missing = self.rec.missing();
                self.rec.violate(format!(
                    "{} s after the last put (faults stopped {} s before it): {} expected records not handled (first: {:?}); unheld shards: {:?}",
                    SETTLE_BOUND.as_secs(),
                    CALM_PUTS.as_secs(),
                    missing.len(),
                    missing.first(),
                    self.unheld_shards().await,
                ));
                break;
            }
            sleep(Duration::from_millis(250)).await;
        }
        self.stats.settle_secs = last_put.elapsed().as_secs_f64();
        if self.plan.tail {
            self.rec
                .note("every record handled; the fleet runs on (a tail)");
            let until = Instant::now() + crate::plan::TAIL;
            while Instant::now() < until {
                self.monitor().await;
                sleep(Duration::from_millis(250)).await;
            }
        }
        self.shutdown_all().await;
        self.monitor_rows().await;
        let dups = self.rec.duplicates();
        self.stats.duplicates = dups.len() as u64;
        if self.plan.is_calm() && !dups.is_empty() {
            self.rec.violate(format!(
                "calm seed (only planned moves) handled {} records twice, first {:?}",
                dups.len(),
                dups.first()
            ));
        }
        self.stats.expected = self.rec.expected_count() as u64;
        self.stats.handled = self.rec.handled();
        self.stats
    }

    fn open_shards(&self) -> Vec<String> {
        self.kinesis
            .shards(STREAM)
            .map(|s| {
                s.into_iter()
                    .filter(|s| s.ending_sequence.is_none())
                    .map(|s| s.id)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn put_one(&mut self) {
        for put in self.put_record() {
            // From an imported table every record counts: each shard has a row with a position
            // or descends from one, and is read from there or from its first record.
            let expected = self.plan.import.is_some()
                || match self.plan.start {
                    Start::TrimHorizon => true,
                    Start::AtTimestamp => put.at_ms >= AT_TIMESTAMP_MS,
                    // Opened before this put (or a shard born after the start): it must be
                    // handled.
                    Start::Latest => {
                        !self.initial_shards.contains(&put.shard)
                            || self
                                .sim_kinesis
                                .first_open()
                                .get(&put.shard)
                                .is_some_and(|opened| *opened < put.event)
                    }
                };
            self.rec.put(Put { expected, ..put });
        }
    }

    /// Puts one record (under a KPL plan a third of the puts are aggregates): the records it
    /// stored, one per sub-record, not recorded yet and not expected yet.
    fn put_record(&mut self) -> Vec<Put> {
        let key = format!("key-{}", self.rng.u8(..24));
        let id = self.stats.puts;
        // Under a KPL plan a third of the puts are aggregates of 2 to 5 sub-records of one key.
        let subs = if self.plan.kpl && self.rng.u8(..3) == 0 {
            self.rng.u64(2..=5)
        } else {
            0
        };
        let payload = if subs == 0 {
            bytes::Bytes::from(format!("record-{id}"))
        } else {
            let mut agg = kinesis_kpl::Aggregator::new();
            for i in 0..subs {
                let pushed = agg.push(&key, None, format!("record-{id}/{i}").into());
                assert!(matches!(pushed, Ok(kinesis_kpl::Pushed::Added)));
            }
            agg.finish().expect("sub-records").data
        };
        let Ok(stored) = self.kinesis.put(STREAM, &key, payload) else {
            return Vec::new();
        };
        let (shard, sequence) = (stored.shard, stored.sequence);
        let event = self.events.fetch_add(1, Ordering::SeqCst);
        let sequence = kinesis_broker::SequenceNumber::new(sequence, None).expect("digits");
        let at_ms = self.clock.elapsed_ms();
        self.stats.puts += 1;
        // Each sub-record is a record of its own: (sequence, subsequence).
        let records: Vec<kinesis_broker::SequenceNumber> = if subs == 0 {
            vec![sequence]
        } else {
            (0..subs)
                .map(|i| sequence.with_subsequence(Some(i)))
                .collect()
        };
        records
            .into_iter()
            .map(|sequence| Put {
                shard: shard.clone(),
                sequence,
                event,
                at_ms,
                key: key.clone(),
                expected: false,
            })
            .collect()
    }

    /// Starts a broker: a new owner id, or `reuse` (a retired or a live one).
    async fn start_new(&mut self, reuse: Option<String>) {
        let id = reuse.unwrap_or_else(|| {
            self.next_id += 1;
            format!("b{}", self.next_id)
        });
        let skew = if self.plan.has(Fault::ClockSkew) {
            self.rng.i64(-10_000..=10_000)
        } else {
            0
        };
        let faults = Arc::new(StoreFaults::default());
        if self.plan.has(Fault::EpochFaults) {
            faults.fail_epoch_reads();
        }
        let muted = self.next_unannounced.take();
        if let Some(mute) = muted {
            faults.fail_roster_bumps(Instant::now() + mute);
        }
        let freeze = Arc::new(Freeze::default());
        let seed = self.plan.seed ^ (self.next_id as u64) << 32 ^ self.rng.u64(..);
        let clock = self.clock.skewed(skew);
        let store = FaultyStore::new(
            MemoryLeaseStore::over(&self.table).with_clock(clock.clone()),
            faults.clone(),
            freeze.clone(),
            seed,
            self.replicas.clone(),
        );
        let slow_until = Arc::default();
        let life = self.id_life(&id);
        let start_token = self.member_token(&id).await;
        let kinesis = self.sim_kinesis.for_instance(freeze.clone());
        let started =
            match self.build_broker(&id, store, kinesis, clock.clone(), &freeze, &slow_until) {
                Ok(broker) => self.starting(broker).await,
                Err(error) => Err(error),
            };
        match started {
            Ok(running) => {
                self.rec
                    .note(format!("{id} started (clock skew {skew} ms)"));
                // Started again with the id of an unannounced one that crashed: its join is
                // announced by its own roster bump, when that lands (`announce`), not now: a
                // process that crashes before it joined leaves the old row unknown as before.
                let _ = muted;
                let now = self.rec.now_ms();
                self.with_id(&id, |l| {
                    l.live += 1;
                    l.crashed_ms = None;
                    l.started_ms = now;
                });
                // A restart with the id first waits for the crashed run's member row to stand
                // still for a lease: the takeover clock of the crashed run starts over.
                if let Some(orphan) = self.orphans.get_mut(&id) {
                    orphan.since_ms = now;
                }
                self.instances.push(Instance {
                    id,
                    running: Some(running),
                    faults,
                    freeze,
                    clock,
                    slow_until,
                    held: BTreeSet::new(),
                    handing: BTreeSet::new(),
                    started_ms: now,
                    start_token,
                });
            }
            Err(error) => {
                let why = format!(
                    "{error}: {:?}",
                    std::error::Error::source(&error).map(ToString::to_string)
                );
                // Only a second live process with the id may refuse a start (a twin); a
                // restart after a crash or a stop must start.
                let twin = life.live > 0 || self.id_life(&id).live > 0;
                if twin || !matches!(error, BrokerError::OwnerInUse { .. }) {
                    self.rec.note(format!("{id} refused to start: {why}"));
                } else {
                    self.rec.violate(format!(
                        "{id} refused to start though no other process uses its id: {why}"
                    ));
                }
            }
        }
    }

    /// Clears the Kinesis faults of an episode once it is over.
    fn clear_kinesis_if_due(&mut self) {
        if self.kinesis_clear_at.is_some_and(|at| Instant::now() >= at) {
            self.kinesis_clear_at = None;
            self.kinesis.clear_faults();
            self.sim_kinesis.set_latency(0);
        }
    }

    /// `broker.start()`, while the world goes on around it: a start retries failing calls
    /// until its deadline (30 s), and meanwhile episodes must end on time and the checkers
    /// sample as always (a world that stood still during a start kept its Kinesis faults on
    /// until the start gave up, and stopped sampling).
    async fn starting(&mut self, broker: Broker) -> Result<RunningBroker, BrokerError> {
        let start = broker.start();
        tokio::pin!(start);
        loop {
            tokio::select! {
                biased;
                started = &mut start => return started,
                () = sleep(Duration::from_millis(250)) => {
                    self.clear_kinesis_if_due();
                    self.sample().await;
                }
            }
        }
    }

    /// No two owners, checked at every sample: no shard is read by two running instances,
    /// neither frozen, for more than `TWO_READERS_GRACE` (a giver's reader may take a moment
    /// to end after its hand-over landed, and a thawed one to notice its lease is gone). An
    /// instance whose keeper never learns that an operator freed its row reads beside the
    /// row's next taker until its next write.
    fn check_one_reader(&mut self) {
        const TWO_READERS_GRACE: Duration = Duration::from_secs(5);
        let mut readers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for instance in &self.instances {
            if instance.running.is_none() || instance.freeze.is_frozen() {
                continue;
            }
            // A shard being handed over is listed by its giver until the move's answer comes,
            // but nothing of it is read or handled there any more.
            for shard in instance.held.difference(&instance.handing) {
                readers.entry(shard).or_default().push(&instance.id);
            }
        }
        let now = Instant::now();
        let doubled: BTreeMap<String, Vec<String>> = readers
            .into_iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|(shard, ids)| {
                (
                    shard.to_owned(),
                    ids.into_iter().map(str::to_owned).collect(),
                )
            })
            .collect();
        self.double_held
            .retain(|shard, _| doubled.contains_key(shard));
        for (shard, ids) in doubled {
            let since = *self.double_held.entry(shard.clone()).or_insert(now);
            if now.duration_since(since) > TWO_READERS_GRACE {
                self.rec.violate_once(
                    &format!("two owners of {shard}"),
                    format!(
                        "two owners: {shard} read by {ids:?} at once for more than {TWO_READERS_GRACE:?}"
                    ),
                );
            }
        }
    }

    /// Whether instance `id` runs with quiet idle shards: every instance, none, or (mixed)
    /// those whose owner id's digits sum to an even number, so an id reused after a crash
    /// keeps its setting and both settings meet.
    fn is_quiet(&self, id: &str) -> bool {
        match self.plan.quiet {
            crate::plan::Quiet::Off => false,
            crate::plan::Quiet::On => true,
            crate::plan::Quiet::Mixed => !odd_id(id),
        }
    }

    /// Whether instance `id` balances by load: every instance, none, or (mixed) those whose
    /// owner id sums to an odd number (`odd_id`; the others of `is_quiet`'s mixed rule).
    fn by_load(&self, id: &str) -> bool {
        match self.plan.balance {
            crate::plan::Balance::Count => false,
            crate::plan::Balance::Load => true,
            crate::plan::Balance::Mixed => odd_id(id),
        }
    }

    fn build_broker(
        &self,
        id: &str,
        store: FaultyStore,
        kinesis: SimKinesis,
        clock: SimClock,
        freeze: &Arc<Freeze>,
        slow_until: &Arc<std::sync::Mutex<Option<Instant>>>,
    ) -> Result<Broker, BrokerError> {
        let builder = Broker::builder()
            .kinesis(kinesis)
            .lease_store(store)
            .owner_id(id)
            .wall_clock(clock);
        // Handlers of up to 15 s: a user with such handlers gives shutdown time to finish them
        // (the default deadline is 10 s), so a graceful leave re-delivers nothing.
        let builder = if self.plan.has(Fault::SlowHandlers) {
            builder.shutdown_deadline(Duration::from_secs(20))
        } else {
            builder
        };
        let mut broker = builder.build()?;
        let start_at = match self.plan.start {
            Start::Latest => StartAt::Latest,
            Start::TrimHorizon => StartAt::TrimHorizon,
            Start::AtTimestamp => StartAt::at_millis(BASE_MS + AT_TIMESTAMP_MS),
        };
        let sub = broker.subscribe(STREAM);
        // The default start is LATEST: leave it unset then, as most users do.
        let sub = if self.plan.start == Start::Latest {
            sub
        } else {
            sub.start_at(start_at)
        };
        let sub = if self.plan.fan_out {
            sub.fan_out("sim")
        } else {
            sub
        };
        let sub = if self.plan.hooks {
            sub.hooks(self.hooks(id))
        } else {
            sub
        };
        let sub = if self.is_quiet(id) {
            sub.quiet_idle_shards()
        } else {
            sub
        };
        let sub = if self.by_load(id) {
            sub.balance_by_load()
        } else {
            sub
        };
        let handler = Handling {
            rec: self.rec.clone(),
            instance: id.to_owned(),
            seed: self.plan.seed,
            faults: self.plan.has(Fault::HandlerFaults),
            slow: self.plan.has(Fault::SlowHandlers),
            heavy: self.plan.balance != crate::plan::Balance::Count,
            freeze: freeze.clone(),
            slow_until: slow_until.clone(),
        };
        match self.plan.mode {
            Mode::Serial => sub.handle(move |d| handler.clone().one(d))?,
            Mode::Workers => sub
                .workers(WORKERS as usize)
                .handle(move |d| handler.clone().one(d))?,
            Mode::ByKey => sub
                .workers(3)
                .by_key()
                .handle(move |d| handler.clone().one(d))?,
            Mode::Batch => sub.batch(10).handle(move |b| handler.clone().batch(b))?,
            Mode::BatchWorkers => sub
                .workers(BATCH_WORKERS as usize)
                .batch(10)
                .handle(move |b| handler.clone().batch(b))?,
        }
        Ok(broker)
    }

    /// Hooks that take their time (0 to 2.5 s, from the seed and the shard) and check two
    /// invariants while they run: the final-checkpoint hook runs while the row still names
    /// this instance (read straight from the table; or the operator's hold, which one evict
    /// puts there without asking while the hook runs), never after this instance was told of
    /// the loss (`on_lost`), and never while the same holding's `on_taken` still runs.
    fn hooks(&self, id: &str) -> Hooks {
        let seed = self.plan.seed;
        let delay = move |shard: &str, salt: u64| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (seed, shard, salt).hash(&mut hasher);
            Duration::from_millis(hasher.finish() % 2_500)
        };
        let taking: Arc<std::sync::Mutex<BTreeSet<String>>> = Arc::default();
        // Shards whose holding this instance was told it lost (`on_lost`), until taken again.
        let lost: Arc<std::sync::Mutex<BTreeSet<String>>> = Arc::default();
        let (rec, owner, running) = (self.rec.clone(), id.to_owned(), taking.clone());
        let (lost_taken, rec_taken) = (lost.clone(), rec.clone());
        let taken = move |shard: ShardInfo| {
            lost_taken
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&shard.shard);
            let running = running.clone();
            running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(shard.shard.clone());
            let wait = delay(&shard.shard, 1);
            let (rec, began) = (rec_taken.clone(), rec_taken.now_ms());
            async move {
                // Removed (and its time recorded) when done or cancelled at the bound.
                struct Done(
                    Arc<std::sync::Mutex<BTreeSet<String>>>,
                    String,
                    Recorder,
                    u64,
                );
                impl Drop for Done {
                    fn drop(&mut self) {
                        self.0
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&self.1);
                        self.2.hook_ran(&self.1, self.3);
                    }
                }
                let _done = Done(running, shard.shard, rec, began);
                sleep(wait).await;
            }
        };
        let table = self.table.clone();
        let (rec_final, owner_final, lost_final) = (rec.clone(), owner.clone(), lost.clone());
        let last = move |shard: ShardInfo, why: Release| {
            for (set, when) in [
                (&taking, "while its on_taken still ran"),
                (&lost_final, "after on_lost"),
            ] {
                if set
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&shard.shard)
                {
                    rec_final.violate(format!(
                        "{owner_final}: final hook of {} ({why:?}) began {when}",
                        shard.shard
                    ));
                }
            }
            let (rec, owner, table) = (rec_final.clone(), owner_final.clone(), table.clone());
            let wait = delay(&shard.shard, 2);
            async move {
                let Ok(key) = LeaseKey::new(&shard.stream, &shard.shard) else {
                    return;
                };
                let store = MemoryLeaseStore::over(&table);
                let before = store.read(&key).await.ok().flatten();
                let began = rec.now_ms();
                sleep(wait).await;
                // Only a shard end's hook holds its children back (their reading waits for
                // its SHARD_END).
                if matches!(why, Release::ShardEnd) {
                    rec.hook_ran(&shard.shard, began);
                }
                let Ok(Some(row)) = store.read(&key).await else {
                    return;
                };
                if row.owner.as_deref() == Some(owner.as_str()) {
                    return;
                }
                // An operator's forced move may take the row from under a running hook (the
                // holder learns it at its next write): the row as the last operator's move of
                // it left it, from under this owner, and held by this owner (or already so
                // moved) when the hook began. Any other owner, or a write since the move (the
                // row taken, and moved again), means the hook outlived the holding. Not a
                // count of writes: the hook's own keeper renews every 3 s while the hook (2.5 s
                // at most) runs, and under a store's delays two of its renewals may land
                // within it (fault seed 78028: counter 18 to 21, two renewals and the move).
                let evicted_under_it = kinesis_broker::lease::rules::is_evicted(&row)
                    && rec.moved_from_under(&shard.shard, &owner, &row)
                    && before.as_ref().is_some_and(|b| {
                        b.owner.as_deref() == Some(owner.as_str())
                            || (kinesis_broker::lease::rules::is_evicted(b)
                                && row.counter == b.counter)
                    });
                if !evicted_under_it {
                    rec.violate(format!(
                        "{owner}: final hook of {} ({why:?}) ran after the row moved to {:?} (counter {:?} -> {}, held by {:?} when it began)",
                        shard.shard,
                        row.owner,
                        before.as_ref().map(|b| b.counter),
                        row.counter,
                        before.as_ref().map(|b| b.owner.clone()),
                    ));
                }
            }
        };
        let (rec_lost, owner_lost) = (rec.clone(), owner.clone());
        Hooks::new()
            .on_taken(taken)
            .before_final_checkpoint(last)
            .on_lost(move |shard: ShardInfo| {
                lost.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(shard.shard.clone());
                rec_lost.note(format!("{owner_lost}: on_lost {}", shard.shard));
                async {}
            })
            .on_ended(move |shard: ShardInfo| {
                rec.note(format!("{owner}: on_ended {}", shard.shard));
                async {}
            })
    }

    fn live(&self) -> Vec<usize> {
        (0..self.instances.len())
            .filter(|i| self.instances[*i].running.is_some())
            .collect()
    }

    fn pick_live(&mut self) -> Option<usize> {
        let live = self.live();
        (!live.is_empty()).then(|| live[self.rng.usize(..live.len())])
    }

    /// One fault or event of the plan's kinds, chosen at random.
    async fn inject(&mut self) {
        let kinds: Vec<Fault> = self.plan.faults.iter().copied().collect();
        let kind = kinds[self.rng.usize(..kinds.len())];
        match kind {
            Fault::StoreDelay | Fault::StoreFail | Fault::LostResponse => {
                if let Some(i) = self.pick_live() {
                    let (delay, fail, lose) = match kind {
                        Fault::StoreDelay => (self.rng.u64(500..=3_000), 0, 0),
                        Fault::StoreFail => (self.rng.u64(0..300), self.rng.u32(100..600), 0),
                        _ => (self.rng.u64(0..300), 0, self.rng.u32(100..600)),
                    };
                    let secs = self.rng.u64(5..=30);
                    let instance = &self.instances[i];
                    instance.faults.set(
                        delay,
                        fail,
                        lose,
                        Instant::now() + Duration::from_secs(secs),
                    );
                    let note = format!(
                        "{}: store faults for {secs} s: delay <= {delay} ms, fail {fail}/1000, lost responses {lose}/1000",
                        instance.id
                    );
                    self.rec.note(note);
                    self.rec.delaying_fault(secs * 1_000);
                    self.count("store faults");
                }
            }
            Fault::CutOff => {
                if let Some(i) = self.pick_live() {
                    let secs = self.rng.u64(3..25);
                    let hang = self.rng.bool();
                    let instance = &self.instances[i];
                    instance
                        .faults
                        .cut(Instant::now() + Duration::from_secs(secs), hang);
                    let note = format!(
                        "{}: cut off the lease table for {secs} s ({})",
                        instance.id,
                        if hang { "calls hang" } else { "calls fail" }
                    );
                    self.rec.note(note);
                    self.rec.delaying_fault(secs * 1_000);
                    self.count("cut off");
                }
            }
            Fault::ClockSkew => {
                // Skew is set per instance at start; start one more with a skewed clock.
                if self.live().len() < MAX_BROKERS {
                    self.start_new(None).await;
                    self.count("skewed start");
                }
            }
            Fault::Crash => {
                if self.live().len() > 1 || self.rng.bool() {
                    if let Some(i) = self.pick_live() {
                        self.crash(i).await;
                    }
                }
            }
            Fault::Start => {
                if self.live().len() < MAX_BROKERS {
                    self.start_new(None).await;
                    self.count("start");
                }
            }
            Fault::ReusedId => {
                if self.live().len() < MAX_BROKERS && !self.retired.is_empty() {
                    let id = self.retired.remove(self.rng.usize(..self.retired.len()));
                    self.rec
                        .note(format!("restarting with retired owner id {id}"));
                    self.start_new(Some(id)).await;
                    self.count("reused id");
                }
            }
            Fault::Twin => {
                if self.live().len() < MAX_BROKERS {
                    if let Some(i) = self.pick_live() {
                        let id = self.instances[i].id.clone();
                        self.rec
                            .note(format!("starting a twin with the live owner id {id}"));
                        self.start_new(Some(id)).await;
                        self.count("twin");
                    }
                }
            }
            Fault::Shutdown => {
                if self.live().len() > 1 || self.rng.bool() {
                    if let Some(i) = self.pick_live() {
                        self.shutdown(i);
                        self.count("shutdown");
                    }
                }
            }
            Fault::Reshard => {
                self.age_out().await;
                self.reshard();
                self.note_parents();
            }
            Fault::ExpireIterators => {
                self.kinesis.expire_iterators();
                self.rec.note("every shard iterator expired");
                self.count("expired iterators");
            }
            Fault::KinesisFaults if self.plan.fan_out && self.rng.bool() => {
                // Fan-out: dropped connections, and refused or throttled subscribes.
                self.kinesis.cut_subscriptions();
                let n = self.rng.u32(1..5);
                if self.rng.bool() {
                    self.kinesis.throttle_next(Op::SubscribeToShard, n);
                } else {
                    self.kinesis.fail_next(Op::SubscribeToShard, n);
                }
                self.rec.note(format!(
                    "Kinesis: every subscription cut; next {n} subscribes throttled or failing"
                ));
                self.kinesis_clear_at = Some(Instant::now() + KINESIS_EPISODE);
                self.rec.delaying_fault(KINESIS_EXCUSE_MS);
                self.count("kinesis faults");
            }
            Fault::KinesisFaults => {
                let op = [Op::GetRecords, Op::ShardIterator, Op::ListShards][self.rng.usize(..3)];
                let n = self.rng.u32(1..8);
                if self.rng.bool() {
                    self.kinesis.throttle_next(op, n);
                } else {
                    self.kinesis.fail_next(op, n);
                }
                self.sim_kinesis.set_latency(self.rng.u64(0..300));
                self.rec.note(format!(
                    "Kinesis: next {n} {op:?} calls throttled or failing (for at most 5 s)"
                ));
                self.kinesis_clear_at = Some(Instant::now() + KINESIS_EPISODE);
                self.rec.delaying_fault(KINESIS_EXCUSE_MS);
                self.count("kinesis faults");
            }
            // Always on in handlers when planned.
            Fault::HandlerFaults | Fault::SlowHandlers => {}
            Fault::Freeze => {
                if let Some(i) = self.pick_live() {
                    let secs = self.rng.u64(5..=25);
                    let jump = self.rng.i64(-3_000..=3_000);
                    let instance = &self.instances[i];
                    let until = Instant::now() + Duration::from_secs(secs);
                    instance.freeze.until(until);
                    let (clock, rec, id) = (
                        instance.clock.clone(),
                        self.rec.clone(),
                        instance.id.clone(),
                    );
                    tokio::spawn(async move {
                        tokio::time::sleep_until(until).await;
                        clock.jump(jump);
                        rec.note(format!("{id} resumes; its clock jumps {jump} ms"));
                    });
                    self.rec
                        .note(format!("{id} frozen for {secs} s", id = instance.id));
                    self.rec.delaying_fault(secs * 1_000);
                    self.count("freeze");
                }
            }
            Fault::WatcherLeaves => self.watcher_leaves().await,
            Fault::CrashRestart => {
                if self.live().len() < MAX_BROKERS {
                    if let Some(i) = self.pick_live() {
                        let id = self.instances[i].id.clone();
                        self.crash(i).await;
                        self.rec.note(format!(
                            "restarting {id} at once while a new instance joins"
                        ));
                        self.start_new(None).await;
                        self.retired.retain(|r| *r != id);
                        self.start_new(Some(id)).await;
                        self.count("crash restart");
                    }
                }
            }
            Fault::Deregister => self.deregister().await,
            Fault::OperatorMove => self.operator_move().await,
            Fault::JoinBeforeCrashed => self.join_before_crashed().await,
            Fault::UnannouncedJoin => self.unannounced_join().await,
            // Set on every store from the start (see `start_new`).
            Fault::EpochFaults => {}
        }
        if self.live().is_empty() {
            self.start_new(None).await;
        }
    }

    /// Fan-out seeds: the consumer is deregistered; the readers must register it again and
    /// read on, ending no shard early.
    async fn deregister(&mut self) {
        if !self.plan.fan_out {
            return;
        }
        let secs = self.rng.u64(1..=10);
        let deletion = kinesis_broker::testing::ConsumerDeletion::For(Duration::from_secs(secs));
        // Refused before the first registration, or while the consumer is DELETING already.
        if self
            .kinesis
            .deregister_consumer_for(STREAM, "sim", deletion)
            .is_ok()
        {
            self.rec.note(format!(
                "the fan-out consumer was deregistered (DELETING for {secs} s, then gone)"
            ));
            // Readers wait for the deletion, register again (describing every 0.2 to 5 s until
            // it is gone, then until the new one is ACTIVE), and subscribe under the new ARN.
            self.rec.delaying_fault(secs * 1_000 + DEREGISTER_EXCUSE_MS);
            self.count("deregistered consumer");
        }
    }

    /// Closed shards read to their end age out of the stream, as retention trims them (some
    /// now, some at a later reshard): their rows may then be deleted.
    async fn age_out(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(STREAM).await else {
            return;
        };
        let finished: BTreeSet<String> = rows
            .iter()
            .filter(|r| r.is_finished())
            .map(|r| r.key.shard().to_owned())
            .collect();
        for shard in self.kinesis.shards(STREAM).unwrap_or_default() {
            if shard.ending_sequence.is_some()
                && finished.contains(&shard.id)
                && self.rng.bool()
                && self.kinesis.trim_shard(STREAM, &shard.id).is_ok()
            {
                self.rec
                    .note(format!("{} aged out of the stream", shard.id));
                self.count("aged out");
            }
        }
    }

    fn reshard(&mut self) {
        let open = self.open_shards();
        if open.len() < MAX_OPEN_SHARDS && (open.len() < 2 || self.rng.bool()) {
            let shard = open[self.rng.usize(..open.len())].clone();
            if self.kinesis.split_evenly(STREAM, &shard).is_ok() {
                self.rec.note(format!("split {shard}"));
                self.count("split");
            }
            return;
        }
        let shards = self.kinesis.shards(STREAM).unwrap_or_default();
        let mut open: Vec<_> = shards
            .into_iter()
            .filter(|s| s.ending_sequence.is_none())
            .collect();
        open.sort_by_key(|s| s.hash_range.0);
        if open.len() >= 2 {
            let i = self.rng.usize(..open.len() - 1);
            let (a, b) = (open[i].id.clone(), open[i + 1].id.clone());
            if self.kinesis.merge_shards(STREAM, &a, &b).is_ok() {
                self.rec.note(format!("merged {a} + {b}"));
                self.count("merge");
            }
        }
    }

    fn shutdown(&mut self, i: usize) {
        let instance = &mut self.instances[i];
        let Some(running) = instance.running.take() else {
            return;
        };
        let id = instance.id.clone();
        // What it holds now: these wait for its drain before anyone may take them.
        let held: Vec<String> = running
            .stats()
            .shards(STREAM)
            .iter()
            .map(|s| s.shard.clone())
            .collect();
        // The drain's name: the id and which shutdown of the run this is (a reused id may
        // drain twice at once).
        let drain = format!("{id}#{}", self.retired.len());
        for shard in &held {
            self.rec.draining(shard, &drain);
        }
        self.rec
            .note(format!("{id} shutting down gracefully (holds {held:?})"));
        let (rec, ids, unburied) = (self.rec.clone(), self.ids.clone(), self.unburied.clone());
        self.retired.push(id.clone());
        self.shutdowns.push(tokio::spawn(async move {
            let report = running.shutdown().await;
            rec.note(format!(
                "{id} shut down (handlers finished: {})",
                report.handlers_finished
            ));
            // With a crashed member not buried yet, the rows may wait for its burial (its
            // watcher may be the only live instance, or a restart waiting out its old row).
            let quick = !unburied.load(Ordering::SeqCst);
            for shard in &held {
                rec.left(shard, &drain, quick);
            }
            let mut ids = ids.lock().unwrap_or_else(|p| p.into_inner());
            let life = ids.entry(id).or_default();
            life.live = life.live.saturating_sub(1);
            life.departed_ms = Some(rec.now_ms());
        }));
    }

    /// The token of `id`'s member row now, if it has one.
    async fn member_token(&self, id: &str) -> Option<String> {
        let key = LeaseKey::new(format!("{STREAM}@members"), id).ok()?;
        let store = MemoryLeaseStore::over(&self.table);
        store
            .read(&key)
            .await
            .ok()
            .flatten()
            .and_then(|row| row.token)
    }

    /// Whether a running instance has joined the roster: its id's member row is its own under
    /// a token other than the one the row carried before it started.
    async fn any_joined(&self) -> bool {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(&format!("{STREAM}@members")).await else {
            return true;
        };
        self.instances
            .iter()
            .filter(|i| i.running.is_some())
            .any(|i| {
                rows.iter().any(|r| {
                    r.key.shard() == i.id
                        && r.owner.as_deref() == Some(i.id.as_str())
                        && r.token.is_some()
                        && r.token != i.start_token
                })
            })
    }

    /// Drops an instance's broker: no clean-up.
    async fn crash(&mut self, i: usize) {
        let store = MemoryLeaseStore::over(&self.table);
        let token = match LeaseKey::new(format!("{STREAM}@members"), &self.instances[i].id) {
            Ok(key) => store
                .read(&key)
                .await
                .ok()
                .flatten()
                .and_then(|row| row.token),
            Err(_) => None,
        };
        let instance = &mut self.instances[i];
        let shards: Vec<String> = instance.running.as_ref().map_or_else(Vec::new, |r| {
            r.stats()
                .shards(STREAM)
                .iter()
                .map(|s| s.shard.clone())
                .collect()
        });
        drop(instance.running.take());
        let id = instance.id.clone();
        let now = self.rec.now_ms();
        if self.id_life(&id).live <= 1 {
            // A join (or a join again, after it was found dead) whose roster bump had not
            // landed when it crashed: its member row is present, but nobody was told of it,
            // and it took nothing (an instance takes only once its join's bump landed). It is
            // watched from the next roster change on, as an unannounced join is (`announce`).
            // Seed 72129: found dead while cut off, joined again and crashed at once, buried
            // 23 s later at the next roster listing.
            let announced = self
                .joins
                .get(&id)
                .is_some_and(|(seen, since)| *seen == token && *since <= self.roster_moved_ms);
            // Only one that holds nothing and that no row names (a take whose answer was still
            // on its way, a row handed to it): one that holds a shard was announced, or broke
            // the rule, and its shards' clocks must not wait for the next roster change. A join
            // whose bump landed within the last sample interval counts as unannounced until the
            // next sample sees the bump: its burial clock starts up to 250 ms late.
            let named = store.list(STREAM).await.map_or(true, |rows| {
                rows.iter().any(|r| r.owner.as_deref() == Some(&id))
            });
            let holds_nothing = shards.is_empty()
                && !named
                && self.orphans.get(&id).is_none_or(|o| o.shards.is_empty());
            if token.is_some()
                && !announced
                && holds_nothing
                && self.unannounced_ids.insert(id.clone())
            {
                self.rec.note(format!(
                    "{id} crashes before its join was announced (no roster bump since its member row was taken): watched from the next roster change"
                ));
            }
            // A restart that crashes before it joined leaves the earlier run's row and shards
            // unresolved: they stay this orphan's.
            let orphan = self.orphans.entry(id.clone()).or_insert(Orphan {
                shards: Vec::new(),
                watcher: None,
                since_ms: now,
                token,
                joined_ms: None,
            });
            orphan.since_ms = now;
            for shard in shards {
                if !orphan.shards.contains(&shard) {
                    orphan.shards.push(shard);
                }
            }
            self.unburied.store(true, Ordering::SeqCst);
            // A member the survivors count until it is buried: see `Liveness::member_crashed`.
            self.rec.member_crashed();
        } else {
            // A twin runs on with the id: nobody buries it (the twin renews the member row),
            // but its rows' leases lapse and the twin takes its own id's rows back; the crash
            // clock runs from now (not the leave bound of a hand-over seen at this sample).
            for shard in &shards {
                self.rec.hold_back(shard, now);
            }
        }
        self.rec
            .note(format!("{id} crashed (dropped, no clean-up)"));
        let now = self.rec.now_ms();
        self.with_id(&id, |l| {
            l.live = l.live.saturating_sub(1);
            l.departed_ms = Some(now);
            l.crashed_ms = Some(now);
        });
        self.retired.push(id);
        self.count("crash");
    }

    /// The instance watching another in the roster (the one before it in id order) shuts
    /// down, its handlers slow (1 to 9 s each), while the one it watches crashes.
    async fn watcher_leaves(&mut self) {
        let mut live: Vec<(String, usize)> = self
            .live()
            .into_iter()
            .map(|i| (self.instances[i].id.clone(), i))
            .collect();
        if live.len() < 3 {
            return;
        }
        live.sort();
        let k = self.rng.usize(..live.len());
        let (watched, watcher) = (live[k].1, live[(k + live.len() - 1) % live.len()].1);
        *self.instances[watcher]
            .slow_until
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + Duration::from_secs(10));
        self.rec.note(format!(
            "{} (watching {}) shuts down with slow handlers while {} crashes",
            self.instances[watcher].id, self.instances[watched].id, self.instances[watched].id
        ));
        self.shutdown(watcher);
        self.crash(watched).await;
        self.count("watcher leaves");
    }

    /// An instance crashes; 5 to 9 s later (before its watcher can bury it) a new instance
    /// joins whose owner id sorts just after the watcher's, so just before the crashed one's in
    /// the ring: the newcomer watches the crashed member from its join on.
    async fn join_before_crashed(&mut self) {
        if self.join_before.is_some() || self.live().len() >= MAX_BROKERS {
            return;
        }
        let mut live: Vec<(String, usize)> = self
            .live()
            .into_iter()
            .map(|i| (self.instances[i].id.clone(), i))
            .collect();
        if live.len() < 2 {
            return;
        }
        live.sort();
        // A member holding shards (a crash of one holding none tests nothing here).
        let holding: Vec<usize> = (0..live.len())
            .filter(|k| {
                self.instances[live[*k].1]
                    .running
                    .as_ref()
                    .is_some_and(|r| !r.stats().shards(STREAM).is_empty())
            })
            .collect();
        if holding.is_empty() {
            return;
        }
        let k = holding[self.rng.usize(..holding.len())];
        let (crashed, watcher) = (live[k].1, live[(k + live.len() - 1) % live.len()].0.clone());
        let secs = self.rng.u64(5..=9);
        self.rec.note(format!(
            "{} crashes; in {secs} s an instance joins between its watcher {watcher} and it",
            self.instances[crashed].id
        ));
        self.crash(crashed).await;
        // Sorts after the watcher's id and before the crashed one's (ids are `b<n>`, and `!`
        // sorts before every digit); numbered, so never an id used before.
        self.next_id += 1;
        self.join_before = Some((
            Instant::now() + Duration::from_secs(secs),
            format!("{watcher}!{}", self.next_id),
        ));
        self.count("join before a crashed one");
    }

    /// A new instance joins while every roster bump of its store fails, and crashes 4 to 12 s
    /// later, before any bump landed: it must have taken nothing (nobody watches it).
    async fn unannounced_join(&mut self) {
        if self.unannounced.is_some() || self.live().len() >= MAX_BROKERS {
            return;
        }
        self.next_unannounced = Some(Duration::from_secs(60));
        self.unannounced_ids
            .insert(format!("b{}", self.next_id + 1));
        self.start_new(None).await;
        let id = format!("b{}", self.next_id);
        let secs = self.rng.u64(4..=12);
        self.rec.note(format!(
            "{id} joins with every roster bump failing, and crashes in {secs} s"
        ));
        self.unannounced = Some((Instant::now() + Duration::from_secs(secs), id));
        // While it lives it cannot take: should every other instance leave
        // meanwhile, the shards wait for it to crash and another to start.
        self.rec.delaying_fault(secs * 1_000);
        self.count("unannounced join");
    }

    /// Faults stop: connections heal, no more events; at least one broker runs.
    async fn calm_down(&mut self) {
        self.faults_on = false;
        for instance in &self.instances {
            instance.faults.heal();
        }
        // The live ones' bumps land from now on: watched as any member. Crashed ones stay
        // unknown until the next roster change (a join or a leave) shows their rows.
        let live: BTreeSet<String> = self
            .live()
            .into_iter()
            .map(|i| self.instances[i].id.clone())
            .collect();
        self.unannounced_ids.retain(|id| !live.contains(id));
        // Its crash is called off: announced from its next renewal, it may take like any.
        self.unannounced = None;
        self.sim_kinesis.set_latency(0);
        self.kinesis.clear_faults();
        self.rec.note("faults stop");
        if self.live().is_empty() {
            self.start_new(None).await;
        }
    }

    /// Samples the table and the brokers: row invariants, held shards, window bounds and
    /// failed subscriptions.
    async fn monitor(&mut self) {
        self.sample().await;
        if self.live().is_empty() && !self.faults_on {
            self.start_new(None).await;
        }
    }

    /// One sample of the checkers (also while a start runs: see `starting`).
    async fn sample(&mut self) {
        self.announce().await;
        self.monitor_rows().await;
        self.monitor_members().await;
        self.monitor_holds().await;
        let mut failed = Vec::new();
        // Shards a running instance held at the last sample and holds no more.
        let mut dropped: Vec<(String, String)> = Vec::new();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            let Some(running) = &instance.running else {
                continue;
            };
            let stats = running.stats();
            let held: BTreeSet<String> = stats
                .shards(STREAM)
                .iter()
                .map(|s| s.shard.clone())
                .collect();
            for shard in stats.shards(STREAM) {
                if shard.window > MAX_UNSETTLED {
                    self.rec.violate(format!(
                        "{}: settlement window of {} holds {} entries (bound {MAX_UNSETTLED})",
                        instance.id, shard.shard, shard.window
                    ));
                }
            }
            if !held.is_empty() && self.unannounced_ids.contains(&instance.id) {
                self.rec.violate_once(
                    &format!("unannounced {}", instance.id),
                    format!(
                        "{} holds {held:?} though no roster bump of its join landed: nobody watches it",
                        instance.id
                    ),
                );
            }
            let handing: BTreeSet<String> = stats
                .shards(STREAM)
                .iter()
                .filter(|s| s.handing_to.is_some())
                .map(|s| s.shard.clone())
                .collect();
            dropped.extend(
                instance
                    .held
                    .difference(&held)
                    .map(|shard| (instance.id.clone(), shard.clone())),
            );
            if held != instance.held {
                self.rec.note(format!("{} holds {:?}", instance.id, held));
                instance.held = held;
            }
            if handing != instance.handing {
                self.rec
                    .note(format!("{} hands over {:?}", instance.id, handing));
                instance.handing = handing;
            }
            let probe = futures_now(running.failed());
            if let Some(error) = probe {
                failed.push((i, error));
            }
        }
        for (i, error) in failed {
            let id = self.instances[i].id.clone();
            let why = format!(
                "{error}: {:?}",
                std::error::Error::source(&error).map(ToString::to_string)
            );
            // Only an owner id live twice (a twin: another process with it running or shutting
            // down) may fail a subscription here; never a restart after a crash.
            // The evidence (the other's renewals) may surface a little after the other ended.
            let life = self.id_life(&id);
            let now = self.rec.now_ms();
            let twin = life.live > 1
                || life
                    .departed_ms
                    .is_some_and(|d| now.saturating_sub(d) <= TWIN_EVIDENCE_MS);
            if !twin || !why.contains("live in another process") {
                self.rec.violate(format!(
                    "{id}: subscription failed unexpectedly (processes with the id: {}): {why}",
                    self.id_life(&id).live
                ));
            } else {
                self.rec.note(format!("{id}: subscription failed: {why}"));
            }
            self.shutdown(i);
        }
        // One a running instance let go to another running instance was handed over, now:
        // the leave bound counts from here, not only from the sample at which its taker shows
        // it (seed 363: a giver whose 12-s handler held its lanes until the hand-over, the
        // shard was judged meanwhile from the leave before it, 11.1 s). Handed: the row names
        // the other, not taken yet (no token), or the one it was marked wanted by at the last
        // sample. A row whose lease was lost names its old holder until taken, then under a
        // token, and was marked wanted by nobody; an operator's evict names the hold.
        let store = MemoryLeaseStore::over(&self.table);
        let running = |id: &str| {
            self.instances
                .iter()
                .any(|i| i.id == id && i.running.is_some())
        };
        // A taker whose id a process left (crashed or ended) within a lease may be the one that
        // asked and crashed, the row waiting for its burial or for a restart with its id (seed
        // 14666: handed 41 ms after its asker crashed, a restart with the id refused): such a
        // move counts from its taker's first sight, as before.
        let now_ms = self.rec.now_ms();
        let settled = |id: &str| {
            self.ids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .and_then(|l| l.departed_ms)
                .is_none_or(|d| now_ms.saturating_sub(d) > LEASE_MS)
        };
        for (id, shard) in dropped {
            let Ok(key) = LeaseKey::new(STREAM, &shard) else {
                continue;
            };
            let handed = match store.read(&key).await {
                Ok(Some(row)) => row.owner.as_deref().is_some_and(|owner| {
                    owner != id
                        && running(owner)
                        && settled(owner)
                        && (row.token.is_none()
                            || self.wanted_by.get(&shard).is_some_and(|w| w == owner))
                }),
                _ => false,
            };
            if handed && running(&id) {
                self.stats.hand_overs += 1;
                self.rec.handed_over(&shard);
            }
        }
        self.check_one_reader();
        let holders: BTreeMap<String, String> = self
            .instances
            .iter()
            .filter(|i| i.running.is_some())
            .flat_map(|i| i.held.iter().map(|s| (s.clone(), i.id.clone())))
            .collect();
        // A shard that moved from one running instance to another was handed over: the leave
        // bound counts from the move (what was routed before it settled meanwhile).
        for (shard, holder) in &holders {
            let previous = self.last_holders.get(shard);
            let handed = previous.is_some_and(|p| {
                p != holder
                    && self
                        .instances
                        .iter()
                        .any(|i| i.id == *p && i.running.is_some())
            });
            if handed {
                self.rec.handed_over(shard);
            }
        }
        // Kept while a shard is between holders (released, not taken yet).
        for (shard, holder) in &holders {
            self.last_holders.insert(shard.clone(), holder.clone());
        }
        if self.live().is_empty() || !self.any_joined().await {
            // Nobody runs (every start refused), or every instance that runs still waits to
            // join the roster (a twin's start waits for its id's member row to stand still for
            // a lease once the other process left; seed 97588: the last member left while the
            // only other instance, a twin, waited, and its shards waited 7.6 s against the
            // leave bound's 7.5): no bound can hold meanwhile.
            self.rec.delaying_fault(250);
        }
        for stall in self
            .rec
            .stalls(self.stall_bound, self.leave_bound, &holders)
        {
            self.rec.violate(format!(
                "{} made no progress for {:.1} s (fault time excluded; bound {:.1} s{}) with records unhandled, since {:.3} s",
                stall.shard,
                stall.stalled as f64 / 1000.0,
                stall.bound as f64 / 1000.0,
                if stall.after_leave { ", after its holder's graceful leave" } else { "" },
                stall.since as f64 / 1000.0
            ));
        }
    }

    /// A roster bump landed since the last sample: every instance lists the roster, so member
    /// rows nobody was told of are known from now on. Every unannounced id but the running one
    /// whose bumps fail is announced, and a crashed one's burial clock starts now (the bump
    /// landed within the last sample interval: up to that much slack).
    async fn announce(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(epoch) = store.epoch(&format!("{STREAM}@members")).await else {
            return;
        };
        if epoch == self.roster_epoch {
            return;
        }
        self.roster_epoch = epoch;
        self.roster_moved_ms = self.rec.now_ms();
        // A running instance whose own bumps fail stays unannounced: it may not take.
        let muted: BTreeSet<&str> = self
            .instances
            .iter()
            .filter(|i| i.running.is_some() && i.faults.roster_bumps_fail())
            .map(|i| i.id.as_str())
            .collect();
        let now = self.rec.now_ms();
        let announced: Vec<String> = self
            .unannounced_ids
            .iter()
            .filter(|id| !muted.contains(id.as_str()))
            .cloned()
            .collect();
        for id in announced {
            self.unannounced_ids.remove(&id);
            self.announced_at.insert(id.clone(), now);
            if let Some(orphan) = self.orphans.get_mut(&id) {
                orphan.since_ms = orphan.since_ms.max(now);
                // Nobody knew of it before: no watcher was counting it (a former successor's
                // count goes on only for a member its watcher once watched), so the watcher
                // is the one the ring gives from now on (seed 13518: a member that joined
                // just before it in the same roster move watched it, and crashed).
                orphan.watcher = None;
            }
        }
    }

    /// The roster's rows: never more than the live instances plus those departed within the
    /// janitor's delay; a crashed member is buried (its row no longer present) within the
    /// crash-takeover bound, fault time excluded, unless a process with its id runs again.
    async fn monitor_members(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(&format!("{STREAM}@members")).await else {
            return;
        };
        let now = self.rec.now_ms();
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // Since when each member row stopped being its member's own (a leave, a burial).
        let is_own = |r: &kinesis_broker::lease::Lease| {
            r.owner.as_deref() == Some(r.key.shard()) && r.token.is_some()
        };
        self.unpresent_since
            .retain(|id, _| rows.iter().any(|r| r.key.shard() == id && !is_own(r)));
        for row in rows.iter().filter(|r| !is_own(r)) {
            self.unpresent_since
                .entry(row.key.shard().to_owned())
                .or_insert(now);
        }
        self.present_since.retain(|id, (token, _)| {
            rows.iter()
                .any(|r| r.key.shard() == id && is_own(r) && r.token == *token)
        });
        for row in rows.iter().filter(|r| is_own(r)) {
            self.present_since
                .entry(row.key.shard().to_owned())
                .or_insert((row.token.clone(), now));
        }
        // The janitor (the first live member by id) counts a departed row's ten leases from its
        // own first sight of it: a janitor younger than the grace may keep every departed row.
        // (Every member notes departed rows as it lists the roster, janitor or not, so one that
        // takes office later deletes on the schedule of its own first sight.) Its age counts
        // from its join (its member row seen its own under its token), not its process's
        // start: a janitor restarted, then cut off and frozen before it joined, first sees the
        // rows that much later (seed 23740: a lone member restarted at 71 s, cut off for 3 s
        // and frozen for 11 s, joined at 94 s and deleted the departed rows at 194 s, its ten
        // leases to the second). One not joined yet counts from its start, as before.
        let janitor_young = ids.iter().find(|(_, l)| l.live > 0).is_some_and(|(id, l)| {
            let since = self
                .present_since
                .get(id)
                .map_or(l.started_ms, |(_, since)| *since);
            now.saturating_sub(since) <= MEMBER_ROW_GRACE_MS
        });
        let allowed = ids
            .iter()
            .filter(|(id, _)| !self.unannounced_ids.contains(*id))
            .filter(|(id, l)| {
                l.live > 0
                    || janitor_young
                    || l.departed_ms.is_some_and(|d| {
                        // An id nobody knew of counts from the roster bump that announced it:
                        // no janitor could see its row before (seed 4213: two crashed
                        // unannounced members announced by the leaves at the end of the run,
                        // 116 and 132 s after their crashes).
                        let d = d.max(self.announced_at.get(*id).copied().unwrap_or(0));
                        // Once buried, the janitor's ten leases count from the burial (seed
                        // 228034: a run of five crashed members, two of them never announced,
                        // the last buried 30 s after its crash and deleted 100 s after the
                        // burial). A crashed member's row still its own counts from the
                        // departure, as a backstop to the burial bound (above), whose clock
                        // starts again with each new watcher.
                        let d = d.max(self.unpresent_since.get(*id).copied().unwrap_or(0));
                        // Faults delay the burial and the janitor's reads: fault time is excused.
                        now.saturating_sub(d)
                            .saturating_sub(self.rec.excused(d, now))
                            <= MEMBER_ROW_GRACE_MS
                    })
            })
            .count();
        // Who watches each crashed member: the present member before it in id order.
        let present: BTreeSet<&str> = rows
            .iter()
            .filter(|r| r.owner.as_deref() == Some(r.key.shard()) && r.token.is_some())
            .map(|r| r.key.shard())
            .collect();
        // Buried (not present), or taken by a restarted process with the id (a new token): its
        // shards may be taken from now on.
        let rec = self.rec.clone();
        self.orphans.retain(|id, orphan| {
            let unresolved = rows.iter().any(|r| {
                r.key.shard() == id
                    && r.owner.as_deref() == Some(id.as_str())
                    && r.token.is_some()
                    && r.token == orphan.token
            });
            if !unresolved {
                for shard in &orphan.shards {
                    rec.hold_back(shard, now);
                }
            }
            unresolved
        });
        // A graceful leave that could not release (cut off from the table) leaves its rows as
        // a crash does: an id no process runs whose member row is still present is an orphan.
        for row in &rows {
            let id = row.key.shard();
            let gone = ids.get(id).is_some_and(|l| l.live == 0);
            if gone && present.contains(id) && !self.orphans.contains_key(id) {
                self.orphans.insert(
                    id.to_owned(),
                    Orphan {
                        shards: Vec::new(),
                        watcher: None,
                        since_ms: now,
                        token: row.token.clone(),
                        joined_ms: None,
                    },
                );
            }
        }
        let crashed: BTreeSet<String> = self.orphans.keys().cloned().collect();
        self.unburied.store(!crashed.is_empty(), Ordering::SeqCst);
        // Rows handed to a member that crashed after it asked for them wait for its burial too.
        if !crashed.is_empty() {
            let shard_rows = store.list(STREAM).await.unwrap_or_default();
            for row in &shard_rows {
                let Some(owner) = row.owner.as_deref() else {
                    continue;
                };
                if let Some(orphan) = self.orphans.get_mut(owner) {
                    let shard = row.key.shard().to_owned();
                    if !orphan.shards.contains(&shard) {
                        orphan.shards.push(shard);
                    }
                }
            }
        }
        for (id, orphan) in &mut self.orphans {
            let before = present.iter().rfind(|w| **w < id.as_str());
            let watcher = before
                .or_else(|| present.iter().next_back().filter(|w| **w != id.as_str()))
                .map(|w| {
                    let token = rows
                        .iter()
                        .find(|r| r.key.shard() == *w)
                        .and_then(|r| r.token.clone());
                    let started = ids.get(*w).map_or(0, |l| l.started_ms);
                    ((*w).to_owned(), token, !crashed.contains(*w), started)
                });
            // The clock runs only while a live process watches it, from when that one began. A
            // watcher whose successor changed because a member joined between goes on counting
            // on its own (`ring_watch`: former successors), so while that same process is
            // still a live member the clock goes on too.
            let alive = watcher.as_ref().is_some_and(|(_, _, alive, _)| *alive);
            let still_counting =
                orphan
                    .watcher
                    .as_ref()
                    .is_some_and(|(w, token, was_alive, started)| {
                        *was_alive
                            && !crashed.contains(w)
                            && ids.get(w).is_some_and(|l| l.started_ms == *started)
                            && present.contains(w.as_str())
                            && rows
                                .iter()
                                .find(|r| r.key.shard() == w.as_str())
                                .and_then(|r| r.token.clone())
                                == *token
                    });
            if orphan.watcher == watcher || !still_counting {
                // No change pending (or the former watcher stopped counting): a later join
                // starts its own window.
                orphan.joined_ms = None;
            }
            if still_counting && orphan.watcher != watcher {
                // The former watcher counts on its own for a lease and a list interval after
                // the change; past that, the newcomer is the watcher, on the same clock, unless
                // it crashed: then its own watcher buries it first, and the clock starts again
                // (below). (Seed 1542: the former watcher's count ended a moment before its
                // verdict, the newcomer crashed a moment before its own.)
                let joined = *orphan.joined_ms.get_or_insert(now);
                if now < joined + FORMER_WATCH_MS {
                    continue_with_old(orphan, &self.rec);
                    continue;
                }
                orphan.joined_ms = None;
                orphan.watcher = watcher.clone();
            }
            if !alive || (orphan.watcher.is_some() && orphan.watcher != watcher) {
                orphan.since_ms = now;
            }
            if orphan.watcher != watcher {
                orphan.joined_ms = None;
            }
            orphan.watcher = watcher;
            for shard in &orphan.shards {
                self.rec.hold_back(shard, orphan.since_ms);
            }
        }
        let counted = rows
            .iter()
            .filter(|r| !self.unannounced_ids.contains(r.key.shard()))
            .count();
        if counted > allowed {
            self.rec.violate(format!(
                "{} member rows, but only {allowed} instances live or departed within {} s: {:?}",
                counted,
                MEMBER_ROW_GRACE_MS / 1000,
                rows.iter().map(|r| r.key.shard()).collect::<Vec<_>>()
            ));
        }
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|r| !self.unannounced_ids.contains(r.key.shard()))
            .collect();
        for row in &rows {
            let id = row.key.shard();
            let present = row.owner.as_deref() == Some(id) && row.token.is_some();
            let Some(life) = ids.get(id) else { continue };
            let crashed = self.orphans.get(id).map(|o| o.since_ms);
            if let (true, Some(crashed)) = (present, crashed) {
                let _ = life;
                let stalled = now
                    .saturating_sub(crashed)
                    .saturating_sub(self.rec.excused(crashed, now));
                if stalled > BURY_BOUND {
                    self.rec.violate_once(
                        &format!("bury {id} {crashed}"),
                        format!(
                            "member {id} crashed (or its watcher changed) at {:.3} s and its row is still present {:.1} s later (fault time excluded; bound {} s)",
                            crashed as f64 / 1000.0,
                            stalled as f64 / 1000.0,
                            BURY_BOUND / 1000
                        ),
                    );
                }
            }
        }
    }

    async fn monitor_rows(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        if let Ok(rows) = store.list(STREAM).await {
            self.rec.check_rows(&rows);
            self.wanted_by = rows
                .iter()
                .filter_map(|r| Some((r.key.shard().to_owned(), r.wanted_by.clone()?)))
                .collect();
        }
    }

    /// Shards of the stream that may be read (not finished, every parent finished or gone)
    /// and are not held by a running broker, row or no row.
    async fn unheld_shards(&self) -> Vec<String> {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(STREAM).await else {
            return vec!["(list failed)".into()];
        };
        let shards = self.kinesis.shards(STREAM).unwrap_or_default();
        let listed: BTreeSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        let finished: BTreeSet<&str> = rows
            .iter()
            .filter(|r| r.is_finished())
            .map(|r| r.key.shard())
            .collect();
        let held: BTreeSet<&str> = self
            .instances
            .iter()
            .filter(|i| i.running.is_some())
            .flat_map(|i| i.held.iter().map(String::as_str))
            .collect();
        shards
            .iter()
            .filter(|s| !finished.contains(s.id.as_str()))
            .filter(|s| {
                s.parents()
                    .iter()
                    .all(|p| finished.contains(p.as_str()) || !listed.contains(p.as_str()))
            })
            .filter(|s| !held.contains(s.id.as_str()))
            .map(|s| s.id.clone())
            .collect()
    }

    async fn every_shard_held(&self) -> bool {
        self.unheld_shards().await.is_empty()
    }

    async fn shutdown_all(&mut self) {
        for i in self.live() {
            self.shutdown(i);
        }
        for task in std::mem::take(&mut self.shutdowns) {
            let _ = task.await;
        }
        let stats_faults: u64 = 0;
        self.stats.store_faults += stats_faults;
    }
}

/// Polls a future once: its output if it is ready now.
fn futures_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

/// The handlers: record entry and exit, take a random time, and (when planned) fail or panic
/// at most twice per record, decided by the seed.
/// Whether the bytes of owner id `id` sum to an odd number: the half of the instances that a
/// mixed setting (quiet idle shards, balancing by load) sets apart, the same for an id reused
/// after a crash.
fn odd_id(id: &str) -> bool {
    id.bytes().map(u32::from).sum::<u32>() % 2 == 1
}

#[derive(Clone)]
struct Handling {
    rec: Recorder,
    instance: String,
    seed: u64,
    faults: bool,
    /// One attempt in 1,000 takes 1 to 15 s (planned `SlowHandlers`).
    slow: bool,
    /// A third of the shards (by a hash of the id) cost five times as much (balanced by
    /// load).
    heavy: bool,
    freeze: Arc<Freeze>,
    /// Every attempt takes 1 to 9 s until then (a slow drain).
    slow_until: Arc<std::sync::Mutex<Option<Instant>>>,
}

#[derive(Debug)]
struct SimFailure;

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("simulated handler failure")
    }
}

impl std::error::Error for SimFailure {}

enum Verdict {
    Ok,
    Fail,
    Panic,
}

impl Handling {
    fn decide(
        &self,
        shard: &str,
        sequence: &kinesis_broker::SequenceNumber,
        attempt: u32,
    ) -> (Duration, Verdict) {
        let mut h: u64 = self.seed ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for b in shard.bytes().chain(sequence.to_string().bytes()) {
            h = h.rotate_left(5) ^ u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        let mut rng = fastrand::Rng::with_seed(h);
        let mut latency = Duration::from_millis(rng.u64(0..100));
        if self.heavy && shard.bytes().map(u32::from).sum::<u32>() % 3 == 0 {
            latency *= 5;
        }
        if self.slow && rng.u16(..1000) == 0 {
            latency = Duration::from_millis(rng.u64(SLOW_HANDLER_MS));
        }
        let draining = *self.slow_until.lock().unwrap_or_else(|p| p.into_inner());
        if draining.is_some_and(|until| Instant::now() < until) {
            latency = latency.max(Duration::from_millis(rng.u64(1_000..9_000)));
        }
        let verdict = if !self.faults || attempt > 2 {
            Verdict::Ok
        } else {
            match rng.u8(..100) {
                0..=4 => Verdict::Fail,
                5..=6 => Verdict::Panic,
                _ => Verdict::Ok,
            }
        };
        (latency, verdict)
    }

    async fn one(self, d: Delivery) -> Result<(), SimFailure> {
        // A frozen instance starts no handler until it resumes.
        self.freeze.wait().await;
        let (attempt, mut running) = self.rec.enter(&self.instance, d.shard(), d.sequence());
        let (latency, verdict) = self.decide(d.shard(), d.sequence(), attempt);
        if latency >= Duration::from_secs(1) {
            running.slow();
        }
        let debug = std::env::var_os("SIM_DEBUG").is_some();
        if debug {
            self.rec.note(format!(
                "{} enter {} {} attempt {attempt} latency {latency:?}",
                self.instance,
                d.shard(),
                d.sequence()
            ));
        }
        sleep(latency).await;
        self.freeze.wait().await;
        if debug {
            self.rec.note(format!(
                "{} slept {} {}",
                self.instance,
                d.shard(),
                d.sequence()
            ));
        }
        match verdict {
            Verdict::Ok => {
                self.rec.completed(&self.instance, d.shard(), d.sequence());
                Ok(())
            }
            Verdict::Fail => Err(SimFailure),
            Verdict::Panic => panic!("simulated handler panic"),
        }
    }

    async fn batch(self, batch: Vec<Delivery>) -> Result<(), BatchFailure> {
        self.freeze.wait().await;
        let mut guards = Vec::new();
        let mut slowest = Duration::ZERO;
        let mut verdict = Verdict::Ok;
        for d in &batch {
            let (attempt, guard) = self.rec.enter(&self.instance, d.shard(), d.sequence());
            guards.push(guard);
            let (latency, v) = self.decide(d.shard(), d.sequence(), attempt);
            slowest = slowest.max(latency);
            match v {
                Verdict::Ok => {}
                other => verdict = other,
            }
        }
        if slowest >= Duration::from_secs(1) {
            // One slow unit: the batch holds one loop.
            if let Some(guard) = guards.first_mut() {
                guard.slow();
            }
        }
        if std::env::var_os("SIM_DEBUG").is_some() {
            let records: Vec<String> = batch
                .iter()
                .map(|d| format!("{} {}", d.shard(), d.sequence()))
                .collect();
            self.rec.note(format!(
                "{} enter a batch of {} latency {slowest:?}: {}",
                self.instance,
                batch.len(),
                records.join(", ")
            ));
        }
        sleep(slowest).await;
        self.freeze.wait().await;
        match verdict {
            Verdict::Ok => {
                for d in &batch {
                    self.rec.completed(&self.instance, d.shard(), d.sequence());
                }
                Ok(())
            }
            Verdict::Fail => Err(BatchFailure::all(SimFailure)),
            Verdict::Panic => panic!("simulated batch handler panic"),
        }
    }
}
