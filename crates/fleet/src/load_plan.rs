//! The load planner: whether this instance should give one of its shards to another member,
//! and which, when shards are balanced by load (`ReaderConfig::balance_by_load`).
//!
//! Pure: no store, no clock. The coordinator compares itself, every sample interval, with one
//! member picked at random (one small read of that member's row, whatever the number of shards
//! or members), and gives the shard this returns through the graceful hand-over. The giver
//! decides because it alone knows its shards' loads as they are now.
//!
//! A member's weight is its handler time plus [`PER_SHARD`] for each shard it holds, over its
//! capacity: on a stream whose shards cost alike (or nothing at all, idle) the weights are the
//! counts, and the shares come out as by count.
//!
//! A move must leave the taker lighter (over capacity) than the giver was, by more than
//! [`THRESHOLD`] of the giver's weight: a shard hotter than a fair share keeps its member to
//! itself (given away, it would only make the taker the heavier), and members near each other
//! do not trade shards back and forth. The threshold bounds the taker, not the gain: a member
//! holding many shards sheds them one at a time, however small each is against its weight.
//! Where no single shard may go (a member with three hot shards among members each near the
//! mean), an exchange may: one shard for lighter ones of the taker's ([`swap`]), by the same
//! rule. Each move or exchange lowers the larger weight of its pair and raises none past it,
//! so the largest weight in the fleet never rises; and each lowers the sum over members of
//! weight squared over capacity, so the moves stop.

use kinesis_lease_core::Load;

/// What a held shard weighs besides its handler time, in handler milliseconds a minute (0.1 %
/// of a handler): idle shards weigh alike, so an idle fleet shares by count.
pub(crate) const PER_SHARD: f64 = 60.0;

/// The least share of the giver's weight a move must take off the pair's larger weight.
pub(crate) const THRESHOLD: f64 = 0.05;

/// How often an instance compares itself with another member (one read of its member row).
pub(crate) const SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a shard is held before it may be given away: a minute after a take (its load is
/// measured by then), five after a hand-over, so a shard moves at most once in five minutes.
pub(crate) fn dwell(handed: bool) -> std::time::Duration {
    std::time::Duration::from_secs(if handed { 300 } else { 60 })
}

/// One member's side: its weight's parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Side {
    /// Handler milliseconds a minute, plus [`PER_SHARD`] per shard held.
    pub(crate) weight: f64,
    /// Its capacity, in thousandths of the default.
    pub(crate) capacity: f64,
}

impl Side {
    /// A member's side from the load its row publishes; `None` for a row without loads (an
    /// earlier release, or one that never measured), whose weight is not known.
    pub(crate) fn of(load: &Load) -> Option<Side> {
        let shards = load.shards?;
        Some(Side {
            weight: load.busy_ms_per_min as f64 + PER_SHARD * shards as f64,
            capacity: load
                .capacity_milli
                .unwrap_or(Load::DEFAULT_CAPACITY_MILLI)
                .max(1) as f64,
        })
    }

    fn ratio(&self, weight: f64) -> f64 {
        weight / self.capacity
    }
}

/// A shard the giver holds and may give now (held long enough: see the coordinator).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Movable {
    /// The shard id.
    pub(crate) shard: String,
    /// Its load.
    pub(crate) load: Load,
}

/// The weight a shard adds to its holder.
pub(crate) fn weight(load: &Load) -> f64 {
    load.busy_ms_per_min as f64 + PER_SHARD
}

/// The shard the giver should give the taker, if a move is worth it: the one that leaves the
/// pair's larger weight (over capacity) smallest, among those that leave the taker below the
/// giver's weight less [`THRESHOLD`] (the lighter shard of two that do as well).
pub(crate) fn choose(giver: Side, taker: Side, movable: &[Movable]) -> Option<&str> {
    let before = giver.ratio(giver.weight);
    if before <= taker.ratio(taker.weight) {
        return None;
    }
    movable
        .iter()
        .filter_map(|m| {
            let w = weight(&m.load);
            let (g, t) = (giver.ratio(giver.weight - w), taker.ratio(taker.weight + w));
            (t < top(giver) && settles(giver, taker, w)).then_some((g.max(t), w, m))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, m)| m.shard.as_str())
}

