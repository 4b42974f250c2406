//! `Listed`: the members one comparison may give a shard to, as last read, and the fleet's
//! mean beside them; the load planner draws the taker from it (`load_plan::taker`).

use crate::load_plan::{self, Movable, Side};

/// The members a comparison may give to, as last read (`State::listed_takers`).
pub(super) struct Listed {
    /// Each with what it weighs and what the last listing showed it to hold.
    pub(super) peers: Vec<(String, Side, Vec<Movable>)>,
    /// The fleet's mean weight over capacity, to which a move fills its taker
    /// (`load_plan::bundle`).
    pub(super) fill: f64,
    /// Whether this instance gives beside heavier members (`load_plan::beside_heavier`): then
    /// only to members a move within the mean suits.
    pub(super) beside: bool,
}

impl Listed {
    fn as_peers(&self) -> impl Iterator<Item = (&String, Side, &[Movable])> {
        self.peers
            .iter()
            .map(|(member, side, held)| (member, *side, held.as_slice()))
    }

    /// The member `pick` draws as the taker of a move from `movable` (`load_plan::taker`).
    pub(super) fn draw(&self, mine: Side, movable: &[Movable], pick: usize) -> Option<String> {
        load_plan::taker(mine, self.as_peers(), movable, self.fill, self.beside, pick).cloned()
    }

    /// The members a move from `movable` may go to (`load_plan::takers`).
    pub(super) fn takers(&self, mine: Side, movable: &[Movable]) -> Vec<&String> {
        load_plan::takers(mine, self.as_peers(), movable, self.fill, self.beside)
    }

    /// Whether a better move waits on `soon`, shards movable within a take's dwell
    /// (`load_plan::waits_for`).
    pub(super) fn waits_for(&self, mine: Side, movable: &[Movable], soon: &[Movable]) -> bool {
        load_plan::waits_for(mine, self.as_peers(), movable, soon, self.fill, self.beside)
    }

    /// The members left to `heavier` members (each its side and shards as listed) by one
    /// giving beside them (`load_plan::left_to_heavier`).
    pub(super) fn left_to(&self, heavier: &[(Side, Vec<Movable>)]) -> Vec<String> {
        let peers: Vec<(&String, Side, &[Movable])> = self.as_peers().collect();
        let left = load_plan::left_to_heavier(heavier, &peers, self.fill);
        left.into_iter().cloned().collect()
    }
}
