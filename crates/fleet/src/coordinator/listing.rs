//! The listing job: reads the stream's epochs each take interval (telling the ring watch when
//! the roster's moved) and, when something changed,
//! lists the shard rows, observes their counters on this instance's monotonic clock (the only
//! clock that decides expiry), adopts takes whose answer was lost, and notices a twin (another
//! process with this owner id).

use kinesis_lease_core::{ErrorChain, Holder, Lease};
use kinesis_shard_reader::control::Phase;
use kinesis_stream_core::ReaderError;
use std::collections::BTreeSet;
use tokio::time::Instant;

use super::store_calls::bounded;
use super::{Seen, State};

impl State {
    /// Every take interval: list the rows when the epoch moved, the ring watch saw the roster
    /// change, or a listing is due.
    pub(super) async fn tick(&mut self) {
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
        // Every take interval, less often in a fleet of thousands (`roster::epoch_interval`:
        // the epoch is one item every instance reads). Only then is a tick skipped, with half
        // a take interval of slack: ticks run on a fixed grid and this one may have run late.
        let take_interval = shared.config.take_interval;
        let every = crate::roster::epoch_interval(take_interval, self.link.members());
        let spaced = every > take_interval;
        if spaced && !due && self.epoch.is_some() && now < self.epoch_at {
            return;
        }
        self.epoch_at = now + every - take_interval / 2;
        // The roster's count comes with it, in one read (`LeaseStore::epochs`): the ring watch
        // lists the roster when it moved.
        let epochs = bounded(&shared, "epoch", shared.store.epochs(&shared.config.stream)).await;
        let epoch = match epochs {
            Ok(epochs) => {
                self.link.saw_roster_epoch(epochs.roster);
                Some(epochs.rows)
            }
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
    pub(super) fn parents_gone(&self, rows: &[Lease]) -> BTreeSet<String> {
        let Some(synced_at) = self.synced_at else {
            return BTreeSet::new();
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
    pub(super) fn is_mine(&self, shard: &str, token: Option<&str>) -> bool {
        token.is_some_and(|t| self.tokens.get(shard).is_some_and(|ts| ts.contains(t)))
    }

    /// Records what the listing shows; fails the subscription when another process with this
    /// owner id is seen writing a row.
    pub(super) fn observe(&mut self, rows: &[Lease], now: Instant) -> Result<(), ReaderError> {
        // Rows at the first listing were taken at any time before it: how long each has been
        // held is not known (see `Seen::held_since`). A row first seen at a later listing,
        // already held, was taken since the one before.
        let first_listing = self.listed_at.is_none();
        self.listed_at = Some(now);
        self.read_back.clear();
        let me = self.shared.config.owner.clone();
        let held: BTreeSet<String> = self.shared.held().keys().cloned().collect();
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
                let held_since = match previous {
                    Some(seen) if seen.token == row.token => seen.held_since,
                    None if first_listing => None,
                    _ => Some(now),
                };
                self.observed.insert(
                    shard.to_owned(),
                    Seen {
                        counter: row.counter,
                        owner: row.owner.clone(),
                        token: row.token.clone(),
                        wanted: row.wanted_by.is_some(),
                        since: now,
                        held_since,
                        load: row.load,
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
        let listed: BTreeSet<&str> = rows.iter().map(|r| r.key.shard()).collect();
        self.observed
            .retain(|shard, _| listed.contains(shard.as_str()));
        self.first_seen
            .retain(|shard, _| listed.contains(shard.as_str()));
        self.tokens
            .retain(|shard, tokens| !tokens.is_empty() && listed.contains(shard.as_str()));
        Ok(())
    }

    /// Rows held here that the listing shows wanted by another instance, or carrying a token
    /// this coordinator did not write: their keepers write them at once (a quiet keeper
    /// otherwise learns only of a poked request, and an instance of an earlier release asks
    /// without poking).
    pub(super) fn nudge_keepers(&self, rows: &[Lease]) {
        if !self.shared.config.quiet_idle {
            return;
        }
        let me = &self.shared.config.owner;
        let held = self.shared.held();
        for row in rows {
            let Some(h) = held.get(row.key.shard()) else {
                continue;
            };
            let wanted = row.wanted_by.as_deref().is_some_and(|w| w != me);
            let foreign =
                !(row.is_held_by(me) && self.is_mine(row.key.shard(), row.token.as_deref()));
            if wanted || foreign {
                h.nudge.notify_one();
            }
        }
    }

    /// Takes whose response was lost and that landed after all: start reading them; once
    /// the shutdown began, returned instead, to be let go at once (`let_go_of_late_take`).
    pub(super) fn adopt_pending(&mut self, rows: &[Lease]) -> Vec<(Lease, Holder)> {
        let running = *self.shared.phase.borrow() == Phase::Running;
        let mut late = Vec::new();
        for row in rows {
            let shard = row.key.shard();
            let Some(pending) = self.pending.remove(shard) else {
                continue;
            };
            if row.is_held_with(&pending.holder) {
                if !running {
                    late.push((row.clone(), pending.holder));
                    continue;
                }
                tracing::info!(%shard, "a take whose response was lost had landed; reading");
                self.start(
                    row.clone(),
                    pending.holder,
                    pending.plan,
                    pending.sent,
                    pending.incarnation,
                    pending.pokes,
                );
            }
            // Otherwise it did not land (a landed take writes its token, and nobody may take
            // the row again within a lease): the row is considered afresh below.
        }
        late
    }
}
