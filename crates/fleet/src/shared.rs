//! What a subscription's coordinator and its shard tasks share.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_dispatch::{DeliverySender, ShardSettlement};
use kinesis_lease_core::{Checkpoint, ErrorChain, LeaseKey, LeaseStore};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use kinesis_shard_reader::{KplCounters, Phase, ReadContext};
use kinesis_stream_core::ReaderError;

use crate::ReaderConfig;

/// Why a shard task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Read and settled to its end; `SHARD_END` written and the lease released.
    Ended,
    /// The lease was lost (or renewals failed too long); nothing written.
    Lost,
    /// Released on shutdown (or after a fatal error) with the final checkpoint.
    Released,
    /// Handed over to the instance that asked for it, with the final checkpoint.
    HandedOver,
}

/// A shard task's report to the coordinator.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) shard: String,
    pub(crate) exit: Exit,
}

/// The live view of one held shard, for `stats()`.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) settlement: Arc<ShardSettlement>,
    pub(crate) millis_behind: Arc<AtomicU64>,
    pub(crate) written: Arc<Mutex<Option<Checkpoint>>>,
    pub(crate) kpl: Arc<KplCounters>,
    pub(crate) refusal: Arc<kinesis_shard_reader::Refusal>,
    /// Tells the keeper to write its row now: a quiet one (see `quiet`) when a listing showed it
    /// wanted by another instance, or carrying a token not its own; any one when this
    /// instance's coordinator marked the row to give it away by load.
    pub(crate) nudge: Arc<tokio::sync::Notify>,
    /// Whom the shard is being handed to, once its reader stopped and its handlers finished
    /// (see `ShardStats::handing_to`).
    pub(crate) handing_to: Arc<Mutex<Option<String>>>,
    /// The shard's smoothed load as its keeper last measured it (see `load_meter`); `None`
    /// before its first renewal, unless its row carried one.
    pub(crate) load: Arc<Mutex<Option<kinesis_lease_core::Load>>>,
    /// The shard's load at its recent rate while that stands well above `load` (a shard
    /// turning hot: `LoadMeter::rising`), for this instance's own planner only
    /// (`Shared::rising_shards`).
    pub(crate) rising: Arc<Mutex<Option<kinesis_lease_core::Load>>>,
    /// From when the shard may be given away to balance load (`load_plan::dwell`): 30 s
    /// after it was taken, three minutes after it came by a hand-over, so a shard moves at most
    /// once in three minutes.
    pub(crate) movable_at: tokio::time::Instant,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ReaderConfig,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) sender: DeliverySender,
    pub(crate) phase: watch::Sender<Phase>,
    pub(crate) reports: mpsc::UnboundedSender<Report>,
    pub(crate) held: Mutex<BTreeMap<String, Held>>,
    /// What the subscription's readers share: the Kinesis source, the reading settings, the
    /// fan-out consumer's ARN and the fatal error.
    pub(crate) read: Arc<ReadContext>,
    /// The subscription's metric handles (nothing without the `metrics` feature).
    pub(crate) metrics: crate::metrics::StreamMetrics,
    /// This instance's membership (see `member`): keepers stop when it lapses.
    pub(crate) member: watch::Sender<crate::member_state::MemberState>,
    /// An epoch bump that failed and is owed: the coordinator retries it at its next tick, so
    /// freed rows are never left unnoticed by the others.
    pub(crate) bump_owed: std::sync::atomic::AtomicBool,
    /// An operator's move announced by this instance is in flight (`Shared::announce_move`):
    /// another learnt of meanwhile is owed to the next take tick.
    pub(crate) move_bump_in_flight: std::sync::atomic::AtomicBool,
    /// The same for the roster's epoch after this instance joined: retried by the member task
    /// at its next renewal, so the others always come to watch it.
    pub(crate) roster_bump_owed: std::sync::atomic::AtomicBool,
    /// The last listing showed rows held by instances of a release before the roster: they
    /// take a row once its counter stood still for a lease, so quiet keepers renew every
    /// renew interval while they are seen (see `quiet`).
    pub(crate) legacy_rows: std::sync::atomic::AtomicBool,
    /// Shards are placed by load (the option on, and the last member compared publishes
    /// loads): a hand-over pokes its taker instead of moving the epoch, when the taker's own
    /// member row shows it listens (see [`Shared::announce_hand_over`]).
    pub(crate) poke_hand_overs: std::sync::atomic::AtomicBool,
    /// How many of the member row's pokes the coordinator has acted on (taken the row handed
    /// here, or listed): published on the member row with the load when balancing by load
    /// (`Load::pokes_seen`), so that givers see a hand-over on its way in.
    pub(crate) pokes_seen: std::sync::atomic::AtomicU64,
    /// Epoch bumps running in tasks of their own (`Shared::bump_epoch_aside`): aborted when
    /// the coordinator ends (`AbortAside`), so none outlives the subscription, writes after an
    /// abort, or keeps its delivery stream open.
    pub(crate) aside: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// Aborts the bumps running aside (`Shared::aside`) when dropped: held by the coordinator,
