//! Balancing by load (`ReaderConfig::balance_by_load`): every sample interval this instance
//! reads one other member's row, picked at random (one small eventually consistent read, half
//! a read unit on DynamoDB, whatever the number of shards or members), weighs itself against it
//! (`load_plan`) and, when a move of one of its shards is worth it, confirms the member with a
//! consistent read and marks that row wanted by it. Its own keeper then hands the shard over as
//! it does for any request: the reader stops, what was handed out settles, one write moves the
//! row, the other member is poked about it (`Shared::announce_hand_over`; the epoch moves only
//! when it cannot be), and it takes the row and starts after the checkpoint.
//!
//! One move at a time: no new one while the last shard given is still held here (for at most
//! six leases). A member whose row this instance has seen stand still for a lease (these
//! readings count with the watch's: `Link`), or that publishes no capacity because it is
//! shutting down, is never given a shard. Each store call here is cut off after a take
//! interval, so a slow table skips a comparison rather than hold up the take rounds.
//!
//! When no single shard may go, an exchange may (`load_plan::swap`): this instance first marks
//! the taker's chosen shards wanted by itself (the taker's keepers hand them over, as to any
//! asker) and gives its own only when, with the marks that landed, the taker still ends lighter
//! than this instance was. An exchange makes up to ten store calls (each cut off as above) in
//! the coordinator's loop, so a slow table delays the take rounds by up to ten take intervals
//! at such a comparison.
//!
//! Where loads are not published (a store without `renew_with_load`, members of an earlier
//! release), nothing is weighed and the instance asks for shards by count as without the
//! option (`State::loads_seen`); an instance that holds nothing asks by count too, so one that
//! turns the option on while the others have not is not left empty.

use std::future::Future;

use kinesis_lease_core::{ErrorChain, Lease, LeaseResult, Load, Outcome};
use tokio::time::Instant;

use crate::load_plan::{self, Movable, Side};

use super::State;

/// What a member row says of its member as a taker.
enum Taker {
    /// Present, renewing, and weighed.
    Weighed(Side),
    /// Present, but publishes no capacity: it is shutting down.
    Leaving,
    /// It publishes no load (an earlier release, or a store that does not keep loads).
    Unweighed,
    /// Not held by it, or seen standing still for a lease.
    Gone,
}

