//! The lease keeper of one shard: the only writer of its row while it is held.
//!
//! It renews every `renew_interval` in a task of its own, so a reader blocked on a full channel
//! still renews, and folds the due checkpoint into the renewal (one write per interval). It
//! writes `SHARD_END` when the reader reports the shard read and settled to its end, and the
//! final checkpoint with the release on shutdown. Every write is conditioned on this holding's
//! token, so nothing it writes can land once another instance (or another process with the same
//! owner id) has taken the row.
//!
//! # When the keeper gives up
//!
//! Another instance takes a row only after it has seen the row's counter stand still for a
//! whole lease duration on its own clock, so the lease is surely ours until `sent + lease`,
//! where `sent` is when the last write that landed was *sent* (its response may come much
//! later). The keeper stops the reader at `sent + lease - renew` on a timer of its own,
//! whatever renewals are doing (slow, failing or in flight): the renew interval is the margin
//! for handlers still running and for clocks that tick at slightly different rates. A lost
//! renewal stops the reader at once. Stopping revokes the shard's settlement: undelivered
//! records are dropped, and nothing more is written.
//!
//! With `ReaderConfig::quiet_idle`, a tick with nothing to checkpoint writes nothing: see
//! `quiet` for why that is safe and what makes such a keeper write at once.

use std::sync::Arc;

use kinesis_dispatch::{CheckpointCursor, ShardSettlement};
use kinesis_lease_core::{Checkpoint, ErrorChain, Holder, Lease, LeaseKey, LeaseResult, Outcome};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{interval_at, sleep_until, timeout_at, Instant, MissedTickBehavior};

use crate::keeper_rows::{release_landed, stored_checkpoint};
use crate::quiet::Quiet;
use crate::shared::{Exit, Shared};
use crate::{Release, ShardInfo};
use kinesis_lease_core::Backoff;
use kinesis_shard_reader::{KeeperCmd, Signal};
use kinesis_stream_core::ReaderError;

pub(crate) struct Keeper {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: LeaseKey,
    pub(crate) holder: Holder,
    pub(crate) settlement: Arc<ShardSettlement>,
    pub(crate) cursor: CheckpointCursor,
    pub(crate) signal: watch::Sender<Signal>,
    pub(crate) written: Arc<std::sync::Mutex<Option<Checkpoint>>>,
    /// When the write that took the row was sent.
    pub(crate) taken_at: Instant,
    /// The membership incarnation the row was taken under (see `member`).
    pub(crate) incarnation: u64,
    /// With `quiet_idle`: the pokes checked and the time they clear (see the module docs).
    pub(crate) quiet: Option<Quiet>,
    /// Rings when a listing shows this row wanted by another instance, or with a token not
    /// ours (a quiet keeper writes its row at once), and when this instance's coordinator
    /// marked the row to give it away by load (any keeper writes it at once, and hands it over).
    pub(crate) nudge: Arc<tokio::sync::Notify>,
    /// A keeper's write on a poke or a nudge goes no earlier than this (a failing store is not
    /// hammered).
    pub(crate) poke_retry_at: Instant,
    /// The shard's metrics and load, read at every tick; the load goes with every renewal.
    pub(crate) load: crate::shard_load::ShardLoad,
}

/// What one renewal came to.
enum Renewed {
    /// Landed; the row as it now stands.
    Landed(Box<Lease>),
    /// Failed; the deadline timer decides whether that matters.
    Failed,
    /// Lost, or the deadline passed: the reader is stopped.
    Gone(Exit),
}

impl Keeper {
    fn record_written(&mut self, checkpoint: &Checkpoint) {
        self.cursor.mark_written(checkpoint);
        *self.written.lock().unwrap_or_else(|p| p.into_inner()) = Some(checkpoint.clone());
    }

    fn lose(&self, why: &str) -> Exit {
        tracing::warn!(why, "lease lost; reader stops without checkpoint");
        self.shared.metrics.lost();
        // Cancels the handler attempts running on the shard: the next owner may take it a
        // renew interval from now, and they must not run beside its handlers.
        self.settlement.abandon();
        self.signal.send_replace(Signal::Lost);
        Exit::Lost
    }