/// whose end (a shutdown's last bump done, or the handle dropped) ends them.
#[derive(Debug)]
pub(crate) struct AbortAside(pub(crate) std::sync::Arc<Shared>);

impl Drop for AbortAside {
    fn drop(&mut self) {
        let handles = std::mem::take(&mut *self.0.aside.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in handles {
            handle.abort();
        }
    }
}

impl Shared {
    pub(crate) fn held(&self) -> MutexGuard<'_, BTreeMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The load this instance carries (the sum of its held shards' last measured loads) and
    /// its capacity, as its member row publishes them.
    pub(crate) fn instance_load(&self) -> kinesis_lease_core::Load {
        let loads: Vec<kinesis_lease_core::Load> = self
            .held()
            .values()
            .map(|held| {
                // A shard not measured yet counts among the shards, at no load.
                held.load
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or_default()
            })
            .collect();
        kinesis_lease_core::Load::sum(&loads).with_capacity(self.config.capacity_milli)
    }

    /// The held shards that turn hot (`Held::rising`) by more than `least` handler
    /// milliseconds a minute above what they show, not being handed over already: while it
    /// holds them, this instance's own figure still climbs, and what it publishes shows part of
    /// it.
    pub(crate) fn rising_shards(&self, least: f64) -> Vec<String> {
        self.held()
            .iter()
            .filter(|(_, held)| {
                let rising = *held.rising.lock().unwrap_or_else(|p| p.into_inner());
                let shown = *held.load.lock().unwrap_or_else(|p| p.into_inner());
                let rise = rising.map_or(0.0, |rising| {
                    rising.busy_ms_per_min as f64
                        - shown.map_or(0.0, |shown| shown.busy_ms_per_min as f64)
                });
                rise > least
                    && held
                        .handing_to
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_none()
            })
            .map(|(shard, _)| shard.clone())
            .collect()
    }

    pub(crate) fn key(&self, shard: &str) -> Result<LeaseKey, ReaderError> {
        LeaseKey::new(self.config.stream.clone(), shard).map_err(|source| ReaderError::Lease {
            stream: self.config.stream.clone(),
            shard: shard.to_owned(),
            source,
        })
    }

    /// Bumps `stream`'s epoch once, waiting at most `most`: a call that does not answer in
    /// time counts as failed (it may still land; a bump too many costs the others one listing).
    pub(crate) async fn bump_within(
        &self,
        stream: &str,
        most: std::time::Duration,
    ) -> kinesis_lease_core::LeaseResult<()> {
        tokio::time::timeout(most, self.store.bump_epoch(stream))
            .await
            .unwrap_or_else(|_| {
                Err(kinesis_lease_core::LeaseError::Unavailable {
                    operation: "bump_epoch",
                    resource: stream.to_owned(),
                    source: "no answer in time".into(),
                })
            })
    }

