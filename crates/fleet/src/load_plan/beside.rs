//! Giving beside heavier members: a member far above the mean that heavier ones keep from
//! giving ([`among_heaviest`](super::among_heaviest)) may still give, within the mean, where many members stand
//! below it ([`beside_heavier`]); what it may give ([`bundle_within_fill`]) and to whom not
//! ([`left_to_heavier`]). Apart from the rest of the planner because it is the one rule that
//! lets a member below the top give.

use kinesis_lease_core::Load;

use super::{
    blocks, bundle, far_above_mean, mean, plans, settling_lowest, weight, Movable, Plan, Side,
    PER_SHARD, THRESHOLD,
};

/// Whether a member far above the mean ([`far_above_mean`]) that heavier peers keep from giving
/// ([`among_heaviest`](super::among_heaviest): more than [`PEER_GAP`](super::PEER_GAP) above this member) may give all the same: when
/// more than twice as many peers stand below the mean (less [`THRESHOLD`]) as above this member
/// by that gap. It then gives only what leaves its taker at most at the mean
/// ([`bundle_within_fill`], drawn on that measure: `beside` in [`takers`](super::takers)), and never to a peer
/// it leaves to the heavier members ([`left_to_heavier`]): that lowers a member that must shed
/// anyway and keeps for the heavier members the places their own moves would take; its takers
/// end below the mean, far from giving (unless two givers fill one taker in the same seconds,
/// as among the heaviest: its row shows the hand-over on its way in, `receiving`). Where many members must shed
/// into many light ones (a fleet that starts with its hot shards side by side), those a hot
/// shard or two apart no longer give in turn: at `fleet_balance` 1,000 x 50 the six members
/// holding every hot shard kept one another from giving for 9 to 12 s at a time while 44
/// members stood below the mean. With no more than twice as many light peers as heavier ones
/// (a fleet of three, say) nothing changes. A member giving beside heavier ones gives at most
/// as many times as it holds shards before it is within 1.25x of the mean.
pub(crate) fn beside_heavier(mine: Side, peers: &[Side]) -> bool {
    if !far_above_mean(mine, peers.iter().copied()) {
        return false;
    }
    let fill = mean(mine, peers.iter().copied());
    let heavier = peers.iter().filter(|peer| blocks(mine, **peer)).count();
    let below = peers
        .iter()
        .filter(|peer| peer.ratio(peer.weight) < fill * (1.0 - THRESHOLD))
        .count();
    heavier > 0 && below > 2 * heavier
}

/// The most heavier members whose places [`left_to_heavier`] keeps (the heaviest of them): each
/// costs a plan against every peer at each comparison.
pub(crate) const HEAVIER_MOST: usize = 8;

