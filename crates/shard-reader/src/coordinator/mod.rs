//! `Coordinator`: one subscription's shards and leases.
//!
//! It lists the stream's shards (at start, every `shard_sync_interval`, and at once when a
//! shard ends), creates the missing lease rows with their parents and start position, and
//! every `take_interval` takes rows it may read: free rows, rows handed over to it, and rows
//! whose holder stopped renewing. Children of a split or merge are taken only once every
//! parent's checkpoint is `SHARD_END` (or the parent has left the stream, as a ListShards
//! sent after the child existed shows: no listing, or a failed one, proves nothing), so
//! parents finish before children.
//!
//! # Every take is fenced
//!
//! Every take is conditioned on the counter this coordinator saw in its listing, so of two
//! takers that saw the same row exactly one wins, whatever their clocks say. A held row counts
//! as expired only when this coordinator has seen its counter unchanged for a full lease
//! duration on its own monotonic clock. The wall-clock expiry written in the row never decides.
//!
//! # One holding, one token
//!
//! A take writes a token fresh for that take, and the keeper's writes require it. A row that
//! names this owner id but carries a token this coordinator never wrote belongs to another
//! process with the same id (or to a crashed earlier run of this one): it is treated as
//! foreign, and if its holder writes it (its counter moves further than another instance's
//! hand-over request explains, see `twin`), the id is live elsewhere and the subscription
//! fails with [`ReaderError::OwnerInUse`] instead of fighting over it. A take whose response
//! was lost is adopted at the next listing when the row carries its token.
//!
//! # Reads that do not grow with the stream
//!
//! The coordinator joins the roster (see `roster`) before it takes anything, and lists the
//! shard rows only when something changed: at start, when the stream's epoch moves (rows
//! released, handed over, ended, or left by a member found dead), when the stream's shards
//! change, when one of its own keepers ends, and while it is below its share with rows left to
//! take. In steady state it reads the epoch every take interval, and the roster's epoch and the
//! one member it watches every list interval: small reads, whatever the number of shards. The
//! watch runs in a task of its own (see `ring_watch`), so neither a long take round nor a
//! store call that does not answer delays it, and it goes on while the instance shuts down.
//!
//! # Fair share
//!
//! An instance aims for ceil(readable shards / owners), where owners are the members of the
//! roster (this instance included) and the owners of live rows written before the roster; it
//! takes no more than that. A member whose row this instance has seen stand still for a lease
//! is not counted (it is dead or cut off, its keepers have stopped): its rows stay its own
//! until it is buried, but the rows others free are not left waiting for its share.
//!
//! # Every store call is bounded
//!
//! Each store call of the coordinator is cut off after a lease duration (`bounded`), so a
//! store that does not answer delays a take round but never stops the coordinator.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use kinesis_dispatch::{CheckpointCursor, DeliverySender, ShardSettlement};
use kinesis_lease_core::{ErrorChain, Holder, Lease, LeaseStore, Outcome, Take};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{interval, Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::handle::UNKNOWN_BEHIND;
use crate::keeper::Keeper;
use crate::member::{member_key, Member, MemberState};
use crate::reader::Reader;
use crate::roster;
use crate::shared::{AbortOnDrop, Exit, Held, Phase, Report, Shared};
use crate::start::{self, StartPlan};
use crate::take_plan;
use crate::{CoordinatorHandle, KinesisApi, ReaderConfig, ReaderError, ShardInfo};

mod discovery;
mod ring_watch;

/// Starts the coordinator of one subscription.
#[derive(Debug)]
pub struct Coordinator;

impl Coordinator {
    /// Checks, before starting, that no other live process uses `owner` on `stream`: when
    /// rows of the stream (or the id's member row) name this owner id with a token, reads them
    /// again after `wait` (a renew interval and a little more) and fails if the holder wrote
    /// one meanwhile, twice in two windows (see `twin`: another instance's hand-over request
    /// moves a row's counter too, and proves nothing; and the last renewal of a crashed run,
    /// already sent, may land once after the first read). Costs one read when no row names the
    /// id (fresh, unique ids; or rows released by a clean shutdown).
    ///
    /// # Errors
    ///
    /// [`ReaderError::OwnerInUse`] naming a shard (or the member row) the other process
    /// renewed; [`ReaderError::Lease`] when the store fails.
    pub async fn probe_owner(
        store: &dyn LeaseStore,
        stream: &str,
        owner: &str,
        wait: std::time::Duration,
    ) -> Result<(), ReaderError> {
        let lease_error = |source| ReaderError::Lease {
            stream: stream.to_owned(),
            shard: String::new(),
            source,
        };
        let member = member_key(stream, owner)?;
        // The rows naming this id with a token, by key: the shard rows and the member row.
        let read = || async {
            let mut rows = store.list(stream).await.map_err(lease_error)?;
            rows.extend(store.read(&member).await.map_err(lease_error)?);
            Ok::<_, ReaderError>(
                rows.into_iter()
                    .filter(|r| r.is_held_by(owner) && r.token.is_some())
                    .map(|r| (r.key.clone(), r))
                    .collect::<HashMap<_, _>>(),
            )
        };
        let before = read().await?;
        if before.is_empty() {
            return Ok(());
        }
        tracing::info!(%stream, %owner, rows = before.len(), ?wait, "rows name this owner id: checking that no live process renews them");
        // A write of a crashed run that was already on its way may land once after the first
        // read (its last renewal, sent just before the crash): one move is not proof. A live
        // process renews every renew interval, so it moves the row again in the next window.
        let mut before = before;
        let mut moved_once = false;
        loop {
            tokio::time::sleep(wait).await;
            let after = read().await?;
            let moved = after.iter().find(|(key, row)| {
                before.get(*key).is_some_and(|seen| {
                    crate::twin::holder_wrote(
                        crate::twin::Sighting::of(seen),
                        crate::twin::Sighting::of(row),
                    )
                })
            });
            match moved {
                Some((key, _)) if moved_once => {
                    let shard = if *key == member {
                        key.to_string()
                    } else {
                        key.shard().to_owned()
                    };
                    return Err(ReaderError::OwnerInUse {
                        owner: owner.to_owned(),
                        stream: stream.to_owned(),
                        shard,
                    });
                }
                Some(_) => {
                    tracing::info!(%stream, %owner, "a row naming this owner id moved once: checking once more");
                    moved_once = true;
                    before = after;
                }
                None => return Ok(()),
            }
        }
    }

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
            metrics: crate::metrics::StreamMetrics::new(&config.stream),
            config,
            kinesis,
            store,
            sender,
            phase: watch::Sender::new(Phase::Running),
            fatal: fatal_tx,
            reports: reports_tx,
            held: Mutex::default(),
            consumer_arn: crate::shared::ConsumerArn::new(),
            member: watch::Sender::new(MemberState::outside()),
            bump_owed: std::sync::atomic::AtomicBool::new(false),
            roster_bump_owed: std::sync::atomic::AtomicBool::new(false),
        });
        let state = State {
            shared: shared.clone(),
            stream_shards: HashMap::new(),
            rows_created: HashSet::new(),
            observed: HashMap::new(),
            tasks: JoinSet::new(),
            tokens: HashMap::new(),
            pending: HashMap::new(),
            sync_failed: false,
            epoch: None,
            relist_at: Some(Instant::now()),
            members: HashSet::new(),
            link: Arc::default(),
            member: None,
            watcher: None,
            departed: HashSet::new(),
            synced_at: None,
            first_seen: HashMap::new(),
            gone_since: HashMap::new(),
            took_a_round: false,
            left_free: HashSet::new(),
            asked: None,
            next_expiry: None,
        };
        let coordinator = tokio::spawn(state.run(reports).instrument(span));
        CoordinatorHandle {
            shared,
            coordinator: Some(coordinator),
            fatal,
        }
    }
}

