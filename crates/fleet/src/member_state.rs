//! `MemberState`: what keepers need to know of this instance's membership, published by the
//! member task (`member`) and read by every keeper; apart from both so neither imports the
//! other's file through the shared state.

use tokio::time::Instant;

/// What keepers need to know of this instance's membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberState {
    /// Bumped by every join: keepers started under another incarnation stop.
    pub(crate) incarnation: u64,
    /// Keepers of this incarnation may go on until then.
    pub(crate) deadline: Instant,
    /// The roster's epoch bump after this incarnation's join landed: every other instance
    /// lists the roster, so this one is watched and buried should it die. Only then may it
    /// take shards (the others no longer list the roster on a timer, see `ring_watch`).
    pub(crate) announced: bool,
    /// The member row's pokes as its last landed write returned them (see
    /// `LeaseStore::poke`): others wrote rows this instance holds (an operator's evict, a
    /// hand-over request). Quiet keepers (see `quiet`) write their row when it grows.
    pub(crate) pokes: u64,
    /// The shard of the row the last of those pokes was about (`Lease::poked`): the keepers
    /// of the other rows pass over a single new poke.
    pub(crate) poked: Option<std::sync::Arc<str>>,
}

impl MemberState {
    /// Not joined: every keeper stops.
    pub(crate) fn outside() -> Self {
        Self {
            incarnation: 0,
            deadline: Instant::now(),
            announced: false,
            pokes: 0,
            poked: None,
        }
    }

    /// True while keepers of this incarnation may go on.
    pub(crate) fn is_live(&self) -> bool {
        self.incarnation != 0 && Instant::now() < self.deadline
    }

    /// True while this instance may take shards: live, and its join announced.
    pub(crate) fn may_take(&self) -> bool {
        self.is_live() && self.announced
    }
}
