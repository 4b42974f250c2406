//! The members a comparison giving beside heavier members leaves to them
//! (`load_plan::left_to_heavier`), from what this instance last read of each member and the
//! last listing of their rows.

use tokio::time::Instant;

use crate::load_plan::{self, Movable, Side};

use super::State;

impl State {
    /// The members left to the heaviest members above this one weighing `mine` (at most
    /// `load_plan::HEAVIER_MOST` of them).
    pub(super) fn left_to_heavier(&self, now: Instant, mine: Side) -> Vec<String> {
        let ratio = |side: &Side| side.ratio(side.weight);
        let mut heavier: Vec<(Side, &String)> = (self.peers.iter())
            .filter_map(|(member, peer)| Some((peer.side?, member)))
            .filter(|(side, _)| load_plan::blocks(mine, *side))
            .collect();
        heavier.sort_by(|a, b| ratio(&b.0).total_cmp(&ratio(&a.0)).then(a.1.cmp(b.1)));
        heavier.truncate(load_plan::HEAVIER_MOST);
        let heavier: Vec<(Side, Vec<Movable>)> = (heavier.into_iter())
            .map(|(side, member)| (side, self.held_by(member)))
            .collect();
        self.listed_takers(now, mine, &[], false).left_to(&heavier)
    }
}
