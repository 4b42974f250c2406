//! What passes between a shard's reader and the lease keeper beside it: the keeper's
//! [`Signal`] (read on, stop, lost), the subscription's [`Phase`], and the reader's
//! [`KeeperCmd`] (the shard ended, or release after a fatal error).
//!
//! The vocabulary lives here, under the reader, so that the reader never depends on the fleet
//! protocol that runs it (`kinesis-fleet`): the fleet sends these, the reader obeys them.

use tokio::sync::watch;

/// Where the subscription is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Taking leases and reading.
    Running,
    /// Shutting down: no new leases, no more reads; leases still renewed while handlers finish.
    Draining,
    /// Writing final checkpoints and releasing every lease.
    Releasing,
}

/// Resolves once the phase is no longer `Running` (the borrow is not held across awaits).
pub async fn left_running(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p != Phase::Running).await.map(drop);
}

/// Resolves once the phase is `Releasing`.
pub async fn releasing(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p == Phase::Releasing).await.map(drop);
}

/// What the keeper tells its reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Keep reading.
    Reading,
    /// Stop reading; the deliveries handed out may still settle (a hand-over is under way).
    Stop,
    /// The lease is lost: stop at once.
    Lost,
}

/// What the reader asks the keeper to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeeperCmd {
    /// The shard was read and settled to its end: write `SHARD_END` and release.
    ShardEnd,
    /// Release now with the due checkpoint (after a fatal error).
    Release,
}