/// What the coordinator saw of one row, and since when its counter stood still.
#[derive(Debug, Clone)]
struct Seen {
    counter: u64,
    owner: Option<String>,
    token: Option<String>,
    /// Whether the row was marked wanted (see `twin`).
    wanted: bool,
    since: Instant,
}

impl Seen {
    /// What this sighting showed, for `twin`.
    fn sighting(&self) -> crate::twin::Sighting<'_> {
        crate::twin::Sighting {
            owner: self.owner.as_deref(),
            token: self.token.as_deref(),
            counter: self.counter,
            wanted: self.wanted,
        }
    }
}

/// A take whose outcome is unknown (the store failed or lost the response): adopted if the
/// row turns out to carry its token.
#[derive(Debug)]
struct Pending {
    holder: Holder,
    plan: StartPlan,
    sent: Instant,
    /// The membership incarnation the take was sent under.
    incarnation: u64,
}

struct State {
    shared: Arc<Shared>,
    /// The stream's shards by id, from the last listing.
    stream_shards: HashMap<String, crate::Shard>,
    rows_created: HashSet<String>,
    observed: HashMap<String, Seen>,
    tasks: JoinSet<()>,
    /// Tokens this coordinator wrote, per shard, while a row may still carry one of them.
    tokens: HashMap<String, HashSet<String>>,
    pending: HashMap<String, Pending>,
    /// The last ListShards failed: list again at the next take tick.
    sync_failed: bool,
    /// The stream's epoch at the last listing.
    epoch: Option<u64>,
    /// When the rows are to be listed again regardless of the epoch (`None`: only when the
    /// epoch moves).
    relist_at: Option<Instant>,
    /// The members the roster listed last (this instance included once joined).
    members: HashSet<String>,
    /// What this instance has seen of member rows, shared with the ring watch.
    link: Arc<ring_watch::Link>,
    /// The task renewing this instance's member row, and what stops it.
    member: Option<(tokio::sync::oneshot::Sender<()>, AbortOnDrop)>,
    /// The ring watch's task, and what tells it this instance has left.
    watcher: Option<(tokio::sync::oneshot::Sender<Instant>, AbortOnDrop)>,
    /// The owner ids whose member row the last roster listing showed as not held by them (left
    /// or buried).
    departed: HashSet<String>,
    /// When the last ListShards that succeeded was sent.
    synced_at: Option<Instant>,
    /// Per row, when a listing first showed it: a shard missing from a ListShards sent before
    /// that may just be newer than the listing, not gone.
    first_seen: HashMap<String, Instant>,
    /// Per finished row whose shard the stream no longer lists: since when (the send of the
    /// first ListShards that omitted it). The janitor deletes it a lease later.
    gone_since: HashMap<String, Instant>,
    /// Set once the first take round has planned: that round takes at most one row while no
    /// other owner is live (see `take_plan`).
    took_a_round: bool,
    /// Free or expired rows the last take round left to the other owners.
    left_free: HashSet<String>,
    /// The row this instance asked for, and when.
    asked: Option<(String, Instant)>,
    /// The earliest time a foreign row seen standing still will count as expired: the rows are
    /// listed again then, so a crashed owner's shards are taken without waiting for the next
    /// list interval.
    next_expiry: Option<Instant>,
}

