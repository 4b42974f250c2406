//! Where the shards an exchange takes back go: to its giver, or on to a third member with room.
//!
//! An exchange gives one of the giver's shards to a taker that would end too heavy with it
//! alone, and takes back some of the taker's lighter shards ([`swap`](super::swap)). Taken back
//! by the giver, they stay with it for the three minutes a handed shard stays
//! ([`dwell`](super::dwell)), though a lighter member could have held them. The load
//! simulation's late seeds were that: a member of twice the capacity holding the fleet's hot
//! shard gave its second shard (10 records a second) to a member that then had to give back up
//! to 8 a second of lighter ones, and the giver stood at 1.15x to 1.25x the offline placement
//! for three minutes while members at three quarters of the mean had room (steady seeds 922,
//! 1788, 2068 and 2202). So each shard taken back goes, where one has room, straight to a
//! third member, marked wanted by it: the taker's keeper hands it over as to any asker, and it
//! moves once.
//!
//! Room: a third member takes a shard only while that leaves it lighter (over capacity) than
//! the giver would be keeping it, by [`THRESHOLD`] (the bar a move clears): the giver with its
//! shard given and every shard taken back not yet sent on, this one included. So the largest
//! weight of the members concerned falls, and no member ends above where the giver would have
//! stood; the heaviest shard first, so that each later one faces the giver as it then stands.
//! Not the fleet's mean: a member holding a shard hotter than a fair share stands above it
//! however the rest is placed (seed 1788's giver, of twice the capacity, held 20 a second
//! against a mean of 9.6 a capacity; the offline placement's heaviest stands at 10).

use super::{weight, Movable, Side, THRESHOLD};

/// For each of `back` (the taker's shards an exchange asks for, in that order), the member
/// among `thirds` (each with what it weighs; neither the giver nor the taker) it goes to
/// instead of the giver, or `None` (the giver takes it back). The heaviest shard first, each to
/// the third member it leaves lightest (over capacity; the first listed of two alike), while
/// that leaves the member below the giver, weighing `giver` less `given` (its shard's weight),
/// with this shard and those not yet sent on, by [`THRESHOLD`].
pub(crate) fn onward<'a, K: ?Sized>(
    giver: Side,
    given: f64,
    back: &[Movable],
    thirds: &[(&'a K, Side)],
) -> Vec<Option<&'a K>> {
    let mut order: Vec<usize> = (0..back.len()).collect();
    // Heaviest first (a stable sort: the first listed of two alike first).
    order.sort_by(|a, b| weight(&back[*b].load).total_cmp(&weight(&back[*a].load)));
    let mut kept: f64 = back.iter().map(|m| weight(&m.load)).sum();
    let mut added = vec![0.0; thirds.len()];
    let mut to = vec![None; back.len()];
    for i in order {
        let w = weight(&back[i].load);
        let bar = giver.ratio(giver.weight - given + kept) * (1.0 - THRESHOLD);
        let best = thirds
            .iter()
            .enumerate()
            .map(|(j, (_, side))| (j, side.ratio(side.weight + added[j] + w)))
            .filter(|(_, after)| *after < bar)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((j, _)) = best {
            added[j] += w;
            kept -= w;
            to[i] = Some(thirds[j].0);
        }
    }
    to
}

#[cfg(test)]
mod tests {
    use kinesis_lease_core::Load;

    use super::*;

    fn side(busy: u64, shards: u64, capacity: u64) -> Side {
        let mut load = Load::new(0, 0, busy).with_capacity(capacity);
        load.shards = Some(shards);
        Side::of(&load).unwrap()
    }

    fn shard(name: &str, busy: u64) -> Movable {
        Movable {
            shard: name.to_owned(),
            load: Load::new(0, 0, busy),
        }
    }

    /// Load seed 922 at 71 s, in records a second at 20 ms each (1,200 handler milliseconds a
    /// minute a record a second): the member of twice the capacity held 32 a second (the hot
    /// shard of 20 among them) and gave its shard of 10 to a member of 6, which gave back
    /// shards of 1, 1 and 2 a second; two members held 8 a second each. Taken back, they left
    /// the giver at 13 a capacity (1.18x the offline placement) for three minutes; sent on to
    /// the two members of 8, it stands at 11 and they at 10 each.
    #[test]
    fn shards_taken_back_go_on_to_members_with_room_heaviest_first() {
        let giver = side(32 * 1_200, 6, 2_000);
        let back = [shard("14", 1_200), shard("15", 1_200), shard("24", 2_400)];
        let (a, b, c) = ("broker-0", "broker-1", "broker-4");
        let thirds = [
            (a, side(8 * 1_200, 5, 1_000)),
            (b, side(11 * 1_200, 6, 1_000)),
            (c, side(8 * 1_200, 6, 1_000)),
        ];
        let to = onward(giver, 12_001.0, &back, &thirds);
        // The shard of 2 first, to the lighter of the two members of 8 (one shard fewer), then
        // each shard of 1 to the other (to the first, the second would leave it at 13,207,
        // above the bar of 12,699 the giver then sets with one shard of 1 kept).
        assert_eq!(to, vec![Some(c), Some(c), Some(a)]);
        assert_eq!(
            onward(giver, 12_001.0, &back, &thirds[1..2]),
            vec![None, None, None],
            "the member of 11 is no lighter than the giver keeping them, by the threshold"
        );
    }

    #[test]
    fn a_shard_no_third_member_has_room_for_goes_back_to_the_giver() {
        // The giver with its shard of 10 given: 19,205 (over its capacity of two, 9.6).
        let giver = side(26 * 1_200, 6, 2_000);
        let thirds = [
            ("x", side(6 * 1_200, 5, 1_000)),
            ("y", side(8_500, 5, 1_000)),
        ];
        let back = [shard("two", 2_400), shard("one", 1_200)];
        // The shard of 2 goes to x (9.6 after, below the giver keeping both: 11.4 less 8 %,
        // 10.5); then the giver with the shard of 1 alone sets the bar at 9.4, and neither
        // member stays below it with that shard (x 10.8, y 9.7).
        let to = onward(giver, 12_001.0, &back, &thirds);
        assert_eq!(to, vec![Some("x"), None]);
        // No third member at all: everything comes back.
        let none: [(&str, Side); 0] = [];
        assert_eq!(onward(giver, 12_001.0, &back, &none), vec![None, None]);
    }

    /// Capacity counts: a member of twice the capacity has twice the room.
    #[test]
    fn a_third_member_of_twice_the_capacity_takes_twice_as_much() {
        let giver = side(30_000, 6, 1_000);
        let back = [shard("a", 3_000), shard("b", 3_000)];
        let thirds = [
            ("small", side(14_000, 4, 1_000)),
            ("big", side(29_000, 8, 2_000)),
        ];
        // The first shard leaves the big member lighter (32,009 over 2: 16.0, against the
        // small one's 17.0), the second the small one (17.0 against 17.5).
        let to = onward(giver, 10_001.0, &back, &thirds);
        assert_eq!(to, vec![Some("big"), Some("small")]);
    }
}
