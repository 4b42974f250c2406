//! `Coordinator`: one subscription's shards and leases.
//!
//! It lists the stream's shards (at start, every `shard_sync_interval`, and at once when a
//! shard ends), creates the missing lease rows with their parents, and every `take_interval`
//! takes rows it may read: free rows, rows it owns already, and rows whose owner stopped
//! renewing. Children of a split or merge are taken only once every parent's checkpoint is
//! `SHARD_END` (or the parent has left the stream), so parents finish before children.
//!
//! # Expiry without trusting clocks
//!
//! A foreign row counts as expired only when this coordinator has seen its counter unchanged
//! for a full lease duration on its own monotonic clock; the take is then fenced on that
//! counter. The wall-clock expiry written in the row never decides, so instances whose clocks
//! disagree by seconds never both hold a shard.
//!
//! # Fair share
//!
//! An instance aims for ceil(readable shards / live owners), where live owners are the owners
//! of rows whose counter moved within a lease duration, plus itself; it takes no more than that.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kinesis_dispatch::{CheckpointCursor, DeliverySender, ShardSettlement};
use kinesis_lease_core::{Checkpoint, Lease, LeaseStore, Outcome, Take};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{interval, Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::keeper::Keeper;
use crate::reader::{start_position, Reader};
use crate::shared::{Exit, Held, Phase, Report, Shared};
use crate::{KinesisApi, ReaderConfig, ReaderError};

/// Starts the coordinator of one subscription.
#[derive(Debug)]
pub struct Coordinator;

/// One held shard as [`CoordinatorHandle::stats`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStats {
    /// The shard id.
    pub shard: String,
    /// The lease owner (this broker).
    pub owner: String,
    /// The last checkpoint written.
    pub checkpoint: Option<Checkpoint>,
    /// How far the last read was behind the tip.
    pub millis_behind: u64,
    /// Records handed to dispatch.
    pub delivered: u64,
    /// Records settled.
    pub settled: u64,
    /// Records handed to dispatch and not settled.
    pub in_flight: u64,
}

/// The running coordinator and shard readers of one subscription.
#[derive(Debug)]
pub struct CoordinatorHandle {
    shared: Arc<Shared>,
    coordinator: tokio::task::JoinHandle<JoinSet<()>>,
    fatal: watch::Receiver<Option<Arc<ReaderError>>>,
}

impl Coordinator {
    /// Spawns the coordinator on the current runtime; it reads `config.stream` into `sender`.
    pub fn spawn(
        config: ReaderConfig,
        kinesis: Arc<dyn KinesisApi>,
        store: Arc<dyn LeaseStore>,
        sender: DeliverySender,
    ) -> CoordinatorHandle {
        let (reports_tx, reports) = mpsc::unbounded_channel();
        let (fatal_tx, fatal) = watch::channel(None);
        let span =
            tracing::info_span!("coordinator", stream = %config.stream, owner = %config.owner);
        let shared = Arc::new(Shared {
            config,
            kinesis,
            store,
            sender,
            phase: watch::Sender::new(Phase::Running),
            fatal: fatal_tx,
            reports: reports_tx,
            held: Mutex::default(),
        });
        let state = State {
            shared: shared.clone(),
            stream_shards: HashMap::new(),
            rows_created: HashSet::new(),
            observed: HashMap::new(),
            tasks: JoinSet::new(),
            reposition_done: HashSet::new(),
            epoch: None,
            listed: None,
            asked: None,
            next_expiry: None,
        };
        let coordinator = tokio::spawn(state.run(reports).instrument(span));
        CoordinatorHandle {
            shared,
            coordinator,
            fatal,
        }
    }
}

impl CoordinatorHandle {
    /// Stops taking leases and reading; held leases are still renewed (with their checkpoints)
    /// until [`release_all`](Self::release_all).
    pub fn stop_reading(&self) {
        self.shared.phase.send_if_modified(|p| {
            if *p == Phase::Running {
                *p = Phase::Draining;
                true
            } else {
                false
            }
        });
    }

    /// Writes each held shard's final checkpoint with its release and waits for every shard
    /// task to end. Call after the subscription's handlers have finished (or been abandoned).
    pub async fn release_all(self) {
        self.stop_reading();
        self.shared.phase.send_replace(Phase::Releasing);
        match self.coordinator.await {
            Ok(mut tasks) => while tasks.join_next().await.is_some() {},
            Err(error) => tracing::error!(%error, "coordinator task failed"),
        }
        // Let the other instances see the released rows at their next epoch read.
        let stream = &self.shared.config.stream;
        if let Err(error) = self.shared.store.bump_epoch(stream).await {
            tracing::warn!(%stream, error = %error, "could not bump the stream's epoch after releasing");
        }
    }

