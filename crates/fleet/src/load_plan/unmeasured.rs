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

/// Whether `m`, as listed, is one the guess stands for: no handler time, and not `measured`
/// (read since the listing).
fn unknown(m: &Movable, measured: &impl Fn(&Movable) -> bool) -> bool {
    m.load.busy_ms_per_min == 0 && !measured(m)
}

/// The handler time a minute each [`unknown`] row of `shards` is guessed at: what `side`
/// weighs beyond the others, shared alike. `None` when there is no such row, or the others
/// weigh half of `side` or more (then the listing stands as it is).
fn guessed_busy(
    side: Side,
    shards: &[Movable],
    measured: &impl Fn(&Movable) -> bool,
) -> Option<u64> {
    let count = shards.iter().filter(|m| unknown(m, measured)).count();
    let known: f64 = (shards.iter())
        .filter(|m| !unknown(m, measured))
        .map(|m| weight(&m.load))
        .sum();
    if count == 0 || known >= side.weight / 2.0 {
        return None;
    }
    let each = ((side.weight - known) / count as f64 - PER_SHARD).max(0.0);
    Some(each.round() as u64)
}

/// `shards` (what the last listing showed a member of `side` to hold) with those `measured`
/// does not pass, and that carry no handler time, weighing alike what `side` weighs beyond
/// the others: when the others weigh less than half of it. As listed otherwise.
pub(crate) fn with_unmeasured_shared<'a>(
    side: Side,
    shards: &'a [Movable],
    measured: impl Fn(&Movable) -> bool,
) -> Cow<'a, [Movable]> {
    let Some(busy) = guessed_busy(side, shards, &measured) else {
        return Cow::Borrowed(shards);
    };
    Cow::Owned(
        shards
            .iter()
            .map(|m| match unknown(m, &measured) {
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
/// successive comparisons read the others, not the same ones again. Nor one that `stays`
/// (handed to its member a moment ago: an exchange cannot take it back), which still counts
/// towards the guess.
pub(crate) fn unmeasured_to_read(
    side: Side,
    shards: &[Movable],
    measured: impl Fn(&Movable) -> bool,
    stays: impl Fn(&Movable) -> bool,
) -> Vec<String> {
    if guessed_busy(side, shards, &measured).is_none() {
        return Vec::new();
    }
    shards
        .iter()
        .filter(|m| unknown(m, &measured) && !stays(m))
        .map(|m| m.shard.clone())
        .take(FIRST_READS)
        .collect()
}
