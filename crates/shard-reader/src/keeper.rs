//! The lease keeper of one shard: the only writer of its row while it is held.
//!
//! It renews every `renew_interval` in a task of its own, so a reader blocked on a full channel
//! still renews, and folds the due checkpoint into the renewal (one write per interval). It
//! writes `SHARD_END` when the reader reports the shard read and settled to its end, and the
//! final checkpoint with the release on shutdown. A renewal that is lost, or renewals failing
//! for so long that the lease may lapse before the next one, revoke the shard at once: the
//! reader stops, undelivered records are dropped, and nothing more is written.

use std::sync::Arc;

use kinesis_dispatch::{CheckpointCursor, ShardSettlement};
use kinesis_lease_core::{Checkpoint, LeaseKey, Outcome};
use tokio::sync::{mpsc, watch};
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use crate::shared::{Backoff, Exit, Shared, Signal};

/// What the reader asks the keeper to do.
#[derive(Debug)]
pub(crate) enum KeeperCmd {
    /// The shard was read and settled to its end: write `SHARD_END` and release.
    ShardEnd,
    /// Release now with the due checkpoint (after a fatal error).
    Release,
}

pub(crate) struct Keeper {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: LeaseKey,
    pub(crate) settlement: Arc<ShardSettlement>,
    pub(crate) cursor: CheckpointCursor,
    pub(crate) signal: watch::Sender<Signal>,
    pub(crate) written: Arc<std::sync::Mutex<Option<Checkpoint>>>,
}

impl Keeper {
    fn record_written(&mut self, checkpoint: &Checkpoint) {
        self.cursor.mark_written(checkpoint);
        *self.written.lock().unwrap_or_else(|p| p.into_inner()) = Some(checkpoint.clone());
    }

    fn lose(&self, why: &str) -> Exit {
        tracing::warn!(why, "lease lost; reader stops without checkpoint");
        self.settlement.revoke();
        self.signal.send_replace(Signal::Lost);
        Exit::Lost
    }

