//! `Quiet`: what a quiet keeper (`ReaderConfig::quiet_idle`) knows of the writes others made
//! to its row, and so how long it may go on without writing it.
//!
//! With the option on, a tick writes the row only when its checkpoint moved: an idle shard
//! costs no write. The row then stands still, and that is safe because of how rows held by a
//! member move (see `roster`): no instance takes a present member's row, and every keeper stops
//! with its member row. Only two writes by others touch such a row: an operator's evict and a
//! hand-over request. Both poke the holder's member row (`LeaseStore::poke`; the evict in the
//! same write), and the member row's renewal, every renew interval, returns the pokes. So:
//!
//! - a renewal of the member row sent at `R` that returns no poke this keeper has not checked
//!   proves that no evict had landed on its row before `R`: the keeper may go on until
//!   `R + lease - renew`, as if it had written its own row at `R` (`Quiet::observe`);
//! - a poke it has not checked makes it write its row at once: a write that lands proves the
//!   row still held (and returns a hand-over request, if any); a lost write stops the reader.
//!   Until then its time runs from the last renewal that showed no new poke, so it stops within
//!   `lease - renew` of that renewal whatever the store does.
//!
//! Each poke names the row it is about (`Lease::poked`). A keeper that sees exactly one poke
//! more than it checked, about another row, passes over it: it was not about this row. So one
//! hand-over request or evict makes one keeper write, not every quiet keeper of the instance;
//! two or more new pokes at once (or one whose row is unknown) make every keeper write.
//!
//! An evicted row is taken by another instance only once its counter stood still for a lease
//! after the evict, so the keeper stops before anybody else may read the shard. Rows held by
//! instances of a release before the roster (which take rows standing still) make every quiet
//! keeper renew as before while a listing shows them.

use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use crate::member_state::MemberState;

/// What a quiet keeper knows of the writes others made to its row (see the module docs).
#[derive(Debug)]
pub(crate) struct Quiet {
    /// The shard of the keeper's row: a poke about another row is not about it.
    shard: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The member row's pokes, up to which every poke was followed by a write of this row that
    /// landed (or was made before this holding's take was sent).
    checked: u64,
    /// Until when this keeper may go on on the strength of member renewals that returned no
    /// unchecked poke.
    clear_until: Instant,
}

impl Quiet {
    /// The quiet keeper of `shard`'s row, whose take was sent at `taken_at`, when the member
    /// row's pokes were `pokes`: every poke up to then was about an earlier holding.
    pub(crate) fn new(shard: &str, pokes: u64, taken_at: Instant) -> Self {
        Self {
            shard: shard.to_owned(),
            state: Mutex::new(State {
                checked: pokes,
                clear_until: taken_at,
            }),
        }
    }

    /// Takes in the member state: its deadline clears this keeper when it shows no unchecked
    /// poke. Returns the time until which the keeper may go on by the member row alone.
    pub(crate) fn observe(&self, member: &MemberState) -> Instant {
        let mut state = self.state();
        self.pass_over(&mut state, member);
        if member.pokes <= state.checked {
            state.clear_until = state.clear_until.max(member.deadline);
        }
        state.clear_until
    }

    /// True when `member` shows a poke this keeper must check by writing its row.
    pub(crate) fn unchecked(&self, member: &MemberState) -> bool {
        let mut state = self.state();
        self.pass_over(&mut state, member);
        member.pokes > state.checked
    }

    /// One poke more than checked, about another row: not about this one (an evict or a
    /// request pokes about the row it wrote), so it counts as checked. Two or more, or one
    /// whose row is unknown, may hide one about this row: those are checked by a write.
    fn pass_over(&self, state: &mut State, member: &MemberState) {
        if member.pokes == state.checked.saturating_add(1)
            && member.poked.as_deref().is_some_and(|p| p != self.shard)
        {
            state.checked = member.pokes;
        }
    }

    /// The pokes up to which every one was checked.
    #[cfg(test)]
    fn checked(&self) -> u64 {
        self.state().checked
    }

    /// A write of the row sent when the member row showed `pokes` landed: none of them
    /// evicted this holding.
    pub(crate) fn checked_up_to(&self, pokes: u64) {
        let mut state = self.state();
        state.checked = state.checked.max(pokes);
    }

    /// The state, through a poisoned lock too (it holds two plain values).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn member(pokes: u64, deadline: Instant) -> MemberState {
        about(pokes, None, deadline)
    }

    fn about(pokes: u64, poked: Option<&str>, deadline: Instant) -> MemberState {
        MemberState {
            incarnation: 1,
            deadline,
            announced: true,
            pokes,
            poked: poked.map(Into::into),
        }
    }

    #[test]
    fn a_renewal_without_a_new_poke_extends_the_clearance() {
        let taken = Instant::now();
        let quiet = Quiet::new("s-1", 3, taken);
        let later = taken + Duration::from_secs(7);
        assert_eq!(quiet.observe(&member(3, later)), later);
        // An older deadline never shortens it.
        assert_eq!(quiet.observe(&member(3, taken)), later);
    }

    #[test]
    fn an_unchecked_poke_freezes_the_clearance_until_a_write_lands() {
        let taken = Instant::now();
        let quiet = Quiet::new("s-1", 3, taken);
        let first = taken + Duration::from_secs(7);
        quiet.observe(&member(3, first));
        let second = first + Duration::from_secs(3);
        assert_eq!(quiet.observe(&member(4, second)), first);
        assert_eq!(quiet.checked(), 3);
        quiet.checked_up_to(4);
        assert_eq!(quiet.checked(), 4);
        assert_eq!(quiet.observe(&member(4, second)), second);
        // Checks never go back.
        quiet.checked_up_to(2);
        assert_eq!(quiet.checked(), 4);
    }

    #[test]
    fn a_single_poke_about_another_row_is_passed_over() {
        let taken = Instant::now();
        let later = taken + Duration::from_secs(7);
        let quiet = Quiet::new("s-1", 3, taken);
        // One new poke, about another row: checked without a write, and it clears.
        assert!(!quiet.unchecked(&about(4, Some("s-2"), later)));
        assert_eq!(quiet.observe(&about(4, Some("s-2"), later)), later);
        assert_eq!(quiet.checked(), 4);
        // One about this row: a write must check it.
        let quiet = Quiet::new("s-1", 3, taken);
        assert!(quiet.unchecked(&about(4, Some("s-1"), later)));
        assert_eq!(quiet.observe(&about(4, Some("s-1"), later)), taken);
        // Two new pokes, the last about another row: the first may be about this one.
        let quiet = Quiet::new("s-1", 3, taken);
        assert!(quiet.unchecked(&about(5, Some("s-2"), later)));
        // One whose row is unknown (a store that names none).
        let quiet = Quiet::new("s-1", 3, taken);
        assert!(quiet.unchecked(&about(4, None, later)));
    }
}
