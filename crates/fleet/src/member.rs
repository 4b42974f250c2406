//! This instance's member row (see `roster`): taken before any shard is, renewed every renew
//! interval in a task of its own, and released once every keeper has finished.
//!
//! The task publishes a [`MemberState`]: the incarnation (which holding of the member row)
//! and the time until which keepers may go on, `sent + lease - renew` of the last member
//! write that landed. A keeper stops when that time passes or the incarnation changes, so a
//! member row that stood still for a lease on another instance's clock proves that every
//! keeper of this instance has stopped.

use std::sync::Arc;

use kinesis_lease_core::{Backoff, ErrorChain, Holder, Lease, LeaseKey, Outcome, Take};
use tokio::sync::oneshot;
use tokio::time::{interval_at, sleep, timeout, Instant, MissedTickBehavior};

use tracing::Instrument;

use crate::abort_on_drop::AbortOnDrop;
use crate::member_state::MemberState;
use crate::roster;
use crate::shared::Shared;
use kinesis_stream_core::ReaderError;

/// This instance's holding of its member row.
#[derive(Debug)]
pub(crate) struct Member {
    shared: Arc<Shared>,
    key: LeaseKey,
    holder: Holder,
    /// The roster epoch's bump in flight, if any (see [`Member::bump_aside`]).
    bump: Option<AbortOnDrop>,
}

/// The key of `owner`'s member row for `stream`.
pub(crate) fn member_key(stream: &str, owner: &str) -> Result<LeaseKey, ReaderError> {
    LeaseKey::member(stream, owner).map_err(|source| ReaderError::Lease {
        stream: stream.to_owned(),
        shard: String::new(),
        source,
    })
}

