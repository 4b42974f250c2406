//! The shards this instance may give away by load now, and those it may give within a take's
//! dwell (`load_plan::dwell`): what the planner weighs a move on (`State::balance_by_load`).

use tokio::time::Instant;

use crate::coordinator::State;
use crate::load_plan::{self, Movable};

impl State {
    /// The shards held long enough to be given (`load_plan::dwell`), with their loads, not
    /// being handed over already.
    pub(super) fn movable(&self, now: Instant) -> Vec<Movable> {
        self.held_loads(|at| now >= at)
            .into_iter()
            .map(|(movable, _)| movable)
            .collect()
    }

    /// The shards not movable yet that will be within a take's dwell (`load_plan::dwell`),
    /// with their loads, by shard id, and when the first of them will be.
    pub(super) fn movable_soon(&self, now: Instant) -> (Vec<Movable>, Option<Instant>) {
        let mut soon = self.held_loads(|at| now < at && at <= now + load_plan::dwell(false));
        soon.sort_by(|a, b| a.0.shard.cmp(&b.0.shard));
        let first = soon.iter().map(|(_, at)| *at).min();
        (
            soon.into_iter().map(|(movable, _)| movable).collect(),
            first,
        )
    }

    /// The held shards whose `movable_at` passes `when`, with their loads and that moment, not
    /// being handed over already (and measured, or taken with a load).
    fn held_loads(&self, when: impl Fn(Instant) -> bool) -> Vec<(Movable, Instant)> {
        self.shared
            .held()
            .iter()
            .filter(|(_, held)| when(held.movable_at))
            .filter(|(_, held)| {
                held.handing_to
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_none()
            })
            .filter_map(|(shard, held)| {
                let load = (*held.load.lock().unwrap_or_else(|p| p.into_inner()))?;
                Some((
                    Movable {
                        shard: shard.clone(),
                        load,
                    },
                    held.movable_at,
                ))
            })
            .collect()
    }
}