    /// A write of ours was refused: the row has another holding now. When that holding has
    /// our owner id, another live process uses it.
    fn lost_to(&self, holder: Option<&str>, why: &str) -> Exit {
        let owner = &self.shared.config.owner;
        if holder == Some(owner.as_str()) {
            self.shared.fail(ReaderError::OwnerInUse {
                owner: owner.clone(),
                stream: self.key.stream().to_owned(),
                shard: self.key.shard().to_owned(),
            });
        }
        if holder == Some(kinesis_lease_core::rules::EVICTED_OWNER) {
            // An operator moved the row: announced at once, not at the next take tick (seed
            // 76634 crashed 0.7 s after it learnt of the move, the bump still owed).
            self.shared.announce_move("an operator's move");
        }
        self.lose(why)
    }

    /// The latest time the reader may go on, given when the last landed write was sent.
    fn deadline_after(&self, sent: Instant) -> Instant {
        sent + self.shared.config.keep_for()
    }

    /// When the keeper must stop, given its own `deadline`: the earlier of it and the
    /// membership's, or now once the membership it was taken under is gone.
    fn lapse_at(&self, deadline: Instant) -> Instant {
        let member = self.shared.member.borrow().clone();
        if member.incarnation != self.incarnation {
            return Instant::now();
        }
        let legacy = self
            .shared
            .legacy_rows
            .load(std::sync::atomic::Ordering::Relaxed);
        let own = match &self.quiet {
            // Instances of a release before the roster take rows that stood still for a
            // lease: the row's own writes decide then, not the member row.
            Some(quiet) if !legacy => deadline.max(quiet.observe(&member)),
            _ => deadline,
        };
        own.min(member.deadline)
    }

    /// Resolves once [`lapse_at`](Self::lapse_at) has passed, following the membership as it
    /// is renewed or lost.
    async fn lapsed(&self, deadline: Instant) {
        let mut member = self.shared.member.subscribe();
        loop {
            member.borrow_and_update();
            let at = self.lapse_at(deadline);
            if Instant::now() >= at {
                return;
            }
            tokio::select! {
                biased;
                () = sleep_until(at) => {}
                _ = member.changed() => {}
            }
        }
    }

