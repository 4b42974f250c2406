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
//! take. In steady state it reads the epoch item every take interval (the stream's epoch and the
//! roster's count of bumps, in one read), the one member it watches every list interval
//! (eventually consistent while it shows the member alive), and the roster's own epoch and the
//! member after the watched one once a lease: small reads, whatever the number of shards. The
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
//! # One file per job
//!
//! This file holds the coordinator's state and its loop; each job the loop runs has a file of
//! its own, found by its name: `discovery` (listing the stream's shards, creating rows),
//! `listing` (the epoch, the rows, observing counters, twins), `take_round` (taking up to the
//! fair share, asking for a hand-over), `load_balance` (giving a shard to balance load),
//! `janitor` (deleting rows nothing needs), `shard_task`
//! (spawning a held shard's reader and keeper), `ring_watch` (watching the ring successor,
//! burials) and `store_calls` (the bounded store calls they share). The jobs extend `State`
//! with `impl` blocks and import nothing of each other; the ring watch and the store calls
//! import nothing of this file.
//!
//! # Every store call is bounded
//!
//! Each store call of the coordinator is cut off after a lease duration (`bounded`), so a
//! store that does not answer delays a take round but never stops the coordinator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use kinesis_dispatch::DeliverySender;
use kinesis_lease_core::{ErrorChain, Holder, LeaseStore};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{interval, Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::abort_on_drop::AbortOnDrop;
use crate::member::{member_key, Member};
use crate::member_state::MemberState;
use crate::roster;
use crate::shared::{Exit, Report, Shared};
use crate::{CoordinatorHandle, ReaderConfig};
use kinesis_shard_reader::start::StartPlan;
use kinesis_shard_reader::{Phase, ReadContext};
use kinesis_stream_core::{KinesisApi, ReaderError};
use store_calls::bounded;

mod discovery;
mod janitor;
mod link;
mod listing;
mod load_balance;
mod ring_watch;
mod shard_task;
mod store_calls;
mod take_round;

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
                    .collect::<BTreeMap<_, _>>(),
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
        let span =
            tracing::info_span!("coordinator", stream = %config.stream, owner = %config.owner);
        let shared = Arc::new(Shared {
            metrics: crate::metrics::StreamMetrics::new(&config.stream),
            read: Arc::new(ReadContext::new(config.read_settings(), kinesis)),
            config,
            store,
            sender,
            phase: watch::Sender::new(Phase::Running),
            reports: reports_tx,
            held: Mutex::default(),
            member: watch::Sender::new(MemberState::outside()),
            bump_owed: std::sync::atomic::AtomicBool::new(false),
            move_bump_in_flight: std::sync::atomic::AtomicBool::new(false),
            roster_bump_owed: std::sync::atomic::AtomicBool::new(false),
            legacy_rows: std::sync::atomic::AtomicBool::new(false),
            poke_hand_overs: std::sync::atomic::AtomicBool::new(false),
            pokes_seen: std::sync::atomic::AtomicU64::new(0),
            aside: Mutex::default(),
        });
        let state = State {
            shared: shared.clone(),
            _aside: crate::shared::AbortAside(shared.clone()),
            stream_shards: BTreeMap::new(),
            rows_created: BTreeSet::new(),
            observed: BTreeMap::new(),
            tasks: JoinSet::new(),
            tokens: BTreeMap::new(),
            pending: BTreeMap::new(),
            sync_failed: false,
            epoch: None,
            epoch_at: Instant::now(),
            relist_at: Some(Instant::now()),
            members: BTreeSet::new(),
            link: Arc::default(),
            member: None,
            watcher: None,
            departed: BTreeSet::new(),
            synced_at: None,
            first_seen: BTreeMap::new(),
            gone_since: BTreeMap::new(),
            first_round_at: None,
            left_free: BTreeSet::new(),
            asked: None,
            giving: None,
            balance_soon: None,
            far_blocked: 0,
            cooling: Vec::new(),
            read_back: BTreeMap::new(),
            loads_seen: false,
            peers: std::collections::BTreeMap::new(),
            listed_at: None,
            next_expiry: None,
        };
        let coordinator = tokio::spawn(state.run(reports).instrument(span));
        CoordinatorHandle {
            fatal: shared.read.fatal.subscribe(),
            shared,
            coordinator: Some(coordinator),
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
    /// Since when this instance has seen the row carry its token: since its holder took it,
    /// as near as the listings tell (see `take_plan::longest_held`); `None` when the row
    /// carried it at this instance's first listing (how long it had been held is not known).
    held_since: Option<Instant>,
    /// The load the row showed at the last listing (see `load_balance`'s exchanges).
    load: Option<kinesis_lease_core::Load>,
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
    /// The member row's pokes when the take was sent (see `quiet`).
    pokes: u64,
}

struct State {
    shared: Arc<Shared>,
    /// Ends the epoch bumps running aside when the coordinator ends (after a shutdown's last
    /// bump, which covers them, or when aborted).
    _aside: crate::shared::AbortAside,
    /// The stream's shards by id, from the last listing.
    stream_shards: BTreeMap<String, kinesis_stream_core::Shard>,
    rows_created: BTreeSet<String>,
    observed: BTreeMap<String, Seen>,
    tasks: JoinSet<()>,
    /// Tokens this coordinator wrote, per shard, while a row may still carry one of them.
    tokens: BTreeMap<String, BTreeSet<String>>,
    pending: BTreeMap<String, Pending>,
    /// The last ListShards failed: list again at the next take tick.
    sync_failed: bool,
    /// The stream's epoch at the last listing.
    epoch: Option<u64>,
    /// When the stream's epoch is read next (see `listing`).
    epoch_at: Instant,
    /// When the rows are to be listed again regardless of the epoch (`None`: only when the
    /// epoch moves).
    relist_at: Option<Instant>,
    /// The members the roster listed last (this instance included once joined).
    members: BTreeSet<String>,
    /// What this instance has seen of member rows, shared with the ring watch.
    link: Arc<link::Link>,
    /// The task renewing this instance's member row, and what stops it.
    member: Option<(tokio::sync::oneshot::Sender<()>, AbortOnDrop)>,
    /// The ring watch's task, and what tells it this instance has left.
    watcher: Option<(tokio::sync::oneshot::Sender<Instant>, AbortOnDrop)>,
    /// The owner ids whose member row the last roster listing showed as not held by them (left
    /// or buried).
    departed: BTreeSet<String>,
    /// When the last ListShards that succeeded was sent.
    synced_at: Option<Instant>,
    /// Per row, when a listing first showed it: a shard missing from a ListShards sent before
    /// that may just be newer than the listing, not gone.
    first_seen: BTreeMap<String, Instant>,
    /// Per finished row whose shard the stream no longer lists: since when (the send of the
    /// first ListShards that omitted it). The janitor deletes it a lease later.
    gone_since: BTreeMap<String, Instant>,
    /// When the first take round planned: that round takes at most one row while no other
    /// owner is live, and rows left free wait longer for a list interval after it (see
    /// `take_plan`).
    first_round_at: Option<Instant>,
    /// Free or expired rows the last take round left to the other owners.
    left_free: BTreeSet<String>,
    /// The row this instance asked for, and when.
    asked: Option<(String, Instant)>,
    /// Balancing by load: the move or exchange this instance marked, on its way (see
    /// `load_balance`).
    giving: Option<load_balance::Giving>,
    /// Balancing by load: compare again this soon rather than at the next sample interval
    /// (while a shard given is on its way, and as soon as it has gone: see `load_balance`).
    balance_soon: Option<std::time::Duration>,
    /// Balancing by load: comparisons in a row at which this instance stood far above the
    /// mean and was kept from giving (see `load_balance`): it compares sooner, and reads more,
    /// for at most `load_balance::FAR_COMPARISONS` of them.
    far_blocked: u32,
    /// Balancing by load: the members the last move or exchange loaded, each not weighed as a
    /// taker for a while (see `load_balance`).
    cooling: Vec<load_balance::Cooling>,
    /// Balancing by load: rows of other members read before an exchange since the last
    /// listing: the load a row held by its listed holder showed then, or `None` for one that
    /// had moved (see `load_balance`'s exchanges). Cleared at each listing.
    read_back: BTreeMap<String, Option<kinesis_lease_core::Load>>,
    /// Balancing by load: the last member row compared showed a load. While none did (loads
    /// not published), shards are asked for by count as without the option.
    loads_seen: bool,
    /// Balancing by load: each member row read lately, what it weighed (`None`: not a taker
    /// then) and when (see `load_balance`). Ordered, so that equal weights pick alike from run
    /// to run.
    peers: std::collections::BTreeMap<String, load_balance::Peer>,
    /// When the rows were last listed (`observed` is what that listing showed).
    listed_at: Option<Instant>,
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
        // Balancing by load: instances started together compare themselves at moments spread
        // over the interval, not all at once.
        let every = crate::load_plan::SAMPLE_INTERVAL;
        let mut balance =
            tokio::time::interval_at(Instant::now() + every.mul_f64(1.0 + fastrand::f64()), every);
        balance.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Fan-out: the consumer is registered and ACTIVE before any shard is taken.
        if let Some(name) = &config.fan_out {
            let registered = tokio::select! {
                biased;
                _ = kinesis_shard_reader::control::left_running(&mut phase) => return,
                registered = kinesis_shard_reader::register_consumer(&shared.read, name) => registered,
            };
            match registered {
                Ok(arn) => {
                    let _ = shared.read.consumer_arn.set(arn);
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
            _ = kinesis_shard_reader::control::left_running(&mut phase) => return,
            joined = Member::join(&shared) => joined,
        };
        match joined {
            Ok(Some(member)) => {
                // A member row kept from an earlier incarnation keeps its count of pokes: those
                // are no hand-overs on their way in (`Load::pokes_seen`), from the first
                // renewal on.
                let pokes = shared.member.borrow().pokes;
                shared
                    .pokes_seen
                    .store(pokes, std::sync::atomic::Ordering::SeqCst);
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
        // Takes wait for the join's roster bump (`MemberState::may_take`); once it lands, the
        // take round runs at once rather than at the next tick (a start was a second later).
        let mut membership = shared.member.subscribe();
        let (mut may_take, mut seen_pokes) = {
            let state = membership.borrow_and_update();
            (state.may_take(), state.pokes)
        };
        // Pokes seen but acted on only by the next take round (it lists the rows): published
        // as acted on once that round ran (`Load::pokes_seen`).
        let mut pokes_owed: Option<u64> = None;
        loop {
            tokio::select! {
                biased;
                _ = kinesis_shard_reader::control::left_running(&mut phase) => break,
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
                _ = take.tick() => {
                    self.tick().await;
                    if let Some(pokes) = pokes_owed.take() {
                        shared
                            .pokes_seen
                            .store(pokes, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                _ = balance.tick(), if config.balance_by_load => {
                    self.balance_by_load().await;
                    if let Some(after) = self.balance_soon.take() {
                        balance.reset_after(after);
                    }
                }
                Ok(()) = membership.changed() => {
                    let (now, pokes, poked) = {
                        let state = membership.borrow_and_update();
                        (state.may_take(), state.pokes, state.poked.clone())
                    };
                    if pokes != seen_pokes {
                        // Poked once about a row not held here (a row handed to this
                        // instance, see `Shared::announce_hand_over`): take it. Poked more
                        // than once since the last renewal (which rows, the member row does
                        // not tell): list the rows at the next take tick.
                        let once = pokes == seen_pokes + 1;
                        seen_pokes = pokes;
                        let held_now = match poked.as_deref() {
                            Some(shard) if once => {
                                if !shared.held().contains_key(shard) {
                                    self.take_handed(shard).await;
                                }
                                shared.held().contains_key(shard)
                            }
                            _ => {
                                self.relist_now();
                                false
                            }
                        };
                        // Acted on now when the row poked about is held here (taken, or a
                        // row of ours asked for); else at the next take round, which lists.
                        if held_now {
                            shared
                                .pokes_seen
                                .store(pokes, std::sync::atomic::Ordering::SeqCst);
                        } else {
                            pokes_owed = Some(pokes);
                        }
                    }
                    if now && !may_take {
                        self.relist_now();
                        self.tick().await;
                    }
                    may_take = now;
                }
            }
            // Reap finished shard tasks, so the set holds live ones only.
            while self.tasks.try_join_next().is_some() {}
            if shared.read.fatal.borrow().is_some() {
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
        // Takes whose answer was lost and that no listing adopted since (none runs once the
        // shutdown began): a landed one holds its row with no keeper, unread, and nobody takes
        // a present member's row before it leaves. Released here, fenced on their token (one
        // that never landed is refused, and nothing else happens).
        for (shard, pending) in std::mem::take(&mut self.pending) {
            let Ok(key) = kinesis_lease_core::LeaseKey::new(config.stream.as_str(), shard.as_str())
            else {
                continue;
            };
            if self.release_unread(&key, &pending.holder).await {
                tracing::info!(%shard, "a take whose answer was lost had landed; released unread");
            }
        }
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
            // The round the hand-over's epoch bump starts (sent aside as the keeper ended) may
            // come before or after this; the row may name an instance that has left since it
            // asked. Placed by load, the taker is poked instead and the epoch moves only when
            // it does not take the row in time (`Shared::announce_hand_over`): nothing here
            // to list for.
            Exit::HandedOver => {
                if !self
                    .shared
                    .poke_hand_overs
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    self.relist_now();
                }
            }
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
}