    /// Bumps the stream's epoch (rows were freed, moved or ended), waiting at most a lease; a
    /// failure is retried by the coordinator.
    pub(crate) async fn bump_epoch(&self, why: &'static str) {
        let bumped = self
            .bump_within(&self.config.stream, self.config.lease_duration)
            .await;
        if let Err(error) = bumped {
            tracing::warn!(why, error = %ErrorChain(&error), "could not bump the stream's epoch; retrying at the next tick");
            self.bump_owed
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// [`Shared::bump_epoch`] in a task of its own: for a keeper whose row is no longer its
    /// own (handed over), which ends at once, so that nothing shows the shard as held here
    /// while the bump waits for a table that does not answer (up to a lease: the simulation
    /// saw a giver listed as the shard's reader beside its taker for 8 s, seed 11381).
    pub(crate) fn bump_epoch_aside(self: &std::sync::Arc<Self>, why: &'static str) {
        let shared = self.clone();
        self.run_aside(async move { shared.bump_epoch(why).await });
    }

    /// Announces an operator's move of a row that this instance learnt of (a keeper's row
    /// evicted, a row poked about found in the operator's hold): the command line bumps the
    /// epoch after its evict, but should that bump have failed, this instance may be the only
    /// one that knows, and it may crash a moment later (simulation seeds 2248, 76634). The
    /// epoch moves at once, in a task aside. While such a bump is in flight, one learnt of
    /// meanwhile is owed to the next take tick instead: a `reset --force` of every row reaches
    /// every keeper within a renew interval, and makes a few bumps per instance (at most one
    /// in flight and one per take tick), not one per row.
    pub(crate) fn announce_move(self: &std::sync::Arc<Self>, why: &'static str) {
        use std::sync::atomic::Ordering::SeqCst;
        if self.move_bump_in_flight.swap(true, SeqCst) {
            self.bump_owed.store(true, SeqCst);
            return;
        }
        let shared = self.clone();
        self.run_aside(async move {
            shared.bump_epoch(why).await;
            shared.move_bump_in_flight.store(false, SeqCst);
        });
    }

    /// Runs `work` in a task of its own, in the current span, aborted when the coordinator
    /// ends (see `aside`).
    fn run_aside(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let task = tokio::spawn(work.instrument(tracing::Span::current()));
        let mut aside = self.aside.lock().unwrap_or_else(|p| p.into_inner());
        aside.retain(|handle| !handle.is_finished());
        aside.push(task.abort_handle());
    }

    /// Tells `to` that the row keyed `key` was just handed to it. By default (and whenever
    /// shards are not placed by load) the stream's epoch moves, and every instance lists the
    /// rows at its next epoch read. With shards placed by load, where moves are frequent while
    /// the fleet balances, only the taker needs to know: the taker's member row is read
    /// (consistent) and, when it shows a present member that publishes loads (this release or
    /// a later one: the release that first published loads also lists when poked) and is not
    /// shutting down, poked about the row; its coordinator lists the rows when poked about a
    /// row it does not hold. The epoch moves at once when the taker is not such a member (it
    /// left, was found dead, is shutting down, or runs an earlier release) or the read or the
    /// poke failed, and later when the row still waits for its taker two renew intervals and a
    /// take interval after the poke (a taker that stopped meanwhile) or an operator moved it
    /// since (`Shared::waits_later`: its own bump may have failed). In a task of its own, as
    /// [`Shared::bump_epoch_aside`]; a leaving instance's last bump covers it.
    pub(crate) fn announce_hand_over(self: &std::sync::Arc<Self>, key: &LeaseKey, to: &str) {
        if !self
            .poke_hand_overs
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.bump_epoch_aside("hand-over");
            return;
        }
        let Ok(member) = LeaseKey::member(key.stream(), to) else {
            self.bump_epoch_aside("hand-over");
            return;
        };
        let (shared, key, to) = (self.clone(), key.clone(), to.to_owned());
        let announce = async move {
            let config = &shared.config;
            let most = config.lease_duration;
            let taker = tokio::time::timeout(most, shared.store.read(&member)).await;
            let listens = match &taker {
                Ok(Ok(Some(row))) => pokes_take_hand_overs(row, &to),
                _ => false,
            };
            if !listens {
                shared.bump_epoch("hand-over to a taker not poked").await;
                return;
            }
            let poked = tokio::time::timeout(most, shared.store.poke(&member, &key)).await;
            if !matches!(poked, Ok(Ok(true))) {
                shared.bump_epoch("hand-over not poked").await;
                return;
            }
            if shared.waits_later(&key, Some(&to)).await {
                tracing::info!(shard = %key.shard(), %to, "a shard handed over and poked about is not taken yet (or an operator moved it); moving the epoch");
                shared.bump_epoch("hand-over not taken").await;
            }
        };
        self.run_aside(announce);
    }

    /// A hand-over to `to` (or, with `None`, a release) of the row keyed `key` whose answer
    /// did not come before the lease lapsed: it may have landed, or land a little later (a
    /// request still in flight when it was given up). Announced as a hand-over that answered
    /// (placed by load, a poke and a later check of the row); otherwise the epoch moves now,
    /// and again two renew intervals and a take interval later if the row then waits for its
    /// taker (handed to `to` and not taken, or free) or an operator moved it since. Without it a row handed to a live member
    /// that never learnt of it is nobody's business (simulation seed 35785: unread for the
    /// rest of the run), and a free row is taken only at the next move of the epoch. In a task
    /// of its own, as [`Shared::bump_epoch_aside`].
    pub(crate) fn announce_unanswered(
        self: &std::sync::Arc<Self>,
        key: &LeaseKey,
        to: Option<&str>,
    ) {
        if let Some(to) = to {
            if self
                .poke_hand_overs
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                self.announce_hand_over(key, to);
                return;
            }
        }
        let (shared, key, to) = (self.clone(), key.clone(), to.map(str::to_owned));
        self.run_aside(async move {
            shared.bump_epoch("a write whose answer did not come").await;
            if shared.waits_later(&key, to.as_deref()).await {
                tracing::info!(shard = %key.shard(), to = ?to, "a row whose write's answer did not come waits for a taker (or an operator moved it); moving the epoch");
                shared
                    .bump_epoch("a write whose answer did not come, still waiting")
                    .await;
            }
        });
    }