    /// One renewal with the due checkpoint and the shard's load, bounded by `deadline`.
    async fn renew(&mut self, deadline: Instant) -> (Renewed, Instant) {
        let load = self.load.measure(self.shared.config.clock.now_ms());
        let shared = self.shared.clone();
        let config = &shared.config;
        let due = self.cursor.due(&self.settlement);
        // The member state before the write is sent: pokes it shows are checked if it lands.
        let before = self.shared.member.borrow().clone();
        let sent = Instant::now();
        let lapse = self.lapse_at(deadline);
        let renewed = if sent >= lapse {
            None
        } else {
            let call = shared.store.renew_with_load(
                &self.key,
                &self.holder,
                config.lease_duration,
                due.as_ref(),
                &load,
            );
            let renewed = timeout_at(lapse, call).await.ok();
            shared.metrics.renewed(sent.elapsed());
            renewed
        };
        let Some(renewed) = renewed else {
            return (
                Renewed::Gone(self.lose("no renewal landed within lease - renew")),
                deadline,
            );
        };
        match renewed {
            Ok(Outcome::Written(row)) => {
                self.load.landed(load);
                if let Some(cp) = &due {
                    self.record_written(cp);
                }
                if let Some(quiet) = &self.quiet {
                    // Every poke up to `before.pokes` came before this write was sent, and it
                    // landed: none of them evicted this holding.
                    if before.incarnation == self.incarnation {
                        quiet.checked_up_to(before.pokes);
                    }
                }
                tracing::trace!(checkpoint = ?due.as_ref().map(ToString::to_string), "renewed");
                (Renewed::Landed(Box::new(row)), self.deadline_after(sent))
            }
            Ok(Outcome::Lost(lost)) => {
                tracing::warn!(holder = ?lost.holder, counter = lost.counter, "renewal lost");
                (
                    Renewed::Gone(self.lost_to(lost.holder.as_deref(), "renewal lost")),
                    deadline,
                )
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "renewal failed");
                (Renewed::Failed, deadline)
            }
        }
    }

    /// Renews until the shard is let go. `ready` fires once the `on_taken` hook has returned:
    /// the reader starts then, and never when the lease is lost first.
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<KeeperCmd>,
        ready: oneshot::Sender<()>,
    ) -> Exit {
        let every = self.shared.config.renew_interval;
        let mut deadline = self.deadline_after(self.taken_at);
        // The first renewal a renew interval after the take's send, or at once if its answer
        // came later: the deadline counts from the send, and a take may be answered late.
        let first = (self.taken_at + every).max(Instant::now());
        let mut tick = interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let hooks = self.shared.config.hooks.clone();
        if hooks.has_taken() {
            let info = self.info(self.written_last());
            if let Err(exit) = self
                .run_hook(hooks.taken(info), &mut deadline, &mut tick)
                .await
            {
                return exit;
            }
        }
        let _ = ready.send(());
        let mut phase = self.shared.phase.subscribe();
        let mut commands_open = true;
        loop {
            tokio::select! {
                biased;
                () = self.lapsed(deadline) => return self.lose("no renewal landed within lease - renew"),
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(KeeperCmd::ShardEnd) => {
                        let wait = self.shared.config.lease_duration;
                        return self.finish(Some(Checkpoint::ShardEnd), Release::ShardEnd, deadline, wait).await;
                    }
                    Some(KeeperCmd::Release) => {
                        let due = self.cursor.due(&self.settlement);
                        let wait = self.shared.config.lease_duration;
                        return self.finish(due, Release::Stopping, deadline, wait).await;
                    }
                    None => {
                        commands_open = false;
                        continue;
                    }
                },
                _ = kinesis_shard_reader::control::releasing(&mut phase) => {
                    let due = self.cursor.due(&self.settlement);
                    return self.finish(due, Release::Stopping, deadline, std::time::Duration::ZERO).await;
                }
                // The branches below fall through to one renewal after the `select!`.
                () = self.poked() => {
                    // A quiet keeper: somebody else wrote rows of this instance; or any keeper:
                    // its row was marked to be given. Write ours now (see `quiet`); the next
                    // poke or nudge waits a third of a renew interval, so a failing store is
                    // not hammered.
                    self.poke_retry_at = Instant::now() + self.shared.config.renew_interval / 3;
                    tracing::debug!("poked: writing the row to check it");
                }
                _ = tick.tick() => {
                    // Idle, quiet: the member row's renewal stands for this one (and carries
                    // this shard's load in its total), unless the row's load is out of date.
                    if self.may_skip() && !self.load.drifted(self.shared.config.clock.now_ms()) {
                        continue;
                    }
                }
            }
            let (renewed, next) = self.renew(deadline).await;
            deadline = next;
            match self.after_renewal(renewed) {
                Ok(Some(asker)) => return self.hand_off(asker, deadline, tick).await,
                Ok(None) => {}
                Err(exit) => return exit,
            }
        }
    }

    /// What a renewal of the main loop asks for next: `Err` with the exit when the keeper is
    /// done, `Ok(Some(asker))` when the row is wanted by another instance.
    fn after_renewal(&self, renewed: Renewed) -> Result<Option<String>, Exit> {
        match renewed {
            Renewed::Landed(row) => {
                let owner = &self.shared.config.owner;
                Ok(row.wanted_by.filter(|a| a != owner))
            }
            Renewed::Failed => Ok(None),
            Renewed::Gone(exit) => Err(exit),
        }
    }

    /// Waits for `until_done` while renewing every renew interval, at most until `bound`.
    /// `Ok(true)`: done; `Ok(false)`: the bound passed (or shutdown began, when
    /// `stop_on_release`); `Err`: the lease was lost meanwhile.
    async fn wait_renewing(
        &mut self,
        until_done: impl std::future::Future<Output = ()>,
        bound: Instant,
        deadline: &mut Instant,
        tick: &mut tokio::time::Interval,
        stop_on_release: bool,
    ) -> Result<bool, Exit> {
        tokio::pin!(until_done);
        let mut phase = self.shared.phase.subscribe();
        loop {
            tokio::select! {
                biased;
                () = self.lapsed(*deadline) => return Err(self.lose("no renewal landed within lease - renew")),
                () = &mut until_done => return Ok(true),
                () = sleep_until(bound) => return Ok(false),
                _ = kinesis_shard_reader::control::releasing(&mut phase), if stop_on_release => return Ok(false),
                _ = tick.tick() => {
                    let (renewed, next) = self.renew(*deadline).await;
                    *deadline = next;
                    if let Renewed::Gone(exit) = renewed {
                        return Err(exit);
                    }
                }
            }
        }
    }

    /// Revokes the shard (no new handler attempt starts) and waits, renewing, until no attempt
    /// runs; attempts still running a lease duration later are cancelled. Then nothing of this
    /// instance runs on the shard's records, and the final write may go. `Ok(false)` when
    /// something may still run: a stream consumer holding a delivery cannot be cancelled.
    async fn quiesce(
        &mut self,
        wait: std::time::Duration,
        deadline: &mut Instant,
        tick: &mut tokio::time::Interval,
    ) -> Result<bool, Exit> {
        self.settlement.revoke();
        let settlement = self.settlement.clone();
        let bound = Instant::now() + wait;
        if !self
            .wait_renewing(settlement.idle(), bound, deadline, tick, false)
            .await?
        {
            tracing::warn!("handlers still running a lease duration after the shard was revoked; cancelling them");
            self.settlement.abandon();
            // Handler attempts end at once when cancelled; a stream consumer still holding a
            // delivery cannot be cancelled, and is not waited for any longer.
            let grace = self.shared.config.renew_interval / 3;
            return Ok(tokio::time::timeout(grace, settlement.idle()).await.is_ok());
        }
        Ok(true)
    }

    /// Hands the shard to `asker`: stop reading, let what was handed out settle (renewing
    /// meanwhile, for at most two lease durations), wait until no handler runs, then one
    /// write moves the row with the final checkpoint. Whatever did not settle in time is
    /// dropped unsettled, so the new owner reads it again.
    async fn hand_off(
        mut self,
        asker: String,
        mut deadline: Instant,
        mut tick: tokio::time::Interval,
    ) -> Exit {
        let shared = self.shared.clone();
        let config = &shared.config;
        tracing::info!(%asker, "shard wanted by another instance; handing it over");
        self.signal.send_replace(Signal::Stop);
        let settle_by = Instant::now() + config.lease_duration * 2;
        let settlement = self.settlement.clone();
        let all_settled = match self
            .wait_renewing(
                settlement.all_settled(),
                settle_by,
                &mut deadline,
                &mut tick,
                true,
            )
            .await
        {
            Ok(settled) => settled,
            Err(exit) => return exit,
        };
        if !all_settled {
            tracing::warn!(%asker, "deliveries still unsettled at hand-over; they will be read again");
        }
        let wait = config.lease_duration;
        // An asker that began its shutdown since it asked takes nothing more: handed to it, the
        // row would stay unread until it left, its drain long (up to the shutdown deadline).
        // Its member row says so (capacity 0, written as its shutdown begins): release the row
        // instead, and move the epoch; the others take it within a take round or two (while
        // the asker still counts among the members, the first round may leave it to the next).
        // (Capacity 0 also stands for a join not announced yet, until the renewal sent once it
        // is: an asker asks only after that, and a member balancing by load names another
        // only after a consistent read of its row showed a capacity, so at most for a store
        // call's time.)
        if self.asker_leaving(&asker, deadline).await {
            tracing::info!(%asker, "the instance that asked for the shard takes nothing now (shutting down); releasing it instead");
            let due = self.cursor.due(&self.settlement);
            // On this timer: the read did not renew, and a fresh one would first renew a
            // renew interval after it, past the lease's lapse when the read was slow.
            let exit = self
                .finish_ticking(due, Release::AskerLeaving { asker }, deadline, wait, tick)
                .await;
            if matches!(exit, Exit::Released) {
                shared.bump_epoch_aside("released for an asker that is shutting down");
            }
            return exit;
        }
        let idle = match self.quiesce(wait, &mut deadline, &mut tick).await {
            Ok(idle) => idle,
            Err(exit) => return exit,
        };
        let checkpoint = self.cursor.due(&self.settlement);
        let why = Release::HandOver { to: asker.clone() };
        if let Err(exit) = self
            .before_final(checkpoint, why, &mut deadline, &mut tick)
            .await
        {
            return exit;
        }
        let checkpoint = self.cursor.due(&self.settlement);
        // Nothing of the shard is delivered or handled here from now on (the shard is revoked
        // and no handler runs): say so in the stats while the write that moves the row waits
        // for its answer (every answer may be lost for as long as the lease lasts, while the
        // asker already reads the shard). Not when a handler may still run.
        if idle {
            if let Some(held) = shared.held().get(self.key.shard()) {
                *held.handing_to.lock().unwrap_or_else(|p| p.into_inner()) = Some(asker.clone());
            }
        }
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        // Whether a hand-over was sent: one whose answer never came may have landed.
        let mut sent = false;
        loop {
            let store = shared.store.clone();
            let call = store.hand_over(
                &self.key,
                &self.holder,
                &asker,
                config.lease_duration,
                checkpoint.as_ref(),
            );
            sent |= Instant::now() < self.lapse_at(deadline);
            match self.bounded(deadline, call).await {
                None => {
                    // A write sent may have landed with its answer lost or late: the row may
                    // be the asker's now, and a row owned by a live member is nobody else's
                    // business (see `Shared::announce_unanswered`).
                    if sent {
                        shared.announce_unanswered(&self.key, Some(&asker));
                    }
                    return self.lose("could not hand over before the lease lapses");
                }
                Some(Ok(Outcome::Written(row))) => {
                    if let Some(cp) = &checkpoint {
                        self.record_written(cp);
                    }
                    tracing::info!(
                        %asker,
                        checkpoint = %stored_checkpoint(&row),
                        written = checkpoint.is_some(),
                        "shard handed over"
                    );
                    shared_metrics_handed_over(&self.shared);
                    shared.announce_hand_over(&self.key, &asker);
                    return Exit::HandedOver;
                }
                // An earlier attempt landed and only its response was lost.
                Some(Ok(Outcome::Lost(lost))) if lost.holder.as_deref() == Some(asker.as_str()) => {
                    tracing::info!(%asker, "shard handed over (an earlier attempt landed)");
                    shared_metrics_handed_over(&self.shared);
                    shared.announce_hand_over(&self.key, &asker);
                    return Exit::HandedOver;
                }
                Some(Ok(Outcome::Lost(lost))) => {
                    return self.lost_to(lost.holder.as_deref(), "lost before the hand-over")
                }
                Some(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "hand-over failed; retrying");
                    self.pause(backoff.next_delay(), deadline).await;
                }
            }
        }
    }

    /// Whether `asker`'s member row, read now (consistently), shows it present and shutting
    /// down (capacity 0). False when it cannot be read within a renew interval, or shows
    /// anything else: the hand-over goes on (a row handed to an instance that is gone is
    /// taken by anyone at the next listing, as a departed member's).
    async fn asker_leaving(&self, asker: &str, deadline: Instant) -> bool {
        let Ok(member) = LeaseKey::member(self.key.stream(), asker) else {
            return false;
        };
        let until = self
            .lapse_at(deadline)
            .min(Instant::now() + self.shared.config.renew_interval);
        match timeout_at(until, self.shared.store.read(&member)).await {
            Ok(Ok(Some(row))) => crate::roster::shows_leaving(&row, asker),
            _ => false,
        }
    }

    /// Runs the final-checkpoint hook (no handler runs on the shard now), renewing meanwhile;
    /// the hook's own bound ends it. `Err`: the lease was lost meanwhile.
    async fn before_final(
        &mut self,
        checkpoint: Option<Checkpoint>,
        why: Release,
        deadline: &mut Instant,
        tick: &mut tokio::time::Interval,
    ) -> Result<(), Exit> {
        let hooks = self.shared.config.hooks.clone();
        if !hooks.has_releasing() {
            return Ok(());
        }
        // The hook says the lease is being let go: only for a row still held. An operator's
        // move or an eviction since the last renewal is learnt at the next one, and during a
        // drain no listing nudges this keeper sooner, so one renewal (fenced like every write)
        // comes first (the simulation's seed 28445: a final hook ran 1.3 s after an operator
        // released the row, mid-drain).
        let (renewed, next) = self.renew(*deadline).await;
        *deadline = next;
        if let Renewed::Gone(exit) = renewed {
            return Err(exit);
        }
        // What the row will hold: the due checkpoint, or the one written last.
        let checkpoint = checkpoint.or_else(|| self.written_last());
        let info = self.info(checkpoint);
        self.run_hook(hooks.releasing(info, why), deadline, tick)
            .await
    }

    /// Runs a hook call while renewing. The call bounds itself; the margin of a renew interval
    /// only keeps this wait from ending first. `Err`: the lease was lost meanwhile.
    async fn run_hook(
        &mut self,
        call: impl std::future::Future<Output = ()>,
        deadline: &mut Instant,
        tick: &mut tokio::time::Interval,
    ) -> Result<(), Exit> {
        let config = &self.shared.config;
        let bound = after(
            config
                .hooks
                .bound_of_one()
                .saturating_add(config.renew_interval),
        );
        self.wait_renewing(call, bound, deadline, tick, false)
            .await
            .map(|_| ())
    }

    /// The last checkpoint this holding wrote (or found in the row when it took it).
    fn written_last(&self) -> Option<Checkpoint> {
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This shard, as a hook is told about it.
    fn info(&self, checkpoint: Option<Checkpoint>) -> ShardInfo {
        ShardInfo {
            stream: self.key.stream().to_owned(),
            shard: self.key.shard().to_owned(),
            checkpoint,
        }
    }

    /// Runs a store call unless `deadline` passes first (`None`). A deadline already past
    /// refuses the call outright: `timeout_at` would still run a call that answers at once,
    /// and a store failing fast would then be retried forever without time moving.
    async fn bounded<F: std::future::Future<Output = LeaseResult<Outcome>>>(
        &self,
        deadline: Instant,
        call: F,
    ) -> Option<LeaseResult<Outcome>> {
        let lapse = self.lapse_at(deadline);
        if Instant::now() >= lapse {
            return None;
        }
        timeout_at(lapse, call).await.ok()
    }

    async fn pause(&self, delay: std::time::Duration, deadline: Instant) {
        sleep_until((Instant::now() + delay).min(self.lapse_at(deadline))).await;
    }

    /// The last write of a held lease: release with `checkpoint`, retried until the deadline.
    /// The settlement is revoked first: deliveries of a released shard are dropped, never
    /// handed out after the final checkpoint was chosen.
    ///
    /// `wait`: how long to wait for handler attempts still running (none on shutdown: the
    /// broker's shutdown deadline has already passed, and what still runs is cut short).
    async fn finish(
        self,
        checkpoint: Option<Checkpoint>,
        why: Release,
        deadline: Instant,
        wait: std::time::Duration,
    ) -> Exit {
        let every = self.shared.config.renew_interval;
        let mut tick = interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.finish_ticking(checkpoint, why, deadline, wait, tick)
            .await
    }

    /// [`finish`](Self::finish) on the renewal timer of the caller (a hand-over turned
    /// release): a renewal it owes is sent at once, not a renew interval after a fresh timer.
    async fn finish_ticking(
        mut self,
        checkpoint: Option<Checkpoint>,
        why: Release,
        mut deadline: Instant,
        wait: std::time::Duration,
        mut tick: tokio::time::Interval,
    ) -> Exit {
        if self.settlement.is_revoked() {
            return Exit::Lost;
        }
        if let Err(exit) = self.quiesce(wait, &mut deadline, &mut tick).await {
            return exit;
        }
        let due = match checkpoint {
            Some(Checkpoint::ShardEnd) => Some(Checkpoint::ShardEnd),
            _ => self.cursor.due(&self.settlement),
        };
        if let Err(exit) = self.before_final(due, why, &mut deadline, &mut tick).await {
            return exit;
        }
        let checkpoint = match checkpoint {
            Some(Checkpoint::ShardEnd) => Some(Checkpoint::ShardEnd),
            // Handlers that ended meanwhile may have settled more.
            _ => self.cursor.due(&self.settlement),
        };
        let shared = self.shared.clone();
        let config = &shared.config;
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        // Whether a release was sent whose answer never came: it may have landed.
        let mut unanswered = false;
        loop {
            let store = self.shared.store.clone();
            let call = store.release(&self.key, &self.holder, checkpoint.as_ref());
            let sent = Instant::now() < self.lapse_at(deadline);
            match self.bounded(deadline, call).await {
                None => {
                    // A release sent may have landed with its answer lost or late: a free row
                    // is taken only once the epoch moves (a leaving instance's own bump covers
                    // its rows; a release for an asker that is shutting down has no other).
                    if sent || unanswered {
                        shared.announce_unanswered(&self.key, None);
                    }
                    return self.lose("could not release before the lease lapses");
                }
                Some(Ok(Outcome::Written(row))) => {
                    return self.released(checkpoint, Some(&row)).await
                }
                Some(Ok(Outcome::Lost(_)))
                    if unanswered && self.release_landed(checkpoint.as_ref(), deadline).await =>
                {
                    tracing::info!("an earlier release whose answer was lost had landed");
                    return self.released(checkpoint, None).await;
                }
                Some(Ok(Outcome::Lost(lost))) => {
                    // Refused, after a release whose answer was lost, with the row unread in
                    // time: that release may be what freed it.
                    if unanswered && lost.holder.is_none() {
                        shared.announce_unanswered(&self.key, None);
                    }
                    return self
                        .lost_to(lost.holder.as_deref(), "lost before the final checkpoint");
                }
                Some(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "release failed; retrying");
                    unanswered = true;
                    self.pause(backoff.next_delay(), deadline).await;
                }
            }
        }
    }

    /// The release with `checkpoint` landed: record it, and after a shard end tell the others.
    ///
    /// The log says what the row holds (`row`, when the release's answer came back; else the
    /// checkpoint last written), not only what this release carried: a release with nothing
    /// new to checkpoint keeps the row's checkpoint.
    async fn released(&mut self, checkpoint: Option<Checkpoint>, row: Option<&Lease>) -> Exit {
        if let Some(cp) = &checkpoint {
            self.record_written(cp);
        }
        let ended = checkpoint == Some(Checkpoint::ShardEnd);
        let holds = match row {
            Some(row) => stored_checkpoint(row),
            None => checkpoint
                .as_ref()
                .map_or_else(|| "unchanged".to_owned(), ToString::to_string),
        };
        tracing::info!(
            checkpoint = %holds,
            written = checkpoint.is_some(),
            ended,
            "lease released"
        );
        if ended {
            // Other instances may read the children now.
            self.shared.bump_epoch("shard end").await;
            Exit::Ended
        } else {
            Exit::Released
        }
    }

    /// A release retried after one whose answer was lost was refused: reads the row (retrying
    /// until the deadline) to see whether the earlier release landed. False when the row says
    /// otherwise or cannot be read in time: the lease then counts as lost.
    async fn release_landed(&self, checkpoint: Option<&Checkpoint>, deadline: Instant) -> bool {
        let config = &self.shared.config;
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        loop {
            let lapse = self.lapse_at(deadline);
            if Instant::now() >= lapse {
                return false;
            }
            match timeout_at(lapse, self.shared.store.read(&self.key)).await {
                Err(_) => return false,
                Ok(Ok(row)) => {
                    return row.is_some_and(|row| release_landed(&row, &self.holder, checkpoint))
                }
                Ok(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "reading the row after a refused release failed; retrying");
                    self.pause(backoff.next_delay(), deadline).await;
                }
            }
        }
    }
}

/// `wait` from now, or a year from now when that would overflow the clock (a huge hook bound).
fn after(wait: std::time::Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(365 * 24 * 3600))
}

fn shared_metrics_handed_over(shared: &crate::shared::Shared) {
    shared.metrics.handed_over();
}