impl State {
    async fn run(mut self, mut reports: mpsc::UnboundedReceiver<Report>) {
        let config = self.shared.config.clone();
        let shared = self.shared.clone();
        let mut phase = shared.phase.subscribe();
        let mut sync = interval(config.shard_sync_interval);
        let mut take = interval(config.take_interval);
        sync.set_missed_tick_behavior(MissedTickBehavior::Delay);
        take.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Fan-out: the consumer is registered and ACTIVE before any shard is taken.
        if let Some(name) = &config.fan_out {
            let registered = tokio::select! {
                biased;
                _ = crate::shared::left_running(&mut phase) => return,
                registered = crate::fan_out::register_consumer(&shared, name) => registered,
            };
            match registered {
                Ok(arn) => {
                    let _ = shared.consumer_arn.set(arn);
                }
                Err(error) => {
                    shared.fail(error);
                    return;
                }
            }
        }
        // Join the roster before taking anything: keepers stop with the membership.
        let joined = tokio::select! {
            biased;
            _ = crate::shared::left_running(&mut phase) => return,
            joined = Member::join(&shared) => joined,
        };
        match joined {
            Ok(Some(member)) => {
                let (stop, stopped) = tokio::sync::oneshot::channel();
                let task = tokio::spawn(member.run(stopped).instrument(tracing::Span::current()));
                self.member = Some((stop, AbortOnDrop(task)));
                let (left, leaving) = tokio::sync::oneshot::channel();
                let watcher = ring_watch::Watcher::new(shared.clone(), self.link.clone());
                let task = tokio::spawn(watcher.run(leaving).instrument(tracing::Span::current()));
                self.watcher = Some((left, AbortOnDrop(task)));
            }
            Ok(None) => return,
            Err(error) => {
                shared.fail(error);
                return;
            }
        }
        self.sync_shards().await;
        loop {
            tokio::select! {
                biased;
                _ = crate::shared::left_running(&mut phase) => break,
                // Nobody receives deliveries any more (a dropped `DeliveryStream`, dispatch
                // gone): release everything with what settled, rather than hold shards unread.
                () = shared.sender.closed() => {
                    tracing::warn!("the subscription's receiver is gone; releasing every shard");
                    shared.phase.send_replace(Phase::Releasing);
                    break;
                }
                report = reports.recv() => {
                    let Some(report) = report else { break };
                    self.on_report(report).await;
                }
                _ = sync.tick() => self.sync_shards().await,
                _ = take.tick() => self.tick().await,
            }
            // Reap finished shard tasks, so the set holds live ones only.
            while self.tasks.try_join_next().is_some() {}
            if shared.fatal.borrow().is_some() {
                // Stream gone or owner id in use: stop reading and release what is held.
                shared.phase.send_replace(Phase::Releasing);
                break;
            }
        }
        // Keepers go on renewing while handlers finish (Draining), until Releasing; then each
        // writes its final checkpoint. Wait for them here, so dropping the handle (which
        // aborts this task) is the only way to cut them short. A closed channel while
        // draining is the shutdown's own doing (dispatch ends; its lanes still finish what was
        // routed to them): `release_all` decides when to release, not the channel.
        while self.tasks.join_next().await.is_some() {}
        // Every keeper has finished: leave the roster, then let the others see the released
        // rows (and this instance gone) at their next epoch read.
        if let Some((stop, mut task)) = self.member.take() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(config.lease_duration * 2, &mut task.0).await;
        }
        shared
            .bump_epoch_leaving(&config.stream, "rows released")
            .await;
        // Hand the ring watch on: its successor's next watcher counts from its own readings,
        // which begin about now (see `ring_watch`).
        if let Some((left, mut task)) = self.watcher.take() {
            let _ = left.send(Instant::now());
            let most = config.lease_duration * 3 + config.list_interval;
            if tokio::time::timeout(most, &mut task.0).await.is_err() {
                tracing::warn!("the ring watch did not hand on in time; stopped");
            }
        }
    }

    async fn on_report(&mut self, report: Report) {
        tracing::debug!(shard = %report.shard, exit = ?report.exit, "shard task ended");
        match report.exit {
            Exit::Ended => {
                // Children may be readable now.
                self.sync_shards().await;
                self.take_round().await;
            }
            // The row names this instance and nobody else takes it while it is a member:
            // take it again.
            Exit::Lost => self.relist_now(),
            // The round the hand-over's epoch bump started may have run while the shard was
            // still held here; the row may name an instance that has left since it asked.
            Exit::HandedOver => self.relist_now(),
            Exit::Released => {}
        }
    }

    /// Lists the rows at the next take tick.
    fn relist_now(&mut self) {
        self.relist_at = Some(Instant::now());
    }

    /// Lists the rows at `at` at the latest.
    fn relist_by(&mut self, at: Instant) {
        self.relist_at = Some(self.relist_at.map_or(at, |r| r.min(at)));
    }

    /// Lists the roster: who is a member (recording what it shows of each member row), and who
    /// departed. False when the listing failed.
    async fn list_roster(&mut self) -> bool {
        let shared = self.shared.clone();
        let stream = roster::members_stream(&shared.config.stream);
        match bounded(&shared, "list", shared.store.list(&stream)).await {
            Ok(rows) => {
                self.members = roster::present(&rows);
                self.departed = crate::cleanup::departed(&rows)
                    .into_iter()
                    .map(|r| r.key.shard().to_owned())
                    .collect();
                self.link.record_listing(&rows, Instant::now());
                true
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "listing the roster failed");
                false
            }
        }
    }

    /// Every take interval: list the rows when the epoch moved, the ring watch saw the roster
    /// change, or a listing is due.
    async fn tick(&mut self) {
        let shared = self.shared.clone();
        if self.sync_failed {
            // A failed ListShards (throttled, say) must not leave new shards unread for a
            // whole shard-sync interval.
            self.sync_shards().await;
        }
        if shared
            .bump_owed
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            shared.bump_epoch("owed").await;
        }
        if self.link.take_relist() {
            self.relist_now();
        }
        let now = Instant::now();
        let due = self.relist_at.is_some_and(|at| now >= at)
            || self.next_expiry.is_some_and(|at| now >= at);
        let epoch = match bounded(&shared, "epoch", shared.store.epoch(&shared.config.stream)).await
        {
            Ok(epoch) => Some(epoch),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "reading the stream's epoch failed");
                None
            }
        };
        if due || epoch.is_none() || epoch != self.epoch {
            self.epoch = epoch;
            self.take_round().await;
        }
    }

    /// The parents of `rows` that a listing of the stream's shards proves gone from the
    /// stream: a ListShards that succeeded omits them though it was sent after one of their
    /// children existed (it lists the child, or was sent after the child's row was first seen
    /// here). A parent is older than its children, so such a listing would list it were it
    /// still in the stream. Without such a listing (none succeeded yet, or only ones older
    /// than the children), a parent with no row may be there, its row not created yet: its
    /// children wait.
    fn parents_gone(&self, rows: &[Lease]) -> HashSet<String> {
        let Some(synced_at) = self.synced_at else {
            return HashSet::new();
        };
        let listed = |shard: &str| self.stream_shards.contains_key(shard);
        rows.iter()
            .filter(|child| {
                let shard = child.key.shard();
                listed(shard)
                    || self
                        .first_seen
                        .get(shard)
                        .is_some_and(|seen| *seen <= synced_at)
            })
            .flat_map(|child| child.parents.iter())
            .filter(|parent| !listed(parent))
            .cloned()
            .collect()
    }

    /// True when this coordinator wrote `token` into `shard`'s row.
    fn is_mine(&self, shard: &str, token: Option<&str>) -> bool {
        token.is_some_and(|t| self.tokens.get(shard).is_some_and(|ts| ts.contains(t)))
    }

    /// Records what the listing shows; fails the subscription when another process with this
    /// owner id is seen writing a row.
    fn observe(&mut self, rows: &[Lease], now: Instant) -> Result<(), ReaderError> {
        let me = self.shared.config.owner.clone();
        let held: HashSet<String> = self.shared.held().keys().cloned().collect();
        for row in rows {
            let shard = row.key.shard();
            let previous = self.observed.get(shard);
            let twin = row.is_held_by(&me)
                && row.token.is_some()
                && !held.contains(shard)
                && !self.is_mine(shard, row.token.as_deref())
                // A write only its holder makes, not another instance's request (see `twin`).
                && previous.is_some_and(|seen| {
                    crate::twin::holder_wrote(seen.sighting(), crate::twin::Sighting::of(row))
                });
            if twin {
                return Err(ReaderError::OwnerInUse {
                    owner: me,
                    stream: row.key.stream().to_owned(),
                    shard: shard.to_owned(),
                });
            }
            if previous.is_none_or(|seen| seen.counter != row.counter) {
                self.observed.insert(
                    shard.to_owned(),
                    Seen {
                        counter: row.counter,
                        owner: row.owner.clone(),
                        token: row.token.clone(),
                        wanted: row.wanted_by.is_some(),
                        since: now,
                    },
                );
            }
            // Tokens of ours the row no longer carries can never come back.
            if let Some(tokens) = self.tokens.get_mut(shard) {
                tokens.retain(|t| row.token.as_deref() == Some(t.as_str()) || held.contains(shard));
            }
        }
        for row in rows {
            self.first_seen
                .entry(row.key.shard().to_owned())
                .or_insert(now);
        }
        let listed: HashSet<&str> = rows.iter().map(|r| r.key.shard()).collect();
        self.observed
            .retain(|shard, _| listed.contains(shard.as_str()));
        self.first_seen
            .retain(|shard, _| listed.contains(shard.as_str()));
        self.tokens
            .retain(|shard, tokens| !tokens.is_empty() && listed.contains(shard.as_str()));
        Ok(())
    }

    /// Takes whose response was lost and that landed after all: start reading them.
    fn adopt_pending(&mut self, rows: &[Lease]) {
        for row in rows {
            let shard = row.key.shard();
            let Some(pending) = self.pending.remove(shard) else {
                continue;
            };
            if row.is_held_with(&pending.holder) {
                tracing::info!(%shard, "a take whose response was lost had landed; reading");
                self.start(
                    row.clone(),
                    pending.holder,
                    pending.plan,
                    pending.sent,
                    pending.incarnation,
                );
            }
            // Otherwise it did not land (a landed take writes its token, and nobody may take
            // the row again within a lease): the row is considered afresh below.
        }
    }

    async fn take_round(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let rows = match bounded(&shared, "list", shared.store.list(&config.stream)).await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "listing leases failed; retrying at the next tick");
                self.relist_now();
                return;
            }
        };
        let now = Instant::now();
        self.relist_at = None;
        if let Err(error) = self.observe(&rows, now) {
            shared.fail(error);
            return;
        }
        self.adopt_pending(&rows);
        // The roster, read after the rows: an owner absent from it held nothing, when the rows
        // were read, that it could still act on (see `roster`).
        if !self.list_roster().await {
            self.relist_now();
            return;
        }
        if !shared.member.borrow().is_live() {
            // Not a member now (joining again after being found dead, or renewals failing):
            // take nothing until the membership is back.
            self.relist_by(now + config.take_interval);
            return;
        }
        // Rows written before the roster expire only by standing still: watch them.
        let legacy = rows.iter().any(|r| {
            !r.is_held_by(&config.owner)
                && r.token
                    .as_deref()
                    .is_some_and(|t| !roster::is_roster_token(t))
        });
        if legacy {
            self.relist_by(now + config.list_interval);
        }
        let still: HashMap<String, std::time::Duration> = self
            .observed
            .iter()
            .map(|(shard, seen)| (shard.clone(), now.duration_since(seen.since)))
            .collect();
        let held: HashSet<String> = shared.held().keys().cloned().collect();
        let pending: HashSet<String> = self.pending.keys().cloned().collect();
        let gone = self.parents_gone(&rows);
        let readable = take_plan::readable(&rows, |parent| !gone.contains(parent));
        let first_round = !self.took_a_round;
        let departed = self.departed.clone();
        // Members seen standing still for a lease do not count in the fair share.
        let stale = self
            .link
            .stale(&config.owner, config.lease_duration, Instant::now());
        if rows.iter().any(|r| {
            r.token.is_none()
                && r.owner.as_deref().is_some_and(|o| {
                    o != config.owner && !self.members.contains(o) && !departed.contains(o)
                })
        }) {
            // A row handed to an instance of an earlier release: see whether it took it.
            self.relist_by(now + config.list_interval);
        }
        if first_round {
            // The second round comes a list interval later, seeing who joined meanwhile.
            self.relist_by(now + config.list_interval);
        }
        let view = take_plan::View {
            me: &config.owner,
            still: &still,
            held: &held,
            pending: &pending,
            lease: config.lease_duration,
            first_round,
            left: &self.left_free,
            members: &self.members,
            departed: &departed,
            stale: &stale,
            list_interval: config.list_interval,
        };
        self.took_a_round = true;
        let plan = take_plan::plan(readable, &view);
        tracing::debug!(members = ?self.members, target = plan.target, room = plan.room, candidates = plan.candidates.len(), "take round");
        self.next_expiry = plan.next_expiry.map(|left| now + left);
        let ttl = config.lease_duration;
        let mut room = plan.room;
        let mut left_over = false;
        let mut took_any = false;
        let mut left_free = HashSet::new();
        for (rank, row) in plan.candidates {
            // Rows handed over to us, and our own rows whose keeper ended, are always taken.
            if room == 0 && !rank.past_share() {
                left_over = true;
                left_free.insert(row.key.shard().to_owned());
                continue;
            }
            let reposition = config.reposition();
            let plan = start::plan(
                row,
                &config.start_at,
                reposition.as_ref().map(|(p, m)| (*p, m.as_str())),
                config.clock.now_ms(),
                config.start_slack,
            );
            let mut take = Take::fenced(ttl, row.counter);
            take.checkpoint = plan.checkpoint.clone();
            take.repositioned = plan.marker.clone();
            let holder = Holder::new(config.owner.clone(), roster::new_token());
            let incarnation = shared.member.borrow().incarnation;
            let shard = row.key.shard().to_owned();
            self.tokens
                .entry(shard.clone())
                .or_default()
                .insert(holder.token.clone());
            let sent = Instant::now();
            match bounded(&shared, "take", shared.store.take(&row.key, &holder, &take)).await {
                Ok(Outcome::Written(lease)) => {
                    room = room.saturating_sub(1);
                    took_any = true;
                    if self.asked.as_ref().is_some_and(|(s, _)| *s == shard) {
                        self.asked = None;
                    }
                    self.start(lease, holder, plan, sent, incarnation);
                }
                Ok(Outcome::Lost(lost)) => {
                    tracing::debug!(%shard, holder = ?lost.holder, "take lost");
                    if lost.holder.as_deref() == Some(config.owner.as_str()) {
                        // Our own row moved since the listing (a renewal whose answer was lost
                        // had landed): nobody else takes a present member's row, so unless we
                        // list again and retake it, it stays unread for good.
                        self.relist_now();
                    }
                }
                Err(error) => {
                    tracing::warn!(%shard, error = %ErrorChain(&error), "take failed; adopted at the next listing if it landed");
                    self.relist_now();
                    self.pending.insert(
                        shard,
                        Pending {
                            holder,
                            plan,
                            sent,
                            incarnation,
                        },
                    );
                }
            }
        }
        // What a first round withheld was to make this instance visible, not others' shares.
        let left_free = if first_round {
            HashSet::new()
        } else {
            left_free
        };
        if !left_free.is_empty() && !left_free.is_subset(&self.left_free) {
            // Rows left to the others that they may not know are free (the notice of whatever
            // freed them may have been lost): tell them, once per new row left.
            shared.bump_epoch("rows left to the others").await;
        }
        self.left_free = left_free;
        let held_now = shared.held().len();
        if held_now + 1 < plan.target {
            // Well below the fair share (the rows may be held by a member that will hand them
            // over, or freed by a change whose notice was lost): look again in a while.
            self.relist_by(now + config.lease_duration);
        }
        if (left_over || took_any) && held_now < plan.target {
            // Rows this round left free for the others (see `take_plan`), or rows lost to
            // others' takes while more may have been freed since: list again at the next take
            // tick. A round that takes nothing and leaves nothing waits for the epoch to move.
            self.relist_now();
        }
        self.ask_for_one(&plan.readable, &plan.live, plan.target)
            .await;
        self.clean_up(&rows).await;
    }

    /// The janitor's part of a take round: deletes the rows nothing needs any more (see
    /// `cleanup`), each fenced on the counter this round saw.
    async fn clean_up(&mut self, rows: &[Lease]) {
        let shared = self.shared.clone();
        if !crate::cleanup::is_janitor(&self.members, &shared.config.owner) {
            return;
        }
        let mut doomed = Vec::new();
        // Only against a listing of the stream's shards: none (or an empty one) would make
        // every finished row look unlisted.
        if let (false, Some(synced_at)) = (self.stream_shards.is_empty(), self.synced_at) {
            let shards = &self.stream_shards;
            let first_seen = &self.first_seen;
            // Gone from a ListShards sent after the row was first seen: surely gone, not just
            // newer than the listing. And gone for a lease: a create sent by an instance whose
            // listing predates the shard's trim may still be on its way (delayed, or retried);
            // landing after the delete it would bring the finished row back as new. Every
            // store call is bounded by a lease, so by then it has landed or never will.
            let now = Instant::now();
            let lease = shared.config.lease_duration;
            self.gone_since
                .retain(|s, _| rows.iter().any(|r| r.key.shard() == s && r.is_finished()));
            for row in rows.iter().filter(|r| r.is_finished()) {
                let shard = row.key.shard();
                if shards.contains_key(shard) {
                    self.gone_since.remove(shard);
                } else {
                    self.gone_since.entry(shard.to_owned()).or_insert(synced_at);
                }
            }
            // Rows in their grace: a round when it ends (rounds come only on change).
            let next = self
                .gone_since
                .values()
                .map(|since| *since + lease)
                .filter(|end| *end > now)
                .min();
            if let Some(next) = next {
                self.relist_at = Some(self.relist_at.map_or(next, |r| r.min(next)));
            }
            let gone_since = &self.gone_since;
            let listed = |s: &str| {
                shards.contains_key(s)
                    || first_seen.get(s).is_none_or(|seen| *seen >= synced_at)
                    || gone_since
                        .get(s)
                        .is_none_or(|since| now.duration_since(*since) < lease)
            };
            let children = |parent: &str| {
                shards
                    .values()
                    .filter(|s| s.parents().iter().any(|p| p == parent))
                    .map(|s| s.id.clone())
                    .collect()
            };
            doomed.extend(
                crate::cleanup::finished(rows, listed, children)
                    .into_iter()
                    .map(|r| (r.key.clone(), r.counter)),
            );
        }
        delete_rows(&shared, doomed).await;
    }

    /// Below the fair share with nothing left to take: ask the most-loaded live owner for one
    /// shard, if it holds at least two more than this instance. Owners one apart do not move
    /// (hysteresis); every move narrows the spread, so shares converge (16 over 3: 6 + 5 + 5).
    async fn ask_for_one(&mut self, readable: &[&Lease], live: &HashSet<String>, target: usize) {
        let shared = self.shared.clone();
        let config = &shared.config;
        // One request at a time: while a row is marked wanted by this instance, or for as
        // long as its owner may take to hand it over (two leases to let deliveries settle and
        // one to wait for running handlers).
        if readable
            .iter()
            .any(|r| r.wanted_by.as_deref() == Some(config.owner.as_str()))
        {
            // Look again if the row has not come by then (its owner may have gone).
            self.relist_by(Instant::now() + config.lease_duration * 3);
            return;
        }
        if let Some((_, at)) = &self.asked {
            let until = *at + config.lease_duration * 3;
            if Instant::now() < until {
                // Ask again then if the row has not come by.
                self.relist_by(until);
                return;
            }
            self.asked = None;
        }
        let mine = self.shared.held().len();
        let Some(ask) = take_plan::ask(readable, live, &config.owner, mine, target) else {
            return;
        };
        let (victim, open) = (ask.owner, ask.open);
        let row = open[fastrand::usize(..open.len())];
        let asked = bounded(
            &shared,
            "request",
            shared.store.request(&row.key, &config.owner, row.counter),
        );
        match asked.await {
            Ok(Outcome::Written(_)) => {
                tracing::info!(shard = %row.key.shard(), %victim, mine, theirs = ask.holds, target, "asked for a shard");
                let now = Instant::now();
                self.asked = Some((row.key.shard().to_owned(), now));
                self.relist_by(now + config.lease_duration * 3);
            }
            Ok(Outcome::Lost(_)) => {}
            Err(error) => {
                // It may have landed (the answer lost, or cut off): wait as for a request that
                // did, rather than spend a call that may hang again on every round.
                tracing::warn!(shard = %row.key.shard(), error = %ErrorChain(&error), "asking for a shard failed");
                let now = Instant::now();
                self.asked = Some((row.key.shard().to_owned(), now));
                self.relist_by(now + config.lease_duration * 3);
            }
        }
    }

    /// Starts the keeper and reader of a freshly taken shard.
    fn start(
        &mut self,
        lease: Lease,
        holder: Holder,
        plan: StartPlan,
        sent: Instant,
        incarnation: u64,
    ) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let shard = lease.key.shard().to_owned();
        let settlement = ShardSettlement::new(config.stream.as_str(), shard.as_str());
        let millis_behind = Arc::new(AtomicU64::new(UNKNOWN_BEHIND));
        let written = Arc::new(Mutex::new(lease.checkpoint.clone()));
        let kpl = Arc::new(crate::deaggregation::KplCounters::default());
        shared.held().insert(
            shard.clone(),
            Held {
                settlement: settlement.clone(),
                millis_behind: millis_behind.clone(),
                written: written.clone(),
                kpl: kpl.clone(),
            },
        );
        let (signal_tx, signal_rx) = watch::channel(crate::shared::Signal::Reading);
        let (cmd_tx, cmd_rx) = mpsc::channel(2);
        let keeper = Keeper {
            shared: shared.clone(),
            key: lease.key.clone(),
            holder,
            settlement: settlement.clone(),
            cursor: CheckpointCursor::new(lease.checkpoint.as_ref()),
            signal: signal_tx,
            written,
            taken_at: sent,
            incarnation,
            counted: crate::metrics::Counted::new(&config.stream, &shard, settlement.clone()),
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
            hash_range: self.stream_shards.get(&shard).map(|s| s.hash_range),
            kpl,
            metrics: shared.metrics.shard(&shard),
        };
        let span = tracing::info_span!("shard_reader", stream = %config.stream, shard = %shard, owner = %config.owner);
        if plan.marker.is_some() {
            tracing::warn!(parent: &span, position = ?plan.open, "repositioned over the stored checkpoint (once per subscription)");
        }
        tracing::info!(parent: &span, checkpoint = ?lease.checkpoint.as_ref().map(ToString::to_string), position = ?plan.open, "lease taken");
        shared.metrics.taken();
        {
            // Set under the lock, so that a take and a task's end cannot reorder their sets.
            let held = shared.held();
            shared.metrics.held(held.len());
        }
        let reports = shared.reports.clone();
        let info = ShardInfo {
            stream: config.stream.clone(),
            shard: shard.clone(),
            checkpoint: lease.checkpoint.clone(),
        };
        self.tasks.spawn(
            async move {
                let hooks = &shared.config.hooks;
                // The keeper runs `on_taken` first (renewing meanwhile); the reader starts once
                // it has returned, and never if the lease was lost during it.
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
                let read = async {
                    if ready_rx.await.is_ok() {
                        reader.run(plan).await;
                    }
                };
                let (exit, ()) = tokio::join!(keeper.run(cmd_rx, ready_tx), read);
                let last = {
                    let mut held = shared.held();
                    let gone = held.remove(&shard);
                    shared.metrics.held(held.len());
                    gone.and_then(|held| {
                        held.written
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .clone()
                    })
                };
                let _ = reports.send(Report {
                    shard: shard.clone(),
                    exit,
                });
                let info = ShardInfo {
                    checkpoint: last,
                    ..info
                };
                match exit {
                    Exit::Lost => hooks.lost(info).await,
                    Exit::Ended => hooks.ended(info).await,
                    Exit::Released | Exit::HandedOver => {}
                }
            }
            .instrument(span),
        );
    }
}