impl State {
    /// One comparison with a member picked at random, and the move it calls for, if any.
    pub(super) async fn balance_by_load(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        if !shared.member.borrow().may_take() {
            return;
        }
        let now = Instant::now();
        if let Some((shard, at)) = &self.giving {
            if shared.held().contains_key(shard)
                && now.duration_since(*at) < config.lease_duration * 6
            {
                return;
            }
            self.giving = None;
        }
        // The roster as last listed, by this coordinator or by the watch (which lists it as
        // soon as a member joins or leaves).
        let mut others: Vec<String> = self
            .members
            .union(&self.link.present())
            .filter(|m| **m != config.owner)
            .cloned()
            .collect();
        if others.is_empty() {
            return;
        }
        others.sort_unstable();
        let taker = others.swap_remove(fastrand::usize(..others.len()));
        let Ok(key) = crate::member::member_key(&config.stream, &taker) else {
            return;
        };
        let Some(Ok(row)) = self.quick(shared.store.read_eventually(&key)).await else {
            return;
        };
        // The number of shards it says it holds: whether the last listing still shows them.
        let their_count = row.as_ref().and_then(|r| r.load.as_ref()?.shards);
        let theirs = match self.as_taker(row.as_ref(), &taker, now) {
            Taker::Weighed(side) => side,
            Taker::Unweighed => {
                self.loads_seen = false;
                shared
                    .poke_hand_overs
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                return;
            }
            Taker::Leaving | Taker::Gone => return,
        };
        self.loads_seen = true;
        shared
            .poke_hand_overs
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let Some(mine) = Side::of(&shared.instance_load()) else {
            return;
        };
        let mut movable: Vec<Movable> = shared
            .held()
            .iter()
            .filter(|(_, held)| now >= held.movable_at)
            .filter(|(_, held)| {
                held.handing_to
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_none()
            })
            .filter_map(|(shard, held)| {
                let load = (*held.load.lock().unwrap_or_else(|p| p.into_inner()))?;
                Some(Movable {
                    shard: shard.clone(),
                    load,
                })
            })
            .collect();
        // By shard id: the planner keeps the first of equal candidates, and the held map's
        // order differs from run to run (a seeded simulation replays exactly).
        movable.sort_by(|a, b| a.shard.cmp(&b.shard));
        let (shard, back) = match load_plan::choose(mine, theirs, &movable) {
            Some(shard) => (shard.to_owned(), Vec::new()),
            None => {
                // No single shard may go: perhaps an exchange, against the taker's shards as
                // the last listing showed them. Placed by load, hand-overs do not move the
                // epoch (only their takers list), so that listing may be out of date: when the
                // pair is far enough apart for an exchange and the listing shows the taker
                // holding another number of shards than its row says, list again first (at
                // most once in six sample intervals) and weigh at a later comparison.
                if !load_plan::may_exchange(mine, theirs) {
                    return;
                }
                let theirs_held = self.held_by(&taker);
                let listed = self.held_by_count(&taker);
                let window = load_plan::SAMPLE_INTERVAL * 6;
                if their_count != Some(listed)
                    && self
                        .listed_at
                        .is_none_or(|at| now.duration_since(at) >= window)
                {
                    self.relist_now();
                    return;
                }
                let Some(swap) = load_plan::swap(mine, theirs, &movable, &theirs_held) else {
                    return;
                };
                let back = swap
                    .take
                    .iter()
                    .filter_map(|s| theirs_held.iter().find(|m| m.shard == *s).cloned())
                    .collect();
                (swap.give.to_owned(), back)
            }
        };
        let given = movable
            .iter()
            .find(|m| m.shard == shard)
            .map(|m| m.load)
            .unwrap_or_default();
        // An eventually consistent reading decides nothing alone: confirm the member is there,
        // renewing, and not leaving.
        let Some(Ok(row)) = self.quick(shared.store.read(&key)).await else {
            return;
        };
        if !matches!(
            self.as_taker(row.as_ref(), &taker, Instant::now()),
            Taker::Weighed(_)
        ) {
            return;
        }
        if !back.is_empty() && !self.take_back((mine, theirs), &given, &back, &taker).await {
            return;
        }
        let Ok(row_key) = shared.key(&shard) else {
            return;
        };
        let marked = self
            .quick(shared.store.request(&row_key, &taker, &config.owner))
            .await;
        // The keeper of a quiet row writes it only when told; it hands the row over at that
        // write when the mark landed (also when the answer was lost), and at the next listing
        // otherwise.
        let nudge = || {
            if let Some(held) = shared.held().get(&shard) {
                held.nudge.notify_one();
            }
        };
        match marked {
            Some(Ok(Outcome::Written(_))) => {
                tracing::info!(%shard, %taker, mine = mine.weight, theirs = theirs.weight, "giving a shard to balance load");
                nudge();
                self.giving = Some((shard, now));
            }
            Some(Ok(Outcome::Lost(lost))) => {
                // Marked already (by an asker, or by an earlier mark of ours whose answer was
                // lost): the keeper hands it over to whoever it names.
                if lost.holder.as_deref() == Some(config.owner.as_str()) {
                    nudge();
                    self.giving = Some((shard, now));
                }
            }
            Some(Err(error)) => {
                tracing::warn!(%shard, %taker, error = %ErrorChain(&error), "marking a shard to give failed");
                nudge();
                self.giving = Some((shard, now));
            }
            // No answer in time: it may land; wait as for one that did.
            None => {
                nudge();
                self.giving = Some((shard, now));
            }
        }
    }

