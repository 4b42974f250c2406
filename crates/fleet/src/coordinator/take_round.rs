//! The take round: from one listing, takes the rows this instance may read (free, handed
//! over to it, or expired by its own observation), up to its fair share, parents before
//! children, every take fenced on the counter seen; below its share with nothing free, asks
//! one holder above its share to hand a shard over.

use crate::roster;
use crate::take_plan;
use kinesis_lease_core::{Backoff, ErrorChain, Holder, Lease, LeaseKey, Outcome, Take};
use kinesis_shard_reader::control::Phase;
use kinesis_shard_reader::start::{self};
use std::collections::{BTreeMap, BTreeSet};
use tokio::time::Instant;

use super::store_calls::bounded;
use super::{Pending, State};

impl State {
    pub(super) async fn take_round(&mut self) {
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
        for (row, holder) in self.adopt_pending(&rows) {
            self.let_go_of_late_take(&row, &holder).await;
        }
        self.nudge_keepers(&rows);
        // The roster, read after the rows: an owner absent from it held nothing, when the rows
        // were read, that it could still act on (see `roster`).
        if !self.list_roster().await {
            self.relist_now();
            return;
        }
        if !shared.member.borrow().may_take() {
            // Not a member now (joining again after being found dead, or renewals failing), or
            // the others may not have listed this instance yet (its join's roster bump has not
            // landed): take nothing until then.
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
        // The operator's hold is no instance's: it makes no quiet keeper renew.
        let legacy_held = rows.iter().any(|r| {
            !r.is_held_by(&config.owner)
                && !kinesis_lease_core::rules::is_evicted(r)
                && r.token
                    .as_deref()
                    .is_some_and(|t| !roster::is_roster_token(t))
        });
        shared
            .legacy_rows
            .store(legacy_held, std::sync::atomic::Ordering::Relaxed);
        let still: BTreeMap<String, std::time::Duration> = self
            .observed
            .iter()
            .map(|(shard, seen)| (shard.clone(), now.duration_since(seen.since)))
            .collect();
        let held: BTreeSet<String> = shared.held().keys().cloned().collect();
        let pending: BTreeSet<String> = self.pending.keys().cloned().collect();
        let gone = self.parents_gone(&rows);
        let readable = take_plan::readable(&rows, |parent| !gone.contains(parent));
        let first_round = self.first_round_at.is_none();
        let starting = self
            .first_round_at
            .is_none_or(|at| now.duration_since(at) < config.list_interval);
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
            starting,
        };
        self.first_round_at.get_or_insert(now);
        let plan = take_plan::plan(readable, &view);
        tracing::debug!(members = ?self.members, target = plan.target, room = plan.room, candidates = plan.candidates.len(), "take round");
        self.next_expiry = plan.next_expiry.map(|left| now + left);
        let mut room = plan.room;
        let mut left_over = false;
        let mut took_any = false;
        let mut lost_any = false;
        let mut left_free = BTreeSet::new();
        for (rank, row) in plan.candidates {
            // Rows handed over to us, and our own rows whose keeper ended, are always taken.
            if room == 0 && !rank.past_share() {
                left_over = true;
                left_free.insert(row.key.shard().to_owned());
                continue;
            }
            match self
                .take_row(row, rank == take_plan::Rank::HandedToMe)
                .await
            {
                Took::Written => {
                    room = room.saturating_sub(1);
                    took_any = true;
                }
                Took::Lost => lost_any = true,
                Took::Failed => {}
                Took::Stopped => break,
            }
        }
        // What a first round withheld was to make this instance visible, not others' shares.
        let left_free = if first_round {
            BTreeSet::new()
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
        if held_now + 1 < plan.target && !self.balanced_by_load() {
            // Well below the fair share (the rows may be held by a member that will hand them
            // over, or freed by a change whose notice was lost): look again in a while.
            self.relist_by(now + config.lease_duration);
        }
        if plan.held_back {
            // Rows left free not taken past the share for now (see `take_plan`): nothing else
            // may list again before the epoch moves, so look at the next take tick.
            self.relist_now();
        }
        if (left_over || took_any || lost_any) && held_now < plan.target {
            // Rows this round left free for the others (see `take_plan`), or rows lost to
            // others' takes while more may have been freed since, or rows that moved since the
            // listing (an operator's release landing between the listing and the take: the
            // row is free, and its notice may have come before the listing's answer; sim seed
            // 46072): list again at the next take tick. A round that takes nothing, loses
            // nothing and leaves nothing waits for the epoch to move.
            self.relist_now();
        }
        self.ask_for_one(&plan.readable, &plan.live, plan.target)
            .await;
        self.clean_up(&rows).await;
    }

    /// Shards are placed by load here: the option is on, the members publish loads, and this
    /// instance holds some (one that holds nothing asks by count, so that turning the option
    /// on while the others have not cannot leave it empty). Counts then say nothing of the
    /// share: no asks by count, and no listing every lease for holding less than it.
    fn balanced_by_load(&self) -> bool {
        self.shared.config.balance_by_load && self.loads_seen && !self.shared.held().is_empty()
    }

    /// Below the fair share with nothing left to take: ask the most-loaded live owner for one
    /// shard, if it holds at least two more than this instance. Owners one apart do not move
    /// (hysteresis); every move narrows the spread, so shares converge (16 over 3: 6 + 5 + 5).
    pub(super) async fn ask_for_one(
        &mut self,
        readable: &[&Lease],
        live: &BTreeSet<String>,
        target: usize,
    ) {
        let shared = self.shared.clone();
        let config = &shared.config;
        if self.balanced_by_load() {
            // The heavier members give (see `load_balance`): nobody asks by count.
            return;
        }
        // Shutting down: a row handed here would not be taken, and would wait unread for the
        // end of the drain (as a take would: see `take_row`).
        if *shared.phase.borrow() != Phase::Running {
            return;
        }
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
        let victim = ask.owner;
        let now = Instant::now();
        // One of the rows it has held longest, for half a lease at least (not one it has only
        // just taken: see `take_plan::longest_held`); none such: look again once the longest
        // held is.
        let at_least = config.lease_duration / 2;
        let held_for = |row: &Lease| {
            self.observed
                .get(row.key.shard())
                .and_then(|seen| seen.held_since)
                .map(|since| now.duration_since(since))
        };
        let open = take_plan::longest_held(&ask.open, held_for, at_least);
        if open.is_empty() {
            let longest = ask.open.iter().filter_map(|r| held_for(r)).max();
            let wait = at_least.saturating_sub(longest.unwrap_or_default());
            self.relist_by(now + wait.max(config.take_interval));
            return;
        }
        let row = open[fastrand::usize(..open.len())];
        let asked = bounded(
            &shared,
            "request",
            shared.store.request(&row.key, &config.owner, victim),
        );
        match asked.await {
            Ok(Outcome::Written(_)) => {
                tracing::info!(shard = %row.key.shard(), %victim, mine, theirs = ask.holds, target, "asked for a shard");
                super::store_calls::poke_holder(&shared, &row.key, victim);
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
}

/// How a take of one row went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Took {
    /// Taken: its reader runs.
    Written,
    /// The row moved since it was read.
    Lost,
    /// No answer: settled at the next listing (pending).
    Failed,
    /// Not sent: the subscription is shutting down.
    Stopped,
}

impl State {
    /// Poked about `shard`, a row not held here: when it was handed to this instance (a move
    /// by load, see `Shared::announce_hand_over`), reads that one row and takes it, rather
    /// than list every row. A row in an operator's hold was poked about by the operator's
    /// move: announced (`Shared::announce_move`) and the rows listed. A row that names another
    /// owner or none was poked about for something already over (a request its holder here
    /// answered by handing the row over before this poke was seen): nothing to do. Anything else (a row of this owner id with a
    /// token, a read that fails, this instance not taking now, a take of it in flight) lists
    /// the rows at the next take tick.
    ///
    /// Parents are not checked, as the take round's `take_plan::readable` does: a row is
    /// handed over only by a holder that read it, so its parents were finished then, and a
    /// finished row is never read again.
    pub(super) async fn take_handed(&mut self, shard: &str) {
        let shared = self.shared.clone();
        let config = &shared.config;
        if !shared.member.borrow().may_take()
            || self.pending.contains_key(shard)
            || shared.held().contains_key(shard)
        {
            self.relist_now();
            return;
        }
        let Ok(key) = shared.key(shard) else {
            self.relist_now();
            return;
        };
        let row = match bounded(&shared, "read", shared.store.read(&key)).await {
            Ok(Some(row)) => row,
            _ => {
                self.relist_now();
                return;
            }
        };
        if kinesis_lease_core::rules::is_evicted(&row) {
            // The poke was an operator's move of a row that named this instance (the command
            // line pokes the member the row names): handed here and not taken yet, or held
            // here and its keeper already stopped. Should the epoch bump after the evict have
            // failed, this instance may be the only one that knows: announced, and listed here
            // (simulation seed 71074: nobody listed, the shard stood unread for 95 s). When the
            // keeper announced it already, this is one bump more per move.
            tracing::info!(%shard, "poked about a row an operator moved: moving the epoch");
            shared.announce_move("an operator's move of a row that named this instance");
            self.relist_now();
            return;
        }
        if !row.is_held_by(&config.owner) {
            return;
        }
        if row.token.is_some() || row.is_finished() {
            self.relist_now();
            return;
        }
        tracing::debug!(%shard, "poked about a row handed here: taking it");
        let took = self.take_row(&row, true).await;
        if took == Took::Written && !self.balanced_by_load() {
            // It asks by count (it sees no loads, or has just taken its first row): a take
            // round at the next tick asks for the next one, as the epoch's move did.
            self.relist_now();
        }
    }

    /// A take that landed after the shutdown began (it was sent before, or its lost answer is
    /// found by a listing after): nothing here will read the shard, so the row is released at
    /// once, keeping the checkpoint the take wrote, and the epoch moves so that the others take
    /// it at their next epoch read, rather than the row being held unread until the drain ends
    /// (a keeper renews a held row while handlers finish;
    /// `a_take_that_lands_after_the_shutdown_began_is_let_go_at_once`).
    pub(super) async fn let_go_of_late_take(&self, lease: &Lease, holder: &Holder) {
        let shared = self.shared.clone();
        if self.release_unread(&lease.key, holder).await {
            tracing::info!(
                shard = %lease.key.shard(),
                "a take landed after the shutdown began: released at once, unread"
            );
            // No take tick of this instance retries a failed bump any more.
            shared
                .bump_epoch_leaving(
                    &shared.config.stream,
                    "released a take that landed after the shutdown began",
                )
                .await;
        }
    }

    /// Releases a row this instance holds under `holder` and never read (keeping its
    /// checkpoint), retrying failures for at most a lease, as a keeper's last release does: no
    /// keeper holds it, so nothing else would. True when the release landed (or may have: a
    /// retry refused after an attempt without an answer); false when the row is not held under
    /// `holder` (a take that never landed, or the row moved on) or every attempt failed (the row
    /// is then left as the leave leaves any it could not release).
    pub(super) async fn release_unread(&self, key: &LeaseKey, holder: &Holder) -> bool {
        let shared = self.shared.clone();
        let config = &shared.config;
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        let until = Instant::now() + config.lease_duration;
        let mut unanswered = false;
        loop {
            match bounded(&shared, "release", shared.store.release(key, holder, None)).await {
                Ok(Outcome::Written(_)) => return true,
                // After an attempt whose answer was lost, a refusal may be that attempt having
                // landed: say so, and the epoch moves (harmless if it had not).
                Ok(Outcome::Lost(_)) => return unanswered,
                Err(error) if Instant::now() >= until => {
                    tracing::warn!(shard = %key.shard(), error = %ErrorChain(&error), "could not release a row taken and never read");
                    return false;
                }
                Err(error) => {
                    tracing::debug!(shard = %key.shard(), error = %ErrorChain(&error), "release of a row never read failed; retrying");
                    unanswered = true;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Takes `row` as read (fenced on its counter), and starts its reader when the take lands.
    /// `handed`: it came by a hand-over, and stays a while (see `load_plan::dwell`). A take
    /// lost to our own row moving, or without an answer, lists again at the next take tick.
    pub(super) async fn take_row(&mut self, row: &Lease, handed: bool) -> Took {
        let shared = self.shared.clone();
        let config = &shared.config;
        // Shutting down: no new leases. A take round begun before the shutdown waits for its
        // epoch read and its listing (seconds on a slow table): a row it took after the drain
        // began stayed unread until the drain ended (the simulation's seed 6695: 4.5 s, the
        // shard read again 11.5 s after the leave before, against a bound of 11.5 s).
        if *shared.phase.borrow() != Phase::Running {
            return Took::Stopped;
        }
        let reposition = config.reposition();
        let plan = start::plan(
            row,
            &config.start_at,
            reposition.as_ref().map(|(p, m)| (*p, m.as_str())),
            config.clock.now_ms(),
            config.start_slack,
        );
        let mut take = Take::fenced(config.lease_duration, row.counter);
        take.checkpoint = plan.checkpoint.clone();
        take.repositioned = plan.marker.clone();
        let token = match handed {
            true => roster::new_token_handed(config.clock.now_ms()),
            false => roster::new_token(),
        };
        let holder = Holder::new(config.owner.clone(), token);
        let (incarnation, pokes) = {
            let member = shared.member.borrow();
            (member.incarnation, member.pokes)
        };
        let shard = row.key.shard().to_owned();
        self.tokens
            .entry(shard.clone())
            .or_default()
            .insert(holder.token.clone());
        let sent = Instant::now();
        match bounded(&shared, "take", shared.store.take(&row.key, &holder, &take)).await {
            Ok(Outcome::Written(lease)) => {
                if self.asked.as_ref().is_some_and(|(s, _)| *s == shard) {
                    self.asked = None;
                }
                if *shared.phase.borrow() != Phase::Running {
                    self.let_go_of_late_take(&lease, &holder).await;
                    return Took::Stopped;
                }
                self.start(lease, holder, plan, sent, incarnation, pokes);
                if handed {
                    if let Some(held) = shared.held().get_mut(&shard) {
                        held.movable_at = sent + crate::load_plan::dwell(true);
                    }
                }
                Took::Written
            }
            Ok(Outcome::Lost(lost)) => {
                tracing::debug!(%shard, holder = ?lost.holder, "take lost");
                if lost.holder.as_deref() == Some(config.owner.as_str()) {
                    // Our own row moved since the listing (a renewal whose answer was lost
                    // had landed): nobody else takes a present member's row, so unless we
                    // list again and retake it, it stays unread for good.
                    self.relist_now();
                }
                Took::Lost
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
                        pokes,
                    },
                );
                Took::Failed
            }
        }
    }
}
