//! What a subscription's coordinator and its shard tasks share.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_dispatch::{DeliverySender, ShardSettlement};
use kinesis_lease_core::{Checkpoint, ErrorChain, LeaseKey, LeaseStore};
use tokio::sync::{mpsc, watch};

use crate::{KinesisApi, ReaderConfig, ReaderError};

/// Where the subscription is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Taking leases and reading.
    Running,
    /// Shutting down: no new leases, no more reads; leases still renewed while handlers finish.
    Draining,
    /// Writing final checkpoints and releasing every lease.
    Releasing,
}

/// Resolves once the phase is no longer `Running` (the borrow is not held across awaits).
pub(crate) async fn left_running(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p != Phase::Running).await.map(drop);
}

/// Resolves once the phase is `Releasing`.
pub(crate) async fn releasing(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p == Phase::Releasing).await.map(drop);
}

/// What the keeper tells its reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Keep reading.
    Reading,
    /// Stop reading; the deliveries handed out may still settle (a hand-over is under way).
    Stop,
    /// The lease is lost: stop at once.
    Lost,
}

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
    pub(crate) kpl: Arc<crate::deaggregation::KplCounters>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: ReaderConfig,
    pub(crate) kinesis: Arc<dyn KinesisApi>,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) sender: DeliverySender,
    pub(crate) phase: watch::Sender<Phase>,
    pub(crate) fatal: watch::Sender<Option<Arc<ReaderError>>>,
    pub(crate) reports: mpsc::UnboundedSender<Report>,
    pub(crate) held: Mutex<HashMap<String, Held>>,
    /// The fan-out consumer's ARN, once registered (`ReaderConfig::fan_out`): readers then
    /// subscribe instead of polling. Updated when a reader registers it again.
    pub(crate) consumer_arn: ConsumerArn,
    /// The subscription's metric handles (nothing without the `metrics` feature).
    pub(crate) metrics: crate::metrics::StreamMetrics,
    /// This instance's membership (see `member`): keepers stop when it lapses.
    pub(crate) member: watch::Sender<crate::member::MemberState>,
    /// An epoch bump that failed and is owed: the coordinator retries it at its next tick, so
    /// freed rows are never left unnoticed by the others.
    pub(crate) bump_owed: std::sync::atomic::AtomicBool,
    /// The same for the roster's epoch after this instance joined: retried by the member task
    /// at its next renewal, so the others always come to watch it.
    pub(crate) roster_bump_owed: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(crate) fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
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
        tracing::error!(stream = %self.config.stream, error = %ErrorChain(&error), "subscription failed");
        self.fatal.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(Arc::new(error));
                true
            } else {
                false
            }
        });
    }
}

/// The fan-out consumer's ARN as this instance last learned it: set by the coordinator's first
/// registration, and again by a reader that registered the consumer again (after it was
/// deregistered) or found it registered again under a new ARN, so readers started later
/// subscribe with the current ARN at once instead of failing first.
#[derive(Debug, Default)]
pub(crate) struct ConsumerArn {
    arn: Mutex<Option<String>>,
    /// Held by the one reader registering the consumer again: the others wait, then take the
    /// ARN it found.
    renewing: tokio::sync::Mutex<()>,
}

impl ConsumerArn {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The ARN, once registered (`None`: the subscription polls).
    pub(crate) fn get(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Sets the ARN; returns the one it replaces.
    pub(crate) fn set(&self, arn: String) -> Option<String> {
        self.lock().replace(arn)
    }

    /// Sets `new` if the ARN is still `old` (a later one, set meanwhile, stays).
    pub(crate) fn replace(&self, old: &str, new: String) {
        let mut arn = self.lock();
        if arn.as_deref() == Some(old) {
            *arn = Some(new);
        }
    }

    /// The right to register the consumer again, one reader at a time.
    pub(crate) async fn renewing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.renewing.lock().await
    }

    fn lock(&self) -> MutexGuard<'_, Option<String>> {
        self.arn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Cancels the task it guards when dropped, so a task never outlives its owner.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