/// Whether an exchange of `given` for `back` (the taker's shards whose marks landed; fewer,
/// perhaps, than [`swap`] chose) still leaves the taker lighter than the giver was and lowers
/// the sum of weight squared over capacity: then the pair's larger weight falls, the fleet's
/// largest does not rise, and the moves still stop.
pub(crate) fn exchange_lowers(giver: Side, taker: Side, given: &Load, back: &[Load]) -> bool {
    let net = weight(given) - back.iter().map(weight).sum::<f64>();
    net > 0.0
        && taker.ratio(taker.weight + net) < giver.ratio(giver.weight)
        && settles(giver, taker, net)
}

fn holds(giver: Side, taker: Side, given: f64, back: f64) -> bool {
    let net = given - back;
    net > 0.0 && taker.ratio(taker.weight + net) < top(giver) && settles(giver, taker, net)
}

/// The most a taker may end at (over capacity): below the giver's weight less [`THRESHOLD`].
fn top(giver: Side) -> f64 {
    giver.ratio(giver.weight) * (1.0 - THRESHOLD)
}

/// Whether moving `net` weight from the giver to the taker lowers the sum of weight squared
/// over capacity (what makes the moves stop). Between equal capacities any move that leaves
/// the taker lighter than the giver was does; between unequal ones a large shard moved off a
/// small member may not.
fn settles(giver: Side, taker: Side, net: f64) -> bool {
    let (before, after) = (
        giver.weight.powi(2) / giver.capacity + taker.weight.powi(2) / taker.capacity,
        (giver.weight - net).powi(2) / giver.capacity
            + (taker.weight + net).powi(2) / taker.capacity,
    );
    after < before
}

/// The most shards a swap takes back for the one it gives.
pub(crate) const SWAP_MOST: usize = 8;

/// An exchange of shards between the giver and the taker: see [`swap`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Swap<'a> {
    /// The giver's shard the taker gets.
    pub(crate) give: &'a str,
    /// The taker's shards the giver gets back (at most [`SWAP_MOST`]), each lighter than
    /// `give`.
    pub(crate) take: Vec<&'a str>,
}

/// The least share of the giver's weight an exchange must take off it: an exchange costs two
/// moves or more, and shards of about one weight must not trade places for nothing. Half of
/// [`THRESHOLD`], since the taker's bound already keeps the pair that far apart: with the
/// whole threshold on both sides, a member with three hot shards next to members near the
/// mean often finds no exchange whose cold shards fit both bounds (`fleet_balance` 100x10
/// stayed at 1.38).
pub(crate) const EXCHANGE_GAIN: f64 = THRESHOLD / 2.0;

/// Whether the pair is far enough apart for some exchange to pass [`swap`]'s bounds: the
/// weight the taker may still take below [`top`] is more than the [`EXCHANGE_GAIN`] the giver
/// must shed (in weight, so that capacities of their own count on each side).
pub(crate) fn may_exchange(giver: Side, taker: Side) -> bool {
    (top(giver) - taker.ratio(taker.weight)) * taker.capacity > giver.weight * EXCHANGE_GAIN
}