    pub(crate) async fn run(mut self, mut commands: mpsc::Receiver<KeeperCmd>) -> Exit {
        let shared = self.shared.clone();
        let config = &shared.config;
        let (ttl, every) = (config.lease_duration, config.renew_interval);
        let mut last_ok = Instant::now();
        let mut tick = interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut phase = self.shared.phase.subscribe();
        let mut commands_open = true;
        loop {
            tokio::select! {
                biased;
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(KeeperCmd::ShardEnd) => return self.finish(Some(Checkpoint::ShardEnd), last_ok).await,
                    Some(KeeperCmd::Release) => {
                        let due = self.cursor.due(&self.settlement);
                        return self.finish(due, last_ok).await;
                    }
                    None => commands_open = false,
                },
                _ = crate::shared::releasing(&mut phase) => {
                    let due = self.cursor.due(&self.settlement);
                    return self.finish(due, last_ok).await;
                }
                _ = tick.tick() => {
                    let due = self.cursor.due(&self.settlement);
                    let store = self.shared.store.clone();
                    // However long the store retries, the reader must stop before anyone else
                    // may see the lease stand still for a full lease duration.
                    let deadline = last_ok + ttl.saturating_sub(every);
                    let renewed = tokio::time::timeout_at(
                        deadline,
                        store.renew(&self.key, &config.owner, ttl, due.as_ref()),
                    )
                    .await;
                    let Ok(renewed) = renewed else {
                        return self.lose("renewals failed for most of the lease");
                    };
                    match renewed {
                        Ok(Outcome::Written(row)) => {
                            last_ok = Instant::now();
                            if let Some(cp) = &due {
                                self.record_written(cp);
                            }
                            tracing::trace!(checkpoint = ?due.as_ref().map(ToString::to_string), "renewed");
                            if let Some(asker) = row.wanted_by.filter(|a| *a != config.owner) {
                                return self.hand_off(asker, last_ok).await;
                            }
                        }
                        Ok(Outcome::Lost(lost)) => {
                            tracing::warn!(holder = ?lost.holder, counter = lost.counter, "renewal lost");
                            return self.lose("renewal lost");
                        }
                        Err(error) => {
                            tracing::warn!(error = %error, "renewal failed");
                            if Instant::now() >= deadline {
                                return self.lose("renewals failed for most of the lease");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Hands the shard to `asker`: stop reading, let what was handed out settle (for at most
    /// half a lease), then one write moves the row with the final checkpoint. Whatever did not
    /// settle in time is dropped unsettled, so the new owner reads it again.
    async fn hand_off(mut self, asker: String, last_ok: Instant) -> Exit {
        let shared = self.shared.clone();
        let config = &shared.config;
        tracing::info!(%asker, "shard wanted by another instance; handing it over");
        self.signal.send_replace(Signal::Stop);
        let settled =
            tokio::time::timeout(config.lease_duration / 2, self.settlement.all_settled())
                .await
                .is_ok();
        if !settled {
            tracing::warn!(%asker, "deliveries still unsettled at hand-over; they will be read again");
        }
        self.settlement.revoke();
        let checkpoint = self.cursor.due(&self.settlement);
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        loop {
            let store = shared.store.clone();
            let ttl = config.lease_duration;
            match store
                .hand_over(&self.key, &config.owner, &asker, ttl, checkpoint.as_ref())
                .await
            {
                Ok(Outcome::Written(_)) => {
                    if let Some(cp) = &checkpoint {
                        self.record_written(cp);
                    }
                    tracing::info!(%asker, checkpoint = ?checkpoint.as_ref().map(ToString::to_string), "shard handed over");
                    if let Err(error) = store.bump_epoch(&config.stream).await {
                        tracing::warn!(error = %error, "could not bump the stream's epoch after a hand-over");
                    }
                    return Exit::HandedOver;
                }
                Ok(Outcome::Lost(_)) => return self.lose("lost before the hand-over"),
                Err(error) => {
                    tracing::warn!(error = %error, "hand-over failed; retrying");
                    let delay = backoff.next_delay();
                    if last_ok.elapsed() + delay
                        >= config.lease_duration.saturating_sub(config.renew_interval)
                    {
                        return self.lose("could not hand over before the lease lapses");
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// The last write of a held lease: release with `checkpoint`, retried while the lease may
    /// still be ours.
    async fn finish(mut self, checkpoint: Option<Checkpoint>, last_ok: Instant) -> Exit {
        if self.settlement.is_revoked() {
            return Exit::Lost;
        }
        let shared = self.shared.clone();
        let config = &shared.config;
        let mut backoff = Backoff::new(config.renew_interval / 30, config.renew_interval);
        loop {
            let store = self.shared.store.clone();
            match store
                .release(&self.key, &config.owner, checkpoint.as_ref())
                .await
            {
                Ok(Outcome::Written(_)) => {
                    if let Some(cp) = &checkpoint {
                        self.record_written(cp);
                    }
                    let ended = checkpoint == Some(Checkpoint::ShardEnd);
                    tracing::info!(checkpoint = ?checkpoint.as_ref().map(ToString::to_string), ended, "lease released");
                    if ended {
                        // Other instances may read the children now.
                        if let Err(error) = store.bump_epoch(&config.stream).await {
                            tracing::warn!(error = %error, "could not bump the stream's epoch at shard end");
                        }
                    }
                    return if ended { Exit::Ended } else { Exit::Released };
                }
                Ok(Outcome::Lost(_)) => return self.lose("lost before the final checkpoint"),
                Err(error) => {
                    tracing::warn!(error = %error, "release failed; retrying");
                    let delay = backoff.next_delay();
                    if last_ok.elapsed() + delay
                        >= config.lease_duration.saturating_sub(config.renew_interval)
                    {
                        return self.lose("could not release before the lease lapses");
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}
