//! Balancing by load (`ReaderConfig::balance_by_load`): every sample interval this instance
//! reads one other member's row, picked at random (one small eventually consistent read, half
//! a read unit on DynamoDB, whatever the number of shards or members), weighs itself against it
//! (`load_plan`) and, when a move of one of its shards is worth it, marks that row wanted by
//! the other member. Its own keeper then hands the shard over as it does for any request: the
//! reader stops, what was handed out settles, one write moves the row, the epoch moves, and the
//! other member takes it and starts after the checkpoint. Nothing is delivered twice.
//!
//! One move at a time: no new one while the last shard given is still held here (for at most
//! three leases). A member whose row this instance has seen stand still for a lease (these
//! readings count with the watch's: `Link`) is never given a shard.

use kinesis_lease_core::{ErrorChain, Outcome};
use tokio::time::Instant;

use crate::load_plan::{self, Movable, Side};

use super::store_calls::bounded;
use super::State;

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
                && now.duration_since(*at) < config.lease_duration * 3
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
        let row = match bounded(&shared, "read", shared.store.read_eventually(&key)).await {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%taker, error = %ErrorChain(&error), "reading a member's load failed");
                return;
            }
        };
        // Alive as far as this reading shows, and weighed: a member row of an earlier release,
        // or one released or taken by its burier, gets nothing.
        let live = row.is_held_by(&taker)
            && row
                .token
                .as_deref()
                .is_some_and(crate::roster::is_roster_token)
            && self
                .link
                .record_eventual(&row, now)
                .is_some_and(|since| now.duration_since(since) < config.lease_duration);
        let (Some(theirs), true) = (row.load.as_ref().and_then(Side::of), live) else {
            return;
        };
        let Some(mine) = Side::of(&shared.instance_load()) else {
            return;
        };
        let movable: Vec<Movable> = shared
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
        let Some(shard) = load_plan::choose(mine, theirs, &movable).map(str::to_owned) else {
            return;
        };
        let Ok(row_key) = shared.key(&shard) else {
            return;
        };
        let marked = bounded(
            &shared,
            "request",
            shared.store.request(&row_key, &taker, &config.owner),
        )
        .await;
        match marked {
            Ok(Outcome::Written(_)) => {
                tracing::info!(%shard, %taker, mine = mine.weight, theirs = theirs.weight, "giving a shard to balance load");
                // A quiet keeper writes its row only when told: tell it now.
                if let Some(held) = shared.held().get(&shard) {
                    held.nudge.notify_one();
                }
                self.giving = Some((shard, now));
            }
            Ok(Outcome::Lost(_)) => {}
            Err(error) => {
                tracing::warn!(%shard, %taker, error = %ErrorChain(&error), "marking a shard to give failed");
                // It may have landed: wait as for one that did.
                self.giving = Some((shard, now));
            }
        }
    }
}