impl Member {
    /// Takes this instance's member row, retrying store failures until it lands or the
    /// subscription stops running (`Ok(None)`).
    ///
    /// A member row held by this owner id with a token this instance did not write belongs to
    /// another live process with the same id (or to a crashed earlier run): it is watched for
    /// a lease duration, and taken once its counter stood still that long. One move while
    /// watched may be a crashed run's last renewal landing late; a second proves a live one.
    ///
    /// # Errors
    ///
    /// [`ReaderError::OwnerInUse`] when the row was renewed twice meanwhile.
    pub(crate) async fn join(shared: &Arc<Shared>) -> Result<Option<Self>, ReaderError> {
        let config = &shared.config;
        let key = member_key(&config.stream, &config.owner)?;
        let mut phase = shared.phase.subscribe();
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        // (counter, since) of a row held by this id with a foreign token.
        let mut foreign: Option<(u64, Instant)> = None;
        // The foreign row moved once while watched: the last renewal of a crashed run, already
        // on its way when it died, may land once; a live process moves it again.
        let mut moved_once = false;
        // The last take sent, and when: a take whose answer was lost is adopted if it landed.
        let mut tried: Option<(Holder, Instant)> = None;
        loop {
            if *phase.borrow_and_update() != kinesis_shard_reader::Phase::Running {
                return Ok(None);
            }
            let row = match shared.store.read(&key).await {
                Ok(Some(row)) => row,
                Ok(None) => {
                    if let Err(error) = shared
                        .store
                        .create(&Lease::new(key.clone(), Vec::new()))
                        .await
                    {
                        tracing::warn!(error = %ErrorChain(&error), "creating the member row failed; retrying");
                        sleep(backoff.next_delay()).await;
                    }
                    continue;
                }
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "reading the member row failed; retrying");
                    sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            if let Some((holder, sent)) = tried.take() {
                if row.is_held_with(&holder) {
                    return Ok(Some(Self::joined(shared, key, holder, sent, &row).await));
                }
            }
            if roster::is_present(&row) {
                let now = Instant::now();
                match foreign {
                    Some((counter, _)) if counter != row.counter && moved_once => {
                        return Err(ReaderError::OwnerInUse {
                            owner: config.owner.clone(),
                            stream: config.stream.clone(),
                            shard: key.to_string(),
                        });
                    }
                    Some((counter, _)) if counter != row.counter => {
                        tracing::info!(stream = %config.stream, owner = %config.owner, "the member row naming this owner id moved once: watching it for a lease again");
                        moved_once = true;
                        foreign = Some((row.counter, now));
                        sleep(config.renew_interval).await;
                        continue;
                    }
                    Some((_, since)) if roster::is_dead(now - since, config.lease_duration) => {}
                    Some(_) => {
                        sleep(config.renew_interval).await;
                        continue;
                    }
                    None => {
                        tracing::info!(stream = %config.stream, owner = %config.owner, "the member row names this owner id: checking for a lease that no live process renews it");
                        foreign = Some((row.counter, now));
                        sleep(config.renew_interval).await;
                        continue;
                    }
                }
            }
            let holder = Holder::new(config.owner.clone(), roster::new_token());
            let sent = Instant::now();
            let take = Take::fenced(config.lease_duration, row.counter);
            match shared.store.take(&key, &holder, &take).await {
                Ok(Outcome::Written(row)) => {
                    return Ok(Some(Self::joined(shared, key, holder, sent, &row).await));
                }
                Ok(Outcome::Lost(_)) => foreign = None,
                Err(error) => {
                    // A take whose response was lost: adopted at the next read if the row
                    // carries its token.
                    tracing::warn!(error = %ErrorChain(&error), "taking the member row failed; retrying");
                    tried = Some((holder, sent));
                    sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// The member row is held with `holder`, taken by a write sent at `sent`: a new
    /// incarnation begins, and the others are told.
    async fn joined(
        shared: &Arc<Shared>,
        key: LeaseKey,
        holder: Holder,
        sent: Instant,
        row: &Lease,
    ) -> Self {
        let config = &shared.config;
        shared.member.send_modify(|state| {
            state.incarnation += 1;
            state.deadline = sent + config.keep_for();
            state.announced = false;
            // A new incarnation: the row may have been deleted and created afresh since the
            // last (its pokes back at 0), and its keepers count from its own pokes.
            state.pokes = row.pokes;
            state.poked = row.last_poke_about().map(Into::into);
        });
        tracing::info!(stream = %config.stream, owner = %config.owner, "joined the roster");
        let bump = Some(Self::bump_aside(shared, key.stream()));
        Self {
            shared: shared.clone(),
            key,
            holder,
            bump,
        }
    }

    /// Bumps the roster's epoch (so the others list the roster again) in a task of its own,
    /// bounded by a lease; a failed bump is owed and tried again after the next renewal. Once
    /// one lands, the incarnation it was sent under is announced and may take shards.
    ///
    /// Never on the renewal path: the member row must be renewed within `lease - renew` of the
    /// last renewal sent, or every keeper stops. A bump awaited there delayed the next renewal
    /// by as long as the bump took, and on a lease table answering slower than the bump's bound
    /// every bump timed out, stayed owed and delayed every renewal: the membership lapsed over
    /// and over and the instance could hold no shard (on paused time, calls of 1.2 s against a
    /// renew interval of 1 s: `an_instance_on_a_slow_lease_table_still_gets_its_share`).
    fn bump_aside(shared: &Arc<Shared>, stream: &str) -> AbortOnDrop {
        let (shared, stream) = (shared.clone(), stream.to_owned());
        let incarnation = shared.member.borrow().incarnation;
        let bump = async move {
            let bound = shared.config.lease_duration;
            let bumped = shared.bump_within(&stream, bound).await;
            if bumped.is_ok() {
                shared.member.send_if_modified(|state| {
                    let announce = state.incarnation == incarnation && !state.announced;
                    state.announced |= announce;
                    announce
                });
            }
            if let Err(error) = bumped {
                tracing::warn!(error = %ErrorChain(&error), "could not bump the roster's epoch; retrying after the next renewal");
                shared
                    .roster_bump_owed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        };
        AbortOnDrop(tokio::spawn(bump.instrument(tracing::Span::current())))
    }

    /// Renews the member row every renew interval until `stop` fires, then releases it. A lost
    /// renewal (another instance found this one dead) stops every keeper at once and joins
    /// again.
    pub(crate) async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let every = config.renew_interval;
        // The first renewal at once: a join adopted after a lost answer may have been sent a
        // while ago, and its deadline counts from then.
        let mut tick = interval_at(Instant::now(), every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut phase = shared.phase.subscribe();
        let mut state = shared.member.subscribe();
        let mut running = true;
        loop {
            // Its join not announced yet, the row shows no capacity (below) until the renewal
            // after the announcement, which is sent at once (here, or after a renewal that was
            // on its way when the announcement came).
            let unannounced = !shared.member.borrow().announced;
            tokio::select! {
                biased;
                _ = &mut stop => break,
                // Shutting down: say so (capacity 0) at once rather than up to a renew interval
                // later, so that a giver reading this row hands this instance nothing more
                // (`keeper::hand_off`), and balancing by load gives it nothing.
                () = kinesis_shard_reader::control::left_running(&mut phase), if running => {
                    running = false;
                    tick.reset_immediately();
                }
                Ok(()) = state.changed(), if unannounced => {
                    if state.borrow_and_update().announced {
                        tick.reset_immediately();
                    }
                }
                _ = tick.tick() => {
                    let sent = Instant::now();
                    // The count first: a take landing in between then shows in the load, never
                    // a count acted on with a load that lacks its shard.
                    let pokes_seen = shared.pokes_seen.load(std::sync::atomic::Ordering::SeqCst);
                    let mut load = shared.instance_load();
                    if config.balance_by_load {
                        load.pokes_seen = Some(pokes_seen);
                    }
                    // Shutting down, or its join not announced yet (it may take nothing until
                    // a roster bump lands: `MemberState::may_take`): no capacity, so that no
                    // giver hands it a shard it cannot take (`load_balance`, `keeper::hand_off`;
                    // simulation seed 27312: a shard given to a member whose roster bumps
                    // failed stood unread until the giver moved the epoch).
                    let unannounced = !shared.member.borrow().announced;
                    if *shared.phase.borrow() != kinesis_shard_reader::Phase::Running || unannounced {
                        load.capacity_milli = Some(0);
                    }
                    shared.metrics.instance_load(&load);
                    let call = shared.store.renew_with_load(&self.key, &self.holder, config.lease_duration, None, &load);
                    match timeout(config.keep_for(), call).await {
                        Ok(Ok(Outcome::Written(row))) => {
                            shared.member.send_modify(|state| {
                                state.deadline = state.deadline.max(sent + config.keep_for());
                                if row.pokes > state.pokes {
                                    state.pokes = row.pokes;
                                    state.poked = row.last_poke_about().map(Into::into);
                                }
                            });
                            // Announced while this renewal (no capacity) was on its way: the
                            // branch above no longer listens, so the next renewal now.
                            if unannounced && shared.member.borrow().announced {
                                tick.reset_immediately();
                            }
                            // After the renewal and beside the next ones, never on their path
                            // (see `bump_aside`).
                            if shared.roster_bump_owed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                                self.bump = Some(Self::bump_aside(&shared, self.key.stream()));
                            }
                        }
                        Ok(Ok(Outcome::Lost(lost))) => {
                            tracing::warn!(holder = ?lost.holder, "the member row was taken: this instance was found dead; every keeper stops");
                            shared.member.send_modify(|state| {
                                state.incarnation += 1;
                                state.deadline = Instant::now();
                            });
                            let joined = tokio::select! {
                                biased;
                                _ = &mut stop => return,
                                joined = Self::join(&shared) => joined,
                            };
                            match joined {
                                Ok(Some(member)) => self = member,
                                Ok(None) => return,
                                Err(error) => {
                                    shared.fail(error);
                                    return;
                                }
                            }
                        }
                        Ok(Err(error)) => tracing::warn!(error = %ErrorChain(&error), "renewing the member row failed"),
                        Err(_) => tracing::warn!("renewing the member row took longer than lease - renew"),
                    }
                }
            }
        }
        self.leave().await;
    }

    /// Releases the member row (every keeper has finished) and tells the others.
    async fn leave(self) {
        let shared = &self.shared;
        shared.member.send_replace(MemberState::outside());
        let call = shared.store.release(&self.key, &self.holder, None);
        match timeout(shared.config.lease_duration, call).await {
            // The row stays (free, so this instance counts as gone): the janitor deletes it
            // once it stood still for long enough that nobody acts on an old reading of it.
            Ok(Ok(Outcome::Written(_))) => {
                tracing::info!("left the roster");
                shared
                    .bump_epoch_leaving(self.key.stream(), "left the roster")
                    .await;
            }
            Ok(Ok(Outcome::Lost(_))) => {}
            Ok(Err(error)) => {
                tracing::warn!(error = %ErrorChain(&error), "releasing the member row failed; the others find it dead a lease from now");
            }
            Err(_) => tracing::warn!("releasing the member row took longer than a lease"),
        }
    }
}