    /// The rows the last listing showed `member` to hold under a token (a row handed to the
    /// member but not taken yet, or an orphan of its, would take a mark that its take then
    /// clears).
    fn listed_as_held_by<'a>(
        &'a self,
        member: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a super::Seen)> + 'a {
        self.observed
            .iter()
            .filter(move |(_, seen)| seen.owner.as_deref() == Some(member) && seen.token.is_some())
    }

    /// How many rows the last listing showed `member` to hold.
    fn held_by_count(&self, member: &str) -> u64 {
        self.listed_as_held_by(member).count() as u64
    }

    /// What the last listing showed `member` to hold, with loads, and not marked wanted.
    fn held_by(&self, member: &str) -> Vec<Movable> {
        self.listed_as_held_by(member)
            .filter(|(_, seen)| !seen.wanted)
            .filter_map(|(shard, seen)| {
                Some(Movable {
                    shard: shard.clone(),
                    load: seen.load?,
                })
            })
            .collect()
    }

    /// An exchange's first half: marks the taker's shards in `back` wanted by this instance
    /// (the taker's keepers hand them over, as to any asker). True when some landed and, with
    /// what landed, giving this instance's shard still leaves the taker lighter than this
    /// instance was and lowers the pair's sum of weight squared (`load_plan::exchange_lowers`):
    /// never a move that raises the largest weight. Marks that landed bring their shards here
    /// even when this instance's shard is not given then (there is no taking a mark back): it
    /// is heavier for a while, and gives again. Stops marking when this instance may no longer
    /// take (leaving, or its member row not renewed).
    async fn take_back(
        &mut self,
        (mine, theirs): (Side, Side),
        given: &Load,
        back: &[Movable],
        taker: &str,
    ) -> bool {
        let shared = self.shared.clone();
        let mut landed = Vec::new();
        for m in back {
            if !shared.member.borrow().may_take() {
                break;
            }
            let Ok(key) = shared.key(&m.shard) else {
                continue;
            };
            match self
                .quick(shared.store.request(&key, &shared.config.owner, taker))
                .await
            {
                Some(Ok(Outcome::Written(_))) => {
                    super::store_calls::poke_holder(&shared, &key, taker);
                    landed.push(m.load);
                }
                Some(Ok(Outcome::Lost(_))) => {}
                outcome => {
                    // It may have landed (the answer lost, or cut off): poke as for one that
                    // did, so that a quiet keeper does not hold the mark unanswered; counted
                    // as not landed, so the give below errs towards a lighter taker.
                    if let Some(Err(error)) = outcome {
                        tracing::warn!(shard = %m.shard, %taker, error = %ErrorChain(&error), "asking for a shard in exchange failed");
                    }
                    super::store_calls::poke_holder(&shared, &key, taker);
                }
            }
        }
        tracing::info!(%taker, asked = back.len(), marked = landed.len(), "asked for shards in exchange");
        !landed.is_empty() && load_plan::exchange_lowers(mine, theirs, given, &landed)
    }

    /// `call`, cut off after a take interval: `None` when it did not answer by then.
    async fn quick<T>(&self, call: impl Future<Output = LeaseResult<T>>) -> Option<LeaseResult<T>> {
        tokio::time::timeout(self.shared.config.take_interval, call)
            .await
            .ok()
    }

    /// What `row` (read at `now`) says of `taker` as a taker.
    fn as_taker(&self, row: Option<&Lease>, taker: &str, now: Instant) -> Taker {
        let Some(row) = row else {
            return Taker::Gone;
        };
        let live = row.is_held_by(taker)
            && row
                .token
                .as_deref()
                .is_some_and(crate::roster::is_roster_token)
            && self
                .link
                .record_eventual(row, now)
                .is_some_and(|since| now.duration_since(since) < self.shared.config.lease_duration);
        match (live, row.load.as_ref()) {
            (false, _) => Taker::Gone,
            (true, Some(load)) if load.capacity_milli == Some(0) => Taker::Leaving,
            (true, load) => load
                .and_then(Side::of)
                .map_or(Taker::Unweighed, Taker::Weighed),
        }
    }
}