/// The peers a member giving beside heavier ones ([`beside_heavier`]) leaves to them. For each
/// of `heavier` (its side and its shards as last listed), the peers its own move or exchange
/// may go to ([`takers`](super::takers)' measure: within [`THRESHOLD`] of its best, an exchange's
/// also within it of where the lowest settles): all of them when they
/// are no more than one above the number of heavier members (places are scarce: one member of
/// twice the capacity, say), else the best not already left to another (the first of equals);
/// then the members with the most room below `fill` (capacity times the mean, less their
/// weight), one per heavier member, counting those already left (leaving a further one each
/// held 100 x 10 of `fleet_balance` at 1.09x the offline placement rather than 1.05x: too few
/// takers were left). Not merely the lightest peers over capacity: in the load simulation a
/// member kept from giving by one holding a hot shard gave its cold shards to the one member
/// of twice the capacity where that shard fitted best, and they stayed there the three minutes
/// a handed shard stays, with the fleet 1.2x the offline placement (seed 26, while the
/// lightest peer was left). Only the [`HEAVIER_MOST`] heaviest of those above count. A heavier
/// member whose listed shards weigh less than half its
/// weight (the listing predates their measures, as at a start, or a shard turned hot since)
/// counts as holding them alike, its weight shared among them: with every listed shard
/// weighing its 1 alone, each peer was alike and the one member where a hot shard fitted was
/// not among those left (a review's fleet).
pub(crate) fn left_to_heavier<'a, K>(
    heavier: &[(Side, Vec<Movable>)],
    peers: &[(&'a K, Side, &'a [Movable])],
    fill: f64,
) -> Vec<&'a K>
where
    K: ?Sized + PartialEq + 'a,
{
    let mut left: Vec<&K> = Vec::new();
    for (side, shards) in heavier {
        let listed: f64 = shards.iter().map(|m| weight(&m.load)).sum();
        let alike: Vec<Movable>;
        let shards = match listed < side.weight / 2.0 && !shards.is_empty() {
            true => {
                let each = side.weight / shards.len() as f64 - PER_SHARD;
                let busy = each.max(0.0).round() as u64;
                alike = (shards.iter())
                    .map(|m| Movable {
                        shard: m.shard.clone(),
                        load: Load::new(0, 0, busy),
                    })
                    .collect();
                &alike
            }
            false => shards,
        };
        let mut planned: Vec<Plan<K>> = plans(*side, peers, shards, fill, false)
            .into_iter()
            .filter(|plan| plan.after < side.ratio(side.weight))
            .collect();
        // Stable: the first of equals stays first.
        planned.sort_by(|a, b| a.after.total_cmp(&b.after));
        let Some(best) = planned.first().map(|plan| plan.after) else {
            continue;
        };
        // The peers it would draw among (`takers`: an exchange's by where its pair settles too).
        let near: Vec<&K> = settling_lowest(
            planned
                .iter()
                .filter(|plan| plan.after <= best * (1.0 + THRESHOLD)),
        )
        .map(|plan| plan.key)
        .collect();
        let keep: Vec<&K> = match near.len() <= heavier.len() + 1 {
            true => near,
            false => near
                .into_iter()
                .filter(|key| !left.contains(key))
                .take(1)
                .collect(),
        };
        for key in keep {
            if !left.contains(&key) {
                left.push(key);
            }
        }
    }
    let mut roomiest: Vec<(f64, &K)> = peers
        .iter()
        .map(|(key, peer, _)| (peer.capacity * fill - peer.weight, *key))
        .collect();
    roomiest.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, key) in roomiest.into_iter().take(heavier.len()) {
        if !left.contains(&key) {
            left.push(key);
        }
    }
    left
}

/// [`bundle`] for a giver that gives beside heavier members ([`beside_heavier`]): only shards
/// that leave the taker at most at `fill`, the fleet's mean weight over capacity, the first
/// one too (a move that fills a taker past the mean may take the place a heavier member's
/// shard needs). Empty when no such move is worth it.
pub(crate) fn bundle_within_fill(
    giver: Side,
    taker: Side,
    movable: &[Movable],
    fill: f64,
) -> Vec<&str> {
    // Each shard alone within the mean: the first then is too, and `bundle` keeps the taker
    // there for the shards after it.
    let fitting: Vec<Movable> = movable
        .iter()
        .filter(|m| taker.ratio(taker.weight + weight(&m.load)) <= fill)
        .cloned()
        .collect();
    bundle(giver, taker, &fitting, fill)
        .into_iter()
        .filter_map(|shard| movable.iter().find(|m| m.shard == shard))
        .map(|m| m.shard.as_str())
        .collect()
}

/// The move from `movable` to a taker weighing `theirs`: [`bundle`], or [`bundle_within_fill`]
/// when the giver gives `beside` heavier members ([`beside_heavier`]).
pub(crate) fn planned(
    beside: bool,
    giver: Side,
    taker: Side,
    movable: &[Movable],
    fill: f64,
) -> Vec<&str> {
    match beside {
        true => bundle_within_fill(giver, taker, movable, fill),
        false => bundle(giver, taker, movable, fill),
    }
}
