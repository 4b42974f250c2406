//! `MemberState`: what keepers need to know of this instance's membership, published by the
//! member task (`member`) and read by every keeper; apart from both so neither imports the
//! other's file through the shared state.

use tokio::time::Instant;

/// What keepers need to know of this instance's membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberState {
    /// Bumped by every join: keepers started under another incarnation stop.
    pub(crate) incarnation: u64,
    /// Keepers of this incarnation may go on until then.
    pub(crate) deadline: Instant,
}

impl MemberState {
    /// Not joined: every keeper stops.
    pub(crate) fn outside() -> Self {
        Self {
            incarnation: 0,
            deadline: Instant::now(),
        }
    }

    /// True while keepers of this incarnation may go on.
    pub(crate) fn is_live(&self) -> bool {
        self.incarnation != 0 && Instant::now() < self.deadline
    }
}
