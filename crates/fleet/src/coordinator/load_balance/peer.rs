//! `Peer`: what an instance balancing by load last read of another member's row.

use tokio::time::Instant;

use crate::load_plan::Side;

/// What this instance last read of another member (see `State::peers`).
#[derive(Debug, Clone, Copy)]
pub(in crate::coordinator) struct Peer {
    /// What it weighed; `None` when it was no taker then (gone, leaving, or publishing no
    /// load).
    pub(super) side: Option<Side>,
    /// A hand-over was on its way in (the count of pokes its row showed, and since when this
    /// instance saw that count unacted on): it is given nothing more until a later reading.
    pub(super) receiving: Option<(u64, Instant)>,
    /// When it was read.
    pub(super) at: Instant,
}

impl Peer {
    /// A member read as no taker (gone, leaving, or publishing no load) `at`.
    pub(super) fn absent(at: Instant) -> Peer {
        Peer {
            side: None,
            receiving: None,
            at,
        }
    }

    /// Whether a hand-over its row showed on its way in still keeps it from being given a
    /// shard: for at most three renew intervals on one count of pokes (a count its member never
    /// catches up with, as a row written by a release that keeps an old `pokes_seen`, must not
    /// keep it from being given anything for good).
    pub(super) fn awaits(&self, now: Instant, renew: std::time::Duration) -> bool {
        self.receiving
            .is_some_and(|(_, since)| now.duration_since(since) < renew * 3)
    }
}
