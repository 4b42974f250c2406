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
//! A move must lower the larger of the two members' weights (over capacity) by more than
//! [`THRESHOLD`] of it, so the taker never ends heavier than the giver was: a shard hotter than
//! a fair share keeps its member to itself (given away, it would only make the taker the
//! heavier), and members within a shard of each other do not trade shards back and forth. Each
//! move lowers the larger weight of a pair and raises none past it, so the largest weight in
//! the fleet never rises, and the moves stop.

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
/// pair's larger weight (over capacity) smallest, among those that lower it by more than
/// [`THRESHOLD`] (the lighter shard of two that do as well).
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
            (g.max(t) < before * (1.0 - THRESHOLD)).then_some((g.max(t), w, m))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, m)| m.shard.as_str())
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
            let side_of = |held: &Vec<Movable>, capacity: u64| {
                let mut load = Load::sum(held.iter().map(|m| &m.load)).with_capacity(capacity);
                load.shards = Some(held.len() as u64);
                Side::of(&load).unwrap()
            };
            let largest = |held: &Vec<Vec<Movable>>| {
                held.iter()
                    .zip(&capacity)
                    .map(|(h, c)| {
                        let s = side_of(h, *c);
                        s.weight / s.capacity
                    })
                    .fold(0.0, f64::max)
            };
            let mut moves = 0;
            let mut before = largest(&held);
            'again: loop {
                for g in 0..members {
                    for t in 0..members {
                        if g == t {
                            continue;
                        }
                        let (giver, taker) = (
                            side_of(&held[g], capacity[g]),
                            side_of(&held[t], capacity[t]),
                        );
                        if let Some(shard) = choose(giver, taker, &held[g]).map(str::to_owned) {
                            let at = held[g].iter().position(|m| m.shard == shard).unwrap();
                            let moved = held[g].remove(at);
                            held[t].push(moved);
                            moves += 1;
                            let now = largest(&held);
                            assert!(now <= before + 1e-9, "seed {seed}: the largest rose");
                            before = now;
                            assert!(moves < 1_000, "seed {seed}: moves do not stop");
                            continue 'again;
                        }
                    }
                }
                break;
            }
        }
    }
}
