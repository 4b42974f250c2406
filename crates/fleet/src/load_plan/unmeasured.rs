//! Shards a listing shows before their holder measured them: what the planner assumes they
//! weigh.
//!
//! Rows are listed only when the epoch moves, so a listing taken at a start shows most rows
//! with no load yet, while the member rows read since show what each member weighs now. Taken
//! as listed, a member's unmeasured shards weigh [`PER_SHARD`] each: no exchange with it can
//! take anything back, and a giver exchanged with the one member whose shards happened to be
//! measured (the load simulation's seed 280: a hot shard for two warm ones, with a lighter
//! member of four unmeasured shards beside it; the warm ones stayed with the giver the three
//! minutes a handed shard stays, at 1.25x the offline placement). Counted as sharing what
//! their member weighs beyond its measured shards, such a member is weighed as a taker too.
//! The coordinator weighs every listing so (`State::held_as_weighed`), each row it read since
//! the listing standing as read, idle or not (else an exchange planned on the guess would read
//! the same idle rows at every comparison and never reach the others); an exchange reads the
//! rows it would take back before it decides, so what it takes back is never planned on the
//! guess alone.

use std::borrow::Cow;

use kinesis_lease_core::Load;

use super::{weight, Movable, Side, FIRST_READS, PER_SHARD};

/// `shards` (what the last listing showed a member of `side` to hold) with those `measured`
/// does not pass, and that carry no handler time, weighing alike what `side` weighs beyond
/// the others: when the others weigh less than half of it. As listed otherwise.
pub(crate) fn with_unmeasured_shared<'a>(
    side: Side,
    shards: &'a [Movable],
    measured: impl Fn(&Movable) -> bool,
) -> Cow<'a, [Movable]> {
    let unknown = |m: &Movable| m.load.busy_ms_per_min == 0 && !measured(m);
    let count = shards.iter().filter(|m| unknown(m)).count();
    let known: f64 = (shards.iter())
        .filter(|m| !unknown(m))
        .map(|m| weight(&m.load))
        .sum();
    if count == 0 || known >= side.weight / 2.0 {
        return Cow::Borrowed(shards);
    }
    let each = ((side.weight - known) / count as f64 - PER_SHARD).max(0.0);
    let busy = each.round() as u64;
    Cow::Owned(
        shards
            .iter()
            .map(|m| match unknown(m) {
                true => Movable {
                    shard: m.shard.clone(),
                    load: Load::new(0, 0, busy),
                },
                false => m.clone(),
            })
            .collect(),
    )
}

/// Of `shards` (as [`with_unmeasured_shared`] takes them), up to [`FIRST_READS`] of those it
/// guesses at, by shard id: the rows to read before the member is confirmed as an exchange's
/// taker. None when it guesses at nothing (no such row, or the others weigh half of `side` or
/// more). A row `measured` passes (read since the listing) is never among them, so that
/// successive comparisons read the others, not the same ones again.
pub(crate) fn unmeasured_to_read(
    side: Side,
    shards: &[Movable],
    measured: impl Fn(&Movable) -> bool,
) -> Vec<String> {
    if matches!(
        with_unmeasured_shared(side, shards, &measured),
        Cow::Borrowed(_)
    ) {
        return Vec::new();
    }
    shards
        .iter()
        .filter(|m| m.load.busy_ms_per_min == 0 && !measured(m))
        .map(|m| m.shard.clone())
        .take(FIRST_READS)
        .collect()
}