    /// Whether the row keyed `key`, read two renew intervals and a take interval from now
    /// (time for its taker to take it), still waits for a taker: handed to `to` and not taken,
    /// or with `None`, free (a finished row, `SHARD_END`, is free too and taken by nobody), or
    /// moved by an operator since (in the operator's hold, taken by whoever lists it). True
    /// when it cannot be read within a lease.
    async fn waits_later(&self, key: &LeaseKey, to: Option<&str>) -> bool {
        let config = &self.config;
        tokio::time::sleep(config.renew_interval * 2 + config.take_interval).await;
        match tokio::time::timeout(config.lease_duration, self.store.read(key)).await {
            // In an operator's hold since: the move's own epoch bump may have failed, and a
            // taker poked about it may not have listed.
            Ok(Ok(Some(row))) if kinesis_lease_core::rules::is_evicted(&row) => true,
            Ok(Ok(Some(row))) => match to {
                Some(to) => row.owner.as_deref() == Some(to) && row.token.is_none(),
                None => row.owner.is_none() && !row.is_finished(),
            },
            Ok(Ok(None)) => false,
            _ => true,
        }
    }

    /// Bumps `stream`'s epoch (the stream's own, or the roster's), retrying failures for at
    /// most a lease in all: for the last bump of an instance that is leaving, which no later
    /// tick of its own would retry, and for a burial's. False when every attempt failed.
    pub(crate) async fn bump_epoch_leaving(&self, stream: &str, why: &'static str) -> bool {
        let config = &self.config;
        let mut backoff =
            kinesis_lease_core::Backoff::new(config.renew_interval / 30, config.renew_interval);
        let until = tokio::time::Instant::now() + config.lease_duration;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let Err(error) = self.bump_within(stream, left).await else {
                return true;
            };
            if tokio::time::Instant::now() >= until {
                tracing::warn!(why, %stream, error = %ErrorChain(&error), "could not bump the epoch; the others notice at their next listing or watch");
                return false;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// Records a fatal error (the first one wins) for the subscription to surface.
    pub(crate) fn fail(&self, error: ReaderError) {
        self.read.fail(error);
    }
}

/// Whether `row`, a member row read just now, shows `member` present (held under a roster
/// token), publishing loads (a release that lists when poked about a row handed to it) and
/// taking (not capacity 0: shutting down, or its join not announced yet): a hand-over to it
/// may be announced by a poke alone.
fn pokes_take_hand_overs(row: &kinesis_lease_core::Lease, member: &str) -> bool {
    row.is_held_by(member)
        && row
            .token
            .as_deref()
            .is_some_and(crate::roster::is_roster_token)
        && row
            .load
            .as_ref()
            .is_some_and(|load| load.shards.is_some() && load.capacity_milli != Some(0))
}