/// When no single shard is worth giving ([`choose`] found none), an exchange that is: one of
/// the giver's shards for lighter ones of the taker's, leaving the giver lighter by more than
/// [`EXCHANGE_GAIN`], the taker below the giver's weight less [`THRESHOLD`], and the
/// two as near each other as the shards
/// allow. This is what moves a fleet out of the
/// spot where single moves stop: a member with three hot shards among members each near the
/// mean cannot give one (the taker would end heavier than it was), and cold shards do not move
/// between members near the mean; swapped for a few cold shards, a hot one can.
///
/// The same rule as [`choose`] holds for the net weight moved: the pair's larger weight (over
/// capacity) falls, and nothing else changes, so the fleet's largest weight
/// never rises and the exchanges stop. `theirs` is what the giver last saw of the taker's
/// shards (loads from the rows' writes).
pub(crate) fn swap<'a>(
    giver: Side,
    taker: Side,
    mine: &'a [Movable],
    theirs: &'a [Movable],
) -> Option<Swap<'a>> {
    if giver.ratio(giver.weight) <= taker.ratio(taker.weight) {
        return None;
    }
    let mut back: Vec<(f64, &Movable)> = theirs.iter().map(|m| (weight(&m.load), m)).collect();
    // The heaviest first, so that a swap takes few shards.
    back.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.shard.cmp(&b.1.shard)));
    let mut best: Option<(f64, Swap<'a>)> = None;
    if !may_exchange(giver, taker) {
        return None;
    }
    for given in mine {
        let w = weight(&given.load);
        if holds(giver, taker, w, 0.0) {
            // A move alone (`choose`).
            continue;
        }
        // Where the two would weigh alike (over capacity): take back about that much, so
        // that the taker does not end a member the next exchange has to relieve.
        let even = (giver.capacity * (taker.weight + w) - taker.capacity * (giver.weight - w))
            / (giver.capacity + taker.capacity);
        let (mut sum, mut take) = (0.0, Vec::new());
        for (b, m) in &back {
            if sum + b < w {
                sum += b;
                take.push(m.shard.as_str());
                if (sum >= even && holds(giver, taker, w, sum)) || take.len() == SWAP_MOST {
                    break;
                }
            }
        }
        // Two moves or more for one: the giver must come down by [`EXCHANGE_GAIN`] too, or
        // shards of about one weight trade places for nothing.
        let gain = giver.ratio(giver.weight) - giver.ratio(giver.weight - w + sum);
        if !holds(giver, taker, w, sum) || gain <= giver.ratio(giver.weight) * EXCHANGE_GAIN {
            continue;
        }
        let after = giver
            .ratio(giver.weight - w + sum)
            .max(taker.ratio(taker.weight + w - sum));
        let better = best.as_ref().is_none_or(|(a, s)| {
            after < *a - 1e-9 || (after <= *a + 1e-9 && take.len() < s.take.len())
        });
        if better {
            best = Some((
                after,
                Swap {
                    give: given.shard.as_str(),
                    take,
                },
            ));
        }
    }
    best.map(|(_, swap)| swap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(busy: u64, shards: u64, capacity: u64) -> Side {
        let mut load = Load::new(0, 0, busy).with_capacity(capacity);
        load.shards = Some(shards);
        Side::of(&load).unwrap()
    }

    fn shards(busy: &[(&str, u64)]) -> Vec<Movable> {
        busy.iter()
            .map(|(shard, b)| Movable {
                shard: (*shard).to_owned(),
                load: Load::new(0, 0, *b),
            })
            .collect()
    }

    #[test]
    fn a_member_with_two_hot_shards_gives_one_to_a_cold_member() {
        // Hot shards of 10,000 ms a minute, cold ones of 1,000.
        let mine = shards(&[("hot-1", 10_000), ("hot-2", 10_000), ("cold-1", 1_000)]);
        let giver = side(21_000, 3, 1_000);
        let taker = side(3_000, 3, 1_000);
        assert_eq!(choose(giver, taker, &mine), Some("hot-1"));
    }

    #[test]
    fn a_shard_hotter_than_a_fair_share_keeps_its_member_to_itself() {
        // The hot shard stays (moving it would leave the taker above the giver); the cold one
        // goes, then nothing.
        let mine = shards(&[("hot", 10_000), ("cold", 1_000)]);
        assert_eq!(
            choose(side(11_000, 2, 1_000), side(4_000, 4, 1_000), &mine),
            Some("cold")
        );
        let mine = shards(&[("hot", 10_000)]);
        assert_eq!(
            choose(side(10_000, 1, 1_000), side(5_000, 5, 1_000), &mine),
            None
        );
    }

    #[test]
    fn idle_members_share_by_count_and_counts_one_apart_do_not_move() {
        let six = shards(&[("a", 0), ("b", 0), ("c", 0), ("d", 0), ("e", 0), ("f", 0)]);
        assert!(
            choose(side(0, 6, 1_000), side(0, 4, 1_000), &six).is_some(),
            "6 and 4"
        );
        assert_eq!(
            choose(side(0, 5, 1_000), side(0, 4, 1_000), &six[..5]),
            None,
            "5 and 4"
        );
        assert_eq!(
            choose(side(0, 4, 1_000), side(0, 4, 1_000), &six[..4]),
            None,
            "equal"
        );
        assert!(
            choose(side(0, 4, 1_000), side(0, 0, 1_000), &six[..4]).is_some(),
            "a newcomer"
        );
    }

    #[test]
    fn a_member_with_twice_the_capacity_takes_twice_the_load() {
        let mine = shards(&[("a", 3_000), ("b", 3_000), ("c", 3_000)]);
        // Giver 9,000 at capacity 1; taker 9,000 at capacity 2: it weighs half as much.
        assert!(choose(side(9_000, 3, 1_000), side(9_000, 3, 2_000), &mine).is_some());
        // The other way round, nothing moves.
        assert_eq!(
            choose(side(9_000, 3, 2_000), side(9_000, 3, 1_000), &mine),
            None
        );
    }

    #[test]
    fn small_gains_do_not_move_a_shard() {
        // 10,300 against 9,700: moving a shard of 300 evens them, but gains under 5 %.
        let mine = shards(&[("a", 300), ("b", 10_000)]);
        assert_eq!(
            choose(side(10_300, 2, 1_000), side(9_700, 2, 1_000), &mine),
            None
        );
    }

    #[test]
    fn a_member_without_published_loads_is_not_weighed() {
        assert_eq!(
            Side::of(&Load::new(0, 0, 5_000)),
            None,
            "no count of shards"
        );
    }

    /// A member's side from the shards it holds.
    fn side_of(held: &[Movable], capacity: u64) -> Side {
        let mut load = Load::sum(held.iter().map(|m| &m.load)).with_capacity(capacity);
        load.shards = Some(held.len() as u64);
        Side::of(&load).unwrap()
    }

    /// The largest weight over capacity among the members.
    fn largest(held: &[Vec<Movable>], capacity: &[u64]) -> f64 {
        held.iter()
            .zip(capacity)
            .map(|(h, c)| side_of(h, *c).ratio(side_of(h, *c).weight))
            .fold(0.0, f64::max)
    }

    /// Every ordered pair compared, a move or else a swap made where one is worth it, until
    /// nothing moves; asserts that the largest weight never rises and that the moves stop.
    /// Returns the moves and the swaps made.
    fn settle(held: &mut [Vec<Movable>], capacity: &[u64], what: &str) -> (usize, usize) {
        let (mut moves, mut swaps) = (0, 0);
        let mut before = largest(held, capacity);
        'again: loop {
            for g in 0..held.len() {
                for t in 0..held.len() {
                    if g == t {
                        continue;
                    }
                    let (giver, taker) = (
                        side_of(&held[g], capacity[g]),
                        side_of(&held[t], capacity[t]),
                    );
                    let (give, take): (String, Vec<String>) =
                        if let Some(shard) = choose(giver, taker, &held[g]) {
                            moves += 1;
                            (shard.to_owned(), Vec::new())
                        } else if let Some(swap) = swap(giver, taker, &held[g], &held[t]) {
                            swaps += 1;
                            assert!(!swap.take.is_empty() && swap.take.len() <= SWAP_MOST);
                            (
                                swap.give.to_owned(),
                                swap.take.iter().map(|s| (*s).to_owned()).collect(),
                            )
                        } else {
                            continue;
                        };
                    let at = held[g].iter().position(|m| m.shard == give).unwrap();
                    let given = held[g].remove(at);
                    for shard in &take {
                        let at = held[t].iter().position(|m| m.shard == *shard).unwrap();
                        let back = held[t].remove(at);
                        assert!(
                            weight(&back.load) < weight(&given.load),
                            "{what}: took back a heavier shard"
                        );
                        held[g].push(back);
                    }
                    held[t].push(given);
                    let now = largest(held, capacity);
                    assert!(now < before + 1e-9, "{what}: the largest rose");
                    before = now;
                    assert!(moves + swaps < 1_000, "{what}: moves do not stop");
                    continue 'again;
                }
            }
            return (moves, swaps);
        }
    }

    /// The largest weight over capacity of the longest-processing-time-first placement: the
    /// heaviest shard first, each onto the member it leaves lightest.
    fn offline(shards: &[Movable], capacity: &[u64]) -> f64 {
        let mut sorted: Vec<&Movable> = shards.iter().collect();
        sorted.sort_by(|a, b| weight(&b.load).total_cmp(&weight(&a.load)));
        let mut held: Vec<Vec<Movable>> = vec![Vec::new(); capacity.len()];
        for m in sorted {
            let best = (0..capacity.len())
                .min_by(|a, b| {
                    let after = |i: usize| {
                        (side_of(&held[i], capacity[i]).weight + weight(&m.load))
                            / capacity[i] as f64
                    };
                    after(*a).total_cmp(&after(*b))
                })
                .unwrap();
            held[best].push(m.clone());
        }
        largest(&held, capacity)
    }

    /// A giver of 3 hot shards (10,000 ms a minute each) and a taker of 1 hot and 10 cold
    /// (1,000 each).
    fn three_hot_against_one_hot_and_ten_cold() -> (Vec<Movable>, Vec<Movable>) {
        let mine = shards(&[("hot-1", 10_000), ("hot-2", 10_000), ("hot-3", 10_000)]);
        let mut theirs = shards(&[("hot-4", 10_000)]);
        theirs.extend((0..10).map(|i| Movable {
            shard: format!("cold-{i}"),
            load: Load::new(0, 0, 1_000),
        }));
        (mine, theirs)
    }

    #[test]
    fn a_member_stuck_with_three_hot_shards_swaps_one_for_cold_ones() {
        // 3 hot shards against 1 hot and 10 cold: giving a hot one alone would leave the
        // taker heavier than the giver was, and a cold one helps too little.
        let (mine, theirs) = three_hot_against_one_hot_and_ten_cold();
        let (giver, taker) = (side_of(&mine, 1_000), side_of(&theirs, 1_000));
        assert_eq!(choose(giver, taker, &mine), None);
        assert!(may_exchange(giver, taker));
        let swap = swap(giver, taker, &mine, &theirs).expect("a swap");
        assert_eq!(swap.give, "hot-1");
        assert!(swap.take.iter().all(|s| s.starts_with("cold-")), "{swap:?}");
        // Both end near the pair's mean (25,420): 4 or 5 cold shards back.
        assert!((4..=5).contains(&swap.take.len()), "{swap:?}");
    }

    #[test]
    fn an_exchange_that_landed_in_part_gives_only_while_it_still_lowers_the_pair() {
        let (mine, theirs) = three_hot_against_one_hot_and_ten_cold();
        let (giver, taker) = (side_of(&mine, 1_000), side_of(&theirs, 1_000));
        let swap = swap(giver, taker, &mine, &theirs).expect("a swap");
        let hot = Load::new(0, 0, 10_000);
        let cold = |n: usize| vec![Load::new(0, 0, 1_000); n];
        assert!(exchange_lowers(giver, taker, &hot, &cold(swap.take.len())));
        // One cold shard back: the taker ends at 29,660, still below the giver's 30,180.
        assert!(exchange_lowers(giver, taker, &hot, &cold(1)));
        // None back: 30,720, above it; a shard as heavy back: nothing moves.
        assert!(!exchange_lowers(giver, taker, &hot, &[]));
        assert!(!exchange_lowers(giver, taker, &hot, &[hot]));
    }

    #[test]
    fn an_exchange_of_shards_alike_is_no_gain() {
        // No single shard may go (a cold one would leave the taker at 24,780, above the
        // giver's 25,470 less 5 %), but a cold shard measured at 1,010 for one at 990 would
        // pass the taker's bound: it takes 20 off the giver, nothing worth two moves (seen in
        // fleet_balance as cold shards traded back and forth).
        let mut mine = shards(&[("hot-1", 10_000), ("hot-2", 10_000)]);
        mine.extend((0..5).map(|i| Movable {
            shard: format!("cold-{i}"),
            load: Load::new(0, 0, 1_010),
        }));
        let mut theirs = shards(&[("hot-3", 10_000)]);
        theirs.extend((0..13).map(|i| Movable {
            shard: format!("chill-{i}"),
            load: Load::new(0, 0, 990),
        }));
        let (giver, taker) = (side_of(&mine, 1_000), side_of(&theirs, 1_000));
        assert_eq!(choose(giver, taker, &mine), None);
        assert_eq!(swap(giver, taker, &mine, &theirs), None);
    }

    #[test]
    fn a_taker_of_larger_capacity_may_still_exchange() {
        // Giver 10,000 at capacity 1 (10.0); taker 37,200 at capacity 4 (9.3): the taker may
        // take 800 more below the giver's 9.5, more than the 250 the giver must shed.
        let (giver, taker) = (side(10_000, 0, 1_000), side(37_200, 0, 4_000));
        assert!(may_exchange(giver, taker));
        assert!(!may_exchange(giver, side(37_200, 0, 3_925)));
    }

    #[test]
    fn members_near_each_other_swap_nothing() {
        let mine = shards(&[("hot-1", 10_000), ("cold-1", 1_000), ("cold-2", 1_000)]);
        let theirs = shards(&[("hot-2", 10_000), ("cold-3", 1_000), ("cold-4", 900)]);
        let (giver, taker) = (side_of(&mine, 1_000), side_of(&theirs, 1_000));
        assert!(!may_exchange(giver, taker) && !may_exchange(taker, giver));
        assert_eq!(swap(giver, taker, &mine, &theirs), None);
        assert_eq!(swap(taker, giver, &theirs, &mine), None);
    }

    /// The fleet's largest weight never rises and the moves stop: random fleets, every pair
    /// compared until nothing moves.
    #[test]
    fn pairwise_moves_never_raise_the_largest_weight_and_stop() {
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let members = rng.usize(2..6);
            let mut held: Vec<Vec<Movable>> = vec![Vec::new(); members];
            for i in 0..rng.usize(1..30) {
                let busy = if rng.u8(..10) == 0 {
                    rng.u64(5_000..40_000)
                } else {
                    rng.u64(0..2_000)
                };
                held[rng.usize(..members)].push(Movable {
                    shard: format!("s{i}"),
                    load: Load::new(0, 0, busy),
                });
            }
            let capacity: Vec<u64> = (0..members).map(|_| rng.u64(1..4) * 1_000).collect();
            settle(&mut held, &capacity, &format!("seed {seed}"));
        }
    }

    /// The spot where single moves stop (`fleet_balance`'s 100 x 10, skewed: 13 hot shards at
    /// 10x side by side, placed by count) is left by swaps, to within 1.15x of the offline
    /// placement; and on the same fleets without a hot shard nothing moves.
    #[test]
    fn swaps_bring_a_skewed_fleet_near_the_offline_placement() {
        for (hot, members, shards_n) in [(13, 10, 100usize), (4, 3, 16), (40, 50, 1_000)] {
            let all: Vec<Movable> = (0..shards_n)
                .map(|i| Movable {
                    shard: format!("s{i:04}"),
                    load: Load::new(0, 0, if i < hot { 10_000 } else { 1_000 }),
                })
                .collect();
            let capacity = vec![1_000; members];
            let mut held: Vec<Vec<Movable>> = all
                .chunks(shards_n.div_ceil(members))
                .map(<[Movable]>::to_vec)
                .collect();
            held.resize(members, Vec::new());
            let what = format!("{shards_n} x {members}");
            let (moves, swaps) = settle(&mut held, &capacity, &what);
            let (end, best) = (largest(&held, &capacity), offline(&all, &capacity));
            assert!(
                end <= best * 1.15,
                "{what}: {end:.0} against {best:.0} offline ({moves} moves, {swaps} swaps)"
            );
        }
        // Where `fleet_balance` saw single moves stop at 100 x 10 (1.35x the mean): one member
        // with 3 hot shards, one with 2 and 2 cold, eight with 1 and 10 or 11 cold.
        let mut at = 0;
        let mut next = |hot: bool| {
            at += 1;
            Movable {
                shard: format!("s{at:03}"),
                load: Load::new(0, 0, if hot { 10_000 } else { 1_000 }),
            }
        };
        let mut held: Vec<Vec<Movable>> = vec![(0..3).map(|_| next(true)).collect()];
        held.push(vec![next(true), next(true), next(false), next(false)]);
        for member in 0..8 {
            let mut shards = vec![next(true)];
            shards.extend((0..if member < 5 { 11 } else { 10 }).map(|_| next(false)));
            held.push(shards);
        }
        let all: Vec<Movable> = held.concat();
        assert_eq!(all.len(), 100);
        let capacity = [1_000; 10];
        let (_, swaps) = settle(&mut held, &capacity, "stuck");
        let (end, best) = (largest(&held, &capacity), offline(&all, &capacity));
        assert!(
            swaps > 0 && end <= best * 1.15,
            "stuck: {end:.0} against {best:.0} offline ({swaps} swaps)"
        );
        let uniform: Vec<Vec<Movable>> = (0..10)
            .map(|m| {
                (0..10)
                    .map(|i| Movable {
                        shard: format!("s{m}-{i}"),
                        load: Load::new(0, 0, 1_000),
                    })
                    .collect()
            })
            .collect();
        let mut held = uniform.clone();
        assert_eq!(settle(&mut held, &[1_000; 10], "uniform"), (0, 0));
    }
}