    /// Stops the coordinator and every shard task at once, writing nothing, as a crash would:
    /// the leases stay until others see them expire. For failover tests.
    pub fn abort(self) {
        self.coordinator.abort();
    }

    /// The shards this broker holds now, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self.shared.held().keys().cloned().collect();
        held.sort();
        held
    }

    /// Per held shard: checkpoint, lag and delivery counts.
    pub fn stats(&self) -> Vec<ShardStats> {
        let mut stats: Vec<ShardStats> = self
            .shared
            .held()
            .iter()
            .map(|(shard, held)| {
                let progress = held.settlement.progress();
                ShardStats {
                    shard: shard.clone(),
                    owner: self.shared.config.owner.clone(),
                    checkpoint: held
                        .written
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clone(),
                    millis_behind: held.millis_behind.load(Ordering::Relaxed),
                    delivered: progress.delivered,
                    settled: progress.settled,
                    in_flight: progress.in_flight(),
                }
            })
            .collect();
        stats.sort_by(|a, b| a.shard.cmp(&b.shard));
        stats
    }

    /// Waits until every delivery of every held shard has settled.
    pub async fn settled(&self) {
        let settlements: Vec<Arc<ShardSettlement>> = self
            .shared
            .held()
            .values()
            .map(|held| held.settlement.clone())
            .collect();
        for settlement in settlements {
            settlement.all_settled().await;
        }
    }

    /// The subscription's stream.
    pub fn stream(&self) -> &str {
        &self.shared.config.stream
    }

    /// Resolves with the first fatal error of the subscription (a deleted stream).
    pub async fn failed(&self) -> Arc<ReaderError> {
        let mut fatal = self.fatal.clone();
        loop {
            if let Some(error) = fatal.borrow_and_update().clone() {
                return error;
            }
            if fatal.changed().await.is_err() {
                // The coordinator is gone without an error: never resolves.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The fatal error, if one happened.
    pub fn error(&self) -> Option<Arc<ReaderError>> {
        self.fatal.borrow().clone()
    }
}

/// What the coordinator saw of one row's counter, and since when.
#[derive(Debug, Clone, Copy)]
struct Seen {
    counter: u64,
    since: Instant,
}

struct State {
    shared: Arc<Shared>,
    /// The stream's shards by id, from the last listing.
    stream_shards: HashMap<String, crate::Shard>,
    rows_created: HashSet<String>,
    observed: HashMap<String, Seen>,
    tasks: JoinSet<()>,
    reposition_done: HashSet<String>,
    /// The stream's epoch at the last listing.
    epoch: Option<u64>,
    /// When the rows were last listed.
    listed: Option<Instant>,
    /// The row this instance asked for, and when.
    asked: Option<(String, Instant)>,
    /// The earliest time a foreign row seen standing still will count as expired: the rows are
    /// listed again then, so a crashed owner's shards are taken without waiting for the next
    /// list interval.
    next_expiry: Option<Instant>,
}

impl State {
    async fn run(mut self, mut reports: mpsc::UnboundedReceiver<Report>) -> JoinSet<()> {
        let config = self.shared.config.clone();
        let mut phase = self.shared.phase.subscribe();
        let mut sync = interval(config.shard_sync_interval);
        let mut take = interval(config.take_interval);
        sync.set_missed_tick_behavior(MissedTickBehavior::Delay);
        take.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.sync_shards().await;
        loop {
            tokio::select! {
                biased;
                _ = crate::shared::left_running(&mut phase) => break,
                report = reports.recv() => {
                    let Some(report) = report else { break };
                    self.on_report(report).await;
                }
                _ = sync.tick() => self.sync_shards().await,
                _ = take.tick() => self.tick().await,
            }
            if self.shared.fatal.borrow().is_some() {
                // Stream gone: stop taking; shard tasks release on their own.
                self.shared.phase.send_if_modified(|p| {
                    let running = *p == Phase::Running;
                    if running {
                        *p = Phase::Draining;
                    }
                    running
                });
            }
        }
        self.tasks
    }

    async fn on_report(&mut self, report: Report) {
        tracing::debug!(shard = %report.shard, exit = ?report.exit, "shard task ended");
        if report.exit == Exit::Ended {
            // Children may be readable now.
            self.sync_shards().await;
            self.take_round().await;
        }
    }

    async fn sync_shards(&mut self) {
        let stream = self.shared.config.stream.clone();
        let shards = match self.shared.kinesis.list_shards(&stream).await {
            Ok(shards) => shards,
            Err(error @ ReaderError::StreamNotFound { .. }) => {
                self.shared.fail(error);
                return;
            }
            Err(error) => {
                tracing::warn!(error = %error, "listing shards failed; retrying at the next sync");
                return;
            }
        };
        self.stream_shards = shards.into_iter().map(|s| (s.id.clone(), s)).collect();
        let mut missing: Vec<&crate::Shard> = self
            .stream_shards
            .values()
            .filter(|s| !self.rows_created.contains(&s.id))
            .collect();
        missing.sort_by(|a, b| a.id.cmp(&b.id));
        let mut created = Vec::new();
        for shard in missing {
            let key = match self.shared.key(&shard.id) {
                Ok(key) => key,
                Err(error) => {
                    tracing::error!(error = %error, "shard id unusable as a lease key");
                    continue;
                }
            };
            match self.shared.store.create(&key, &shard.parents()).await {
                Ok(_) => created.push(shard.id.clone()),
                Err(error) => {
                    tracing::warn!(shard = %shard.id, error = %error, "creating the lease row failed")
                }
            }
        }
        self.rows_created.extend(created);
    }

    /// True when every parent of `row` is finished or gone from the stream.
    fn parents_done(&self, row: &Lease, rows: &HashMap<&str, &Lease>) -> bool {
        row.parents
            .iter()
            .all(|parent| match rows.get(parent.as_str()) {
                Some(p) => p.is_finished(),
                None => !self.stream_shards.contains_key(parent),
            })
    }

    /// Every take interval: list the rows when the epoch moved or the list interval passed.
    async fn tick(&mut self) {
        let shared = self.shared.clone();
        let due = self
            .listed
            .is_none_or(|at| at.elapsed() >= shared.config.list_interval)
            || self.next_expiry.is_some_and(|at| Instant::now() >= at);
        let epoch = match shared.store.epoch(&shared.config.stream).await {
            Ok(epoch) => Some(epoch),
            Err(error) => {
                tracing::warn!(error = %error, "reading the stream's epoch failed");
                None
            }
        };
        if due || epoch.is_none() || epoch != self.epoch {
            self.epoch = epoch;
            self.take_round().await;
        }
    }

    async fn take_round(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let rows = match shared.store.list(&config.stream).await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(error = %error, "listing leases failed; retrying at the next round");
                return;
            }
        };
        let now = Instant::now();
        self.listed = Some(now);
        for row in &rows {
            let shard = row.key.shard();
            match self.observed.get(shard) {
                Some(seen) if seen.counter == row.counter => {}
                _ => {
                    self.observed.insert(
                        shard.to_owned(),
                        Seen {
                            counter: row.counter,
                            since: now,
                        },
                    );
                }
            }
        }
        let by_shard: HashMap<&str, &Lease> = rows.iter().map(|r| (r.key.shard(), r)).collect();
        let readable: Vec<&Lease> = rows
            .iter()
            .filter(|r| !r.is_finished() && self.parents_done(r, &by_shard))
            .collect();
        let ttl = config.lease_duration;
        // Rows with an owner whose counter moved within a lease duration, on our own clock.
        let live_shards: HashSet<String> = readable
            .iter()
            .filter(|r| r.owner.is_some())
            .filter(|r| {
                self.observed
                    .get(r.key.shard())
                    .is_some_and(|seen| now.duration_since(seen.since) < ttl)
            })
            .map(|r| r.key.shard().to_owned())
            .collect();
        let is_live = |row: &Lease| live_shards.contains(row.key.shard());
        self.next_expiry = readable
            .iter()
            .filter(|r| r.owner.as_deref().is_some_and(|o| o != config.owner))
            .filter(|r| live_shards.contains(r.key.shard()))
            .filter_map(|r| {
                self.observed
                    .get(r.key.shard())
                    .map(|seen| seen.since + ttl)
            })
            .min();
        let mut owners: HashSet<&str> = readable
            .iter()
            .filter(|r| is_live(r))
            .filter_map(|r| r.owner.as_deref())
            .collect();
        owners.insert(&config.owner);
        let target = readable.len().div_ceil(owners.len());
        let held = self.shared.held().len();
        let mut room = target.saturating_sub(held);
        // Own rows first (after a restart with a stable id), then free ones, then expired ones.
        let mut candidates: Vec<(u8, &Lease, Take)> = Vec::new();
        {
            let held = self.shared.held();
            for row in &readable {
                if held.contains_key(row.key.shard()) {
                    continue;
                }
                let (rank, take) = match row.owner.as_deref() {
                    Some(owner) if owner == config.owner => (0, Take::new(ttl)),
                    None => (1, Take::new(ttl)),
                    Some(_) if !is_live(row) => (2, Take::fenced(ttl, row.counter)),
                    Some(_) => continue,
                };
                candidates.push((rank, row, take));
            }
        }
        candidates.sort_by(|a, b| (a.0, a.1.key.shard()).cmp(&(b.0, b.1.key.shard())));
        for (rank, row, take) in candidates {
            // Rows already ours (handed over to us, or ours before a restart) are always taken.
            if room == 0 && rank > 0 {
                break;
            }
            match shared.store.take(&row.key, &config.owner, take).await {
                Ok(Outcome::Written(lease)) => {
                    room = room.saturating_sub(1);
                    if self
                        .asked
                        .as_ref()
                        .is_some_and(|(s, _)| s == lease.key.shard())
                    {
                        self.asked = None;
                    }
                    self.start(lease);
                }
                Ok(Outcome::Lost(lost)) => {
                    tracing::debug!(shard = %row.key.shard(), holder = ?lost.holder, "take lost");
                }
                Err(error) => {
                    tracing::warn!(shard = %row.key.shard(), error = %error, "take failed");
                }
            }
        }
        self.ask_for_one(&readable, &live_shards, target).await;
    }

    /// Below the fair share with nothing left to take: ask the most-loaded live owner for one
    /// shard, if it holds at least two more than this instance. Owners one apart do not move
    /// (hysteresis); every move narrows the spread, so shares converge (16 over 3: 6 + 5 + 5).
    async fn ask_for_one(&mut self, readable: &[&Lease], live: &HashSet<String>, target: usize) {
        let config = &self.shared.config;
        if let Some((_, at)) = &self.asked {
            if at.elapsed() < config.lease_duration {
                return; // one request at a time
            }
            self.asked = None;
        }
        let mine = self.shared.held().len();
        if mine >= target {
            return;
        }
        let mut counts: HashMap<&str, Vec<&Lease>> = HashMap::new();
        for row in readable.iter().filter(|r| live.contains(r.key.shard())) {
            if let Some(owner) = row.owner.as_deref().filter(|o| *o != config.owner) {
                counts.entry(owner).or_default().push(row);
            }
        }
        let Some((victim, rows)) = counts
            .into_iter()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(a.0)))
        else {
            return;
        };
        if rows.len() < mine + 2 {
            return;
        }
        let open: Vec<&&Lease> = rows.iter().filter(|r| r.wanted_by.is_none()).collect();
        if open.is_empty() {
            return;
        }
        let row = open[fastrand::usize(..open.len())];
        match self
            .shared
            .store
            .request(&row.key, &config.owner, row.counter)
            .await
        {
            Ok(Outcome::Written(_)) => {
                tracing::info!(shard = %row.key.shard(), %victim, mine, theirs = rows.len(), target, "asked for a shard");
                self.asked = Some((row.key.shard().to_owned(), Instant::now()));
            }
            Ok(Outcome::Lost(_)) => {}
            Err(error) => {
                tracing::warn!(shard = %row.key.shard(), error = %error, "asking for a shard failed")
            }
        }
    }

    /// Starts the keeper and reader of a freshly taken shard.
    fn start(&mut self, lease: Lease) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let shard = lease.key.shard().to_owned();
        let settlement = ShardSettlement::new(config.stream.as_str(), shard.as_str());
        let millis_behind = Arc::new(AtomicU64::new(0));
        let written = Arc::new(Mutex::new(lease.checkpoint.clone()));
        shared.held().insert(
            shard.clone(),
            Held {
                settlement: settlement.clone(),
                millis_behind: millis_behind.clone(),
                written: written.clone(),
            },
        );
        let reposition = config.reposition.is_some() && self.reposition_done.insert(shard.clone());
        let (start, skip) = start_position(&shared, &lease, reposition);
        let (signal_tx, signal_rx) = watch::channel(crate::shared::Signal::Reading);
        let (cmd_tx, cmd_rx) = mpsc::channel(2);
        let keeper = Keeper {
            shared: shared.clone(),
            key: lease.key.clone(),
            settlement: settlement.clone(),
            cursor: CheckpointCursor::new(lease.checkpoint.as_ref()),
            signal: signal_tx,
            written,
        };
        let reader = Reader {
            shared: shared.clone(),
            shard: shard.clone(),
            feed: shared.sender.feed(settlement.clone()),
            settlement,
            signal: signal_rx,
            phase: shared.phase.subscribe(),
            keeper: cmd_tx,
            millis_behind,
        };
        let span = tracing::info_span!("shard_reader", stream = %config.stream, shard = %shard, owner = %config.owner);
        tracing::info!(parent: &span, checkpoint = ?lease.checkpoint.as_ref().map(ToString::to_string), position = ?start, "lease taken");
        let reports = shared.reports.clone();
        self.tasks.spawn(
            async move {
                let (exit, ()) = tokio::join!(keeper.run(cmd_rx), reader.run(start, skip));
                shared.held().remove(&shard);
                let _ = reports.send(Report { shard, exit });
            }
            .instrument(span),
        );
    }
}