/// Deletes each row, fenced on the counter seen; a row written since stays.
async fn delete_rows(shared: &Shared, rows: Vec<(kinesis_lease_core::LeaseKey, u64)>) {
    for (key, counter) in rows {
        match bounded(shared, "delete", shared.store.delete(&key, counter)).await {
            Ok(true) => tracing::debug!(row = %key, "deleted a row nothing needs any more"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(row = %key, error = %ErrorChain(&error), "deleting a row failed; retrying later")
            }
        }
    }
}

/// How many leases a departed member row stands still before the janitor deletes it.
const DEPARTED_FOR: u32 = 10;

/// Runs a coordinator's store call for at most a lease duration: a store that hangs must not
/// stall the coordinator (nor its shutdown). A call cut short counts as failed; a take cut
/// short is adopted later if it landed.
async fn bounded<T>(
    shared: &Shared,
    operation: &'static str,
    call: impl std::future::Future<Output = kinesis_lease_core::LeaseResult<T>>,
) -> kinesis_lease_core::LeaseResult<T> {
    tokio::time::timeout(shared.config.lease_duration, call)
        .await
        .unwrap_or_else(|_| {
            Err(kinesis_lease_core::LeaseError::Unavailable {
                operation,
                resource: shared.config.stream.clone(),
                source: "no answer within a lease duration".into(),
            })
        })
}
