//! The load planner: whether this instance should give some of its shards to another member,
//! and which, when shards are balanced by load (`ReaderConfig::balance_by_load`).
//!
//! Pure: no store, no clock. The coordinator reads one other member's row every sample
//! interval (each in turn, one small read whatever the number of shards or members) and keeps
//! what each weighed; only a member near the heaviest it knows of gives ([`among_heaviest`];
//! or one far above the mean among many light members, within the mean:
//! [`beside_heavier`]), to the member a move relieves most ([`taker`]), the shards [`bundle`] returns (up to
//! [`BUNDLE_MOST`] in one move), through the graceful hand-over. The giver decides because it
//! alone knows its shards' loads as they are now.
//!
//! A member's weight is its handler time plus [`PER_SHARD`] for each shard it holds, over its
//! capacity: on a stream whose shards cost alike (or nothing at all, idle) the weights are the
//! counts, and the shares come out as by count within [`THRESHOLD`] (13 idle shards against
//! 11 stay); on a busy stream the counts follow the loads (a member may hold two hot shards
//! alone while another holds twenty cold ones).
//!
//! A move must leave the taker lighter (over capacity) than the giver was, by more than
//! [`THRESHOLD`] of the giver's weight and [`NOISE_MARGIN`] standard deviations of what
//! chance alone puts between the two figures ([`Side::noise`]): a shard hotter than a fair
//! share keeps its member to itself (given away, it would only make the taker the heavier),
//! and members near each other do not trade shards back and forth on the noise of their
//! averages. The bound is on the taker, not the gain: a member holding many shards sheds
//! them, however small each is against its weight, several to a move. Where no move may go
//! (a member with three hot shards among members each near the mean), an exchange may: one
//! shard for lighter ones of the taker's ([`swap`]), by the same rule, taking off the giver
//! more than chance puts between the shards traded ([`EXCHANGE_NOISE`]). Each move or exchange
//! leaves both members of its pair below the giver's weight, so the largest weight in the
//! fleet never rises, and the members' weights sorted from the heaviest fall in lexicographic
//! order at each move: the moves stop.

use kinesis_lease_core::Load;

mod beside;
mod onward;
mod unmeasured;

#[cfg(test)]
use beside::bundle_within_fill;
pub(crate) use beside::{beside_heavier, left_to_heavier, planned, HEAVIER_MOST};
pub(crate) use onward::onward;
pub(crate) use unmeasured::{unmeasured_to_read, with_unmeasured_shared};

/// What a held shard weighs besides its handler time, in handler milliseconds a minute: about
/// what reading it costs when it is idle (the `scale` benchmark: 1,000 idle shards take 0.73 %
/// of a core, 0.44 ms a minute each). Idle shards weigh alike, so an idle fleet shares by count;
/// shards that carry records weigh by their handler time. At 60 (0.1 % of a handler, until
/// 2026-12-06) a cold shard of `fleet_balance` (1 record a second at 2 ms) weighed 1.5 times
/// its handler time: a member of 2 hot and 6 cold shards (26 records a second) and one of 1 hot
/// and 10 cold (20) stood within the threshold by weight, and 100 x 10 stopped at 1.18x the
/// offline placement (1.05x at 1).
pub(crate) const PER_SHARD: f64 = 1.0;

/// How far below the giver's weight (over capacity) a move must leave the taker (besides the
/// pair's noise: [`NOISE_MARGIN`]). 8 %
/// rather than 5 %: a member's one-minute average carries a few per cent of noise when its
/// records arrive as independent producers send them, and at 5 % members near each other
/// traded shards on it (the load simulation's bursty seeds 0..300: 51 failed on churn at 5 %,
/// 21 at 8 %; steady seeds 0..600: 596 and 597 passed).
pub(crate) const THRESHOLD: f64 = 0.08;

/// How often an instance compares itself with another member (one read of its member row).
pub(crate) const SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a shard is held before it may be given away: 30 s after a take (its load is
/// measured by then, and the instance has read every member's row since its first take round,
/// in a fleet of up to 24: see [`FIRST_READS`]), three minutes after a hand-over, so a shard
/// moves at most once in three minutes. (Five minutes left shards given in the first moves
/// where an overshoot put them until the dwell ended: the load simulation's fleets balanced
/// late, and its no-churn bound counted those moves. With 40 s after a take its fleets
/// balanced after the start in 49 s at the median and 86 s at the 90th percentile, against
/// 38 s and 74 s with 30 s; 20 s made members give on loads a few renewals old, and the
/// slowest starts slower.)
pub(crate) fn dwell(handed: bool) -> std::time::Duration {
    std::time::Duration::from_secs(if handed { 180 } else { 30 })
}

/// One member's side: its weight's parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Side {
    /// Handler milliseconds a minute, plus [`PER_SHARD`] per shard held.
    pub(crate) weight: f64,
    /// Its capacity, in thousandths of the default.
    pub(crate) capacity: f64,
    /// How far its weight may stand from its mean by chance alone: one standard deviation of
    /// the handler time of a minute's records when they arrive independently (a Poisson count:
    /// the handler time over the square root of the records). Exact when its records cost
    /// alike; below the truth when they do not (a few slow records beside many quick ones), and
    /// 0 for a member that settled no record in the last minute.
    pub(crate) noise: f64,
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
            noise: shard_noise(load),
        })
    }

    /// `weight` over this side's capacity.
    pub(crate) fn ratio(&self, weight: f64) -> f64 {
        weight / self.capacity
    }
}

/// The most member rows an instance reads at one comparison while some member was never read
/// (at the start, or after members join): one at a time, a fleet of 50 would know itself only
/// after eight minutes.
pub(crate) const FIRST_READS: usize = 8;

/// How far below the heaviest member it knows of (over capacity) a member may still give: 12 %,
/// more than [`THRESHOLD`], so that members a hot shard apart near the top of the fleet give
/// side by side rather than in turn (at 8 %, `fleet_balance` 1,000 x 50's heaviest members,
/// holding about eleven hot shards each, stood one shard, 9 %, apart, kept one another from
/// giving, and gave one shard every 50 s in turn: 1.45x the mean after 8 minutes; at 12 %,
/// 1.27x; the load simulation's seeds 0..300 pass either way, bursty 283 and 282).
pub(crate) const PEER_GAP: f64 = 0.12;

/// Whether a member weighing `mine` may give at all: only when no peer, as it last read it,
/// weighs more than [`PEER_GAP`] above it. The objective is the fleet's largest
/// weight; a move between two members below it lowers nothing that counts and is only churn
/// (the load simulation saw members near the mean trade cold shards for as long as it ran).
/// The heaviest members give ([`taker`] says to whom).
///
/// A member with one shard hotter than a fair share holds the fleet's largest weight for
/// good: below it nothing moves (but for members far above the mean among many light ones:
/// [`beside_heavier`]), though members may stand far apart there (none of them
/// weighs on the objective, and moving between them was churn in the load simulation: 19 of
/// 100 seeds failed its bound when such a member did not count).
pub(crate) fn among_heaviest(mine: Side, peers: impl IntoIterator<Item = Side>) -> bool {
    !peers.into_iter().any(|peer| blocks(mine, peer))
}

/// Whether `peer` weighs more than [`PEER_GAP`] above `mine` (over capacity), so that a member
/// weighing `mine` does not give ([`among_heaviest`]).
pub(crate) fn blocks(mine: Side, peer: Side) -> bool {
    peer.ratio(peer.weight) * (1.0 - PEER_GAP) > mine.ratio(mine.weight)
}

/// The peer to weigh this member against as a taker: of `peers` (each with what the last
/// listing showed it to hold), one that a move ([`bundle`]) to it, or else an exchange
/// ([`swap`]) with it, leaves with the smallest larger weight of the pair, or within
/// [`THRESHOLD`] of it (of the exchanges, those whose pair may also settle within [`THRESHOLD`]
/// of the lowest: [`settling_lowest`]): the `pick`-th of those (modulo their number; the caller draws it at
/// random), so that members giving at once do not all choose the same one (where the giver
/// stays the heavier of any pair, every taker does as well: at 1,000 x 50 the last five
/// members to start took 50 to 60 shards each when the lightest always took). Neither the lightest peer nor any peer will always do: a shard hotter than
/// a fair share may fit only a member of larger capacity, and an exchange needs a peer holding
/// shards lighter than the one given. When none does, the `pick`-th of the peers that an
/// exchange may still suit (`may_exchange`; its shards as listed may be out of date, and the
/// giver reads them before it decides), or `None`: always the lightest of them, a giver whose
/// one hot shard fitted only a member of twice the capacity, listed without loads, read the
/// lightest member's rows at every comparison and found nothing there for 15 minutes (load
/// simulation seed 319). `beside`: for a giver beside heavier members ([`beside_heavier`]),
/// the peers a move within the mean ([`bundle_within_fill`](beside::bundle_within_fill)) may go to, and no exchange.
pub(crate) fn taker<'a, K>(
    mine: Side,
    peers: impl IntoIterator<Item = (&'a K, Side, &'a [Movable])>,
    movable: &[Movable],
    fill: f64,
    beside: bool,
    pick: usize,
) -> Option<&'a K>
where
    K: ?Sized + 'a,
{
    let takers = takers(mine, peers, movable, fill, beside);
    (!takers.is_empty()).then(|| takers[pick % takers.len()])
}

/// The peers [`taker`] draws from: those a move or an exchange leaves nearest the best (of
/// the exchanges, those whose pair may also settle nearest the lowest: [`settles_at`]), else
/// those an exchange may still suit. The coordinator asks again once it has read the one it
/// drew: a reading from before that member took a hot shard showed it light, and on the
/// reading taken now it may no longer be among them (the load simulation's slowest starts: a
/// giver handed a shard to a member that had just taken a hot one, and the shard stayed there
/// for the three minutes a shard handed over stays, with the fleet 1.2x the offline placement).
/// `beside`: as in [`taker`].
pub(crate) fn takers<'a, K>(
    mine: Side,
    peers: impl IntoIterator<Item = (&'a K, Side, &'a [Movable])>,
    movable: &[Movable],
    fill: f64,
    beside: bool,
) -> Vec<&'a K>
where
    K: ?Sized + 'a,
{
    let peers: Vec<(&K, Side, &[Movable])> = peers.into_iter().collect();
    let planned = plans(mine, &peers, movable, fill, beside);
    let best = planned
        .iter()
        .map(|plan| plan.after)
        .fold(f64::MAX, f64::min);
    let near = |within_fill: bool| -> Vec<&K> {
        let near = planned.iter().filter(|plan| {
            plan.after <= best * (1.0 + THRESHOLD) && (!within_fill || plan.theirs_after <= fill)
        });
        settling_lowest(near).map(|plan| plan.key).collect()
    };
    // Those the move leaves at most at the fleet's mean first: where the giver stays the
    // heavier of every pair, a member already above the mean was drawn as often as one far
    // below it, and a giver that drew it found no move when it read it again (`fleet_balance`
    // 1,000 x 50: the heaviest members gave a shard every 30 to 75 s).
    let near = match near(true) {
        under if !under.is_empty() => under,
        _ => near(false),
    };
    if !near.is_empty() || beside {
        return near;
    }
    peers
        .iter()
        .filter(|(_, peer, _)| may_exchange(mine, *peer))
        .map(|(key, _, _)| *key)
        .collect()
}

/// Whether the giver should wait for `soon` (its shards that may be given within a take's
/// [`dwell`], by then measured) rather than move from `movable` now: when the best pair a move
/// or an exchange leaves with them in hand (the first of [`takers`]' measures: the pair's
/// larger weight over capacity just after) is lighter by more than [`THRESHOLD`] than the best one without. A member that
/// took a hot shard a few seconds after its others gave those first, to the one member of
/// larger capacity the hot shard alone would have suited, and the hot shard followed them
/// there: the two stayed together for the three minutes a handed shard stays, at 1.17 to 1.23x
/// the offline placement (load simulation seeds 306, 319 and 386). `beside`: as in [`taker`].
pub(crate) fn waits_for<'a, K>(
    mine: Side,
    peers: impl IntoIterator<Item = (&'a K, Side, &'a [Movable])>,
    movable: &[Movable],
    soon: &[Movable],
    fill: f64,
    beside: bool,
) -> bool
where
    K: ?Sized + 'a,
{
    if soon.is_empty() {
        return false;
    }
    let peers: Vec<(&K, Side, &[Movable])> = peers.into_iter().collect();
    let best = |shards: &[Movable]| {
        plans(mine, &peers, shards, fill, beside)
            .into_iter()
            .map(|plan| plan.after)
            .reduce(f64::min)
    };
    let all: Vec<Movable> = movable.iter().chain(soon).cloned().collect();
    match (best(movable), best(&all)) {
        (Some(now), Some(later)) => later < now * (1.0 - THRESHOLD),
        _ => false,
    }
}

/// Of `near` (plans near the best for the pair just after), the moves, and the exchanges whose
/// pair may settle within [`THRESHOLD`] of the lowest: alike for the pair just after, exchanges
/// differ in what the giver takes back and keeps for the three minutes a handed shard stays
/// (load simulation seed 721: a member of twice the capacity took back a shard of 3 a second
/// and one of 1 from a warm member, where one cold shard of a cold member would do, and stood
/// at 1.2x the offline placement for three minutes). Within [`THRESHOLD`] and not nearer:
/// the taker's side of the measure counts its light shards as going on, and a shard handed to
/// it a moment ago stays three minutes; held to the lowest within a quarter of that, a giver
/// drew a taker whose light shard had just come (bursty load seed 102: 1.3x the offline
/// placement for three minutes).
fn settling_lowest<'p, 'a: 'p, K: ?Sized + 'a>(
    near: impl Iterator<Item = &'p Plan<'a, K>>,
) -> impl Iterator<Item = &'p Plan<'a, K>> {
    let near: Vec<&Plan<K>> = near.collect();
    let lowest = near
        .iter()
        .filter_map(|plan| plan.settles)
        .fold(f64::MAX, f64::min);
    near.into_iter()
        .filter(move |plan| plan.settles.is_none_or(|s| s <= lowest * (1.0 + THRESHOLD)))
}

/// One peer's plan in [`plans`].
struct Plan<'a, K: ?Sized> {
    /// The pair's larger weight (over capacity) after it.
    after: f64,
    /// The peer's weight (over capacity) after it.
    theirs_after: f64,
    /// For an exchange, where the pair may settle ([`settles_at`]): what the giver takes back
    /// stays with it, the taker's light shards may go on.
    settles: Option<f64>,
    /// The peer.
    key: &'a K,
}

/// For each peer a move ([`bundle`]) or else an exchange ([`swap`]) of `movable` may go to (for
/// a giver `beside` heavier members, a move within the mean alone: [`planned`]).
fn plans<'a, K>(
    mine: Side,
    peers: &[(&'a K, Side, &[Movable])],
    movable: &[Movable],
    fill: f64,
    beside: bool,
) -> Vec<Plan<'a, K>>
where
    K: ?Sized + 'a,
{
    let weight_of = |shards: &[Movable], id: &str| {
        shards
            .iter()
            .find(|m| m.shard == id)
            .map_or(0.0, |m| weight(&m.load))
    };
    peers
        .iter()
        .filter_map(|(key, peer, theirs)| {
            let given = planned(beside, mine, *peer, movable, fill);
            let (net, settles) = match given.is_empty() {
                false => (given.iter().map(|s| weight_of(movable, s)).sum(), None),
                true if beside => return None,
                true => {
                    let (settles, swap) = scored_swap(mine, *peer, movable, theirs, fill)?;
                    let back: f64 = swap.take.iter().map(|s| weight_of(theirs, s)).sum();
                    (weight_of(movable, swap.give) - back, Some(settles))
                }
            };
            let theirs_after = peer.ratio(peer.weight + net);
            Some(Plan {
                after: mine.ratio(mine.weight - net).max(theirs_after),
                theirs_after,
                settles,
                key: *key,
            })
        })
        .collect()
}

/// Whether a member row shows a hand-over on its way in: poked more often than its instance
/// had acted on when it wrote its load (`Load::pokes_seen`). Its load does not show that shard
/// yet, so a giver that weighed it as it stands could make it the heaviest: two members giving
/// to the lightest one in the same seconds each saw it light (the load simulation's members of
/// twice the capacity took three shards at once and held the fleet's largest weight for the
/// three minutes those shards stayed). A row without the count (an earlier release) shows none.
pub(crate) fn receiving(pokes: u64, load: &Load) -> bool {
    load.pokes_seen.is_some_and(|seen| pokes > seen)
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

/// How far above the fleet's mean (over capacity, [`mean`]) a member must weigh to count as far
/// above it ([`far_above_mean`]).
pub(crate) const FAR_ABOVE_MEAN: f64 = 1.25;

/// Whether a member weighing `mine` stands more than [`FAR_ABOVE_MEAN`] times the fleet's mean
/// as it knows the fleet: a fleet still far from balanced, where it reads the members that keep
/// it from giving more often (see the coordinator). In a balanced fleet only a member holding
/// a shard hotter than a fair share does, and it reads more only while a member more than
/// [`PEER_GAP`] heavier keeps it from giving (another such shard, hotter).
pub(crate) fn far_above_mean(mine: Side, peers: impl IntoIterator<Item = Side>) -> bool {
    mine.ratio(mine.weight) > FAR_ABOVE_MEAN * mean(mine, peers)
}

/// The fleet's mean weight over capacity: `mine` and what this instance last read of each
/// peer.
pub(crate) fn mean(mine: Side, peers: impl IntoIterator<Item = Side>) -> f64 {
    let (weight, capacity) = peers
        .into_iter()
        .fold((mine.weight, mine.capacity), |(w, c), peer| {
            (w + peer.weight, c + peer.capacity)
        });
    weight / capacity
}

/// The most shards one move gives a taker at once ([`bundle`]).
pub(crate) const BUNDLE_MOST: usize = 4;

/// The shards the giver should give the taker in one move, if a move is worth it: first the
/// shard that leaves the pair's larger weight (over capacity) smallest, among those that leave
/// the taker below the giver's weight less [`THRESHOLD`] and the pair's noise ([`top`]; the
/// lighter shard of two that do as well), then, the same way, the next for the pair as that
/// leaves it, while each lowers the pair's larger weight and all of them together leave the
/// taker below that bound (at most [`BUNDLE_MOST`]); the shards after the first only while
/// they leave the taker at most at `fill`, the fleet's mean weight over capacity ([`mean`]):
/// evened pair by pair, a member far above the mean handed one far below it four hot shards
/// at once, which left the taker twice the mean for the three minutes they stayed
/// (`fleet_balance` 100 x 10: 1.38x the mean at the end, against 1.15x one shard a move). A member made the heaviest by a shard turning hot sheds its cold shards
/// in one hand-over rather than one a comparison: in the load simulation a member shedding
/// six took 84 s at one shard a move, and fleets balanced after the turn in 79 s at the median
/// (402 of 600 within 90 s). Empty when no move is worth it.
pub(crate) fn bundle<'a>(
    giver: Side,
    taker: Side,
    movable: &'a [Movable],
    fill: f64,
) -> Vec<&'a str> {
    let limit = top(giver, taker);
    let mut given: Vec<&'a str> = Vec::new();
    let mut moved = 0.0;
    while given.len() < BUNDLE_MOST {
        let (g, t) = (
            giver.ratio(giver.weight - moved),
            taker.ratio(taker.weight + moved),
        );
        let before = g.max(t);
        let next = movable
            .iter()
            .filter(|m| !given.contains(&m.shard.as_str()))
            .filter_map(|m| {
                let w = weight(&m.load);
                let (g, t) = (
                    giver.ratio(giver.weight - moved - w),
                    taker.ratio(taker.weight + moved + w),
                );
                let fits = given.is_empty() || t <= fill;
                (t < limit && g.max(t) < before && fits).then_some((g.max(t), w, m))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let Some((_, w, m)) = next else {
            break;
        };
        moved += w;
        given.push(m.shard.as_str());
    }
    given
}

/// An exchange's second half: with `back` the loads of the taker's shards whose marks landed
/// naming this giver (fewer, perhaps, than [`swap`] chose) and `away` those whose marks landed
/// naming a third member ([`onward`](fn@onward)), the giver's shard to give, if any: of those that
/// [`exchange_lowers`], the one leaving the pair's larger weight smallest (the lighter of
/// two that do as well). The shard [`swap`] planned is one of them when every mark landed.
///
/// Only a shard heavier than everything `asked` (the weight of all the marks made naming this
/// giver, landed or not): a mark counted as not landed (its answer lost or cut off) may have
/// landed, and a shard lighter than what comes back would then leave the giver heavier than it
/// was. (A mark naming a third member that landed unseen only leaves the taker lighter.)
pub(crate) fn give_for<'a>(
    giver: Side,
    taker: Side,
    movable: &'a [Movable],
    back: &[Load],
    away: &[Load],
    asked: f64,
) -> Option<&'a str> {
    if back.is_empty() && away.is_empty() {
        return None;
    }
    let returned: f64 = back.iter().map(weight).sum();
    let relieved: f64 = away.iter().map(weight).sum();
    movable
        .iter()
        .filter(|m| weight(&m.load) > asked)
        .filter(|m| exchange_lowers(giver, taker, &m.load, back, away))
        .map(|m| {
            let net = weight(&m.load) - returned;
            let after = giver
                .ratio(giver.weight - net)
                .max(taker.ratio(taker.weight + net - relieved));
            (after, weight(&m.load), m)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, m)| m.shard.as_str())
}

/// Whether an exchange of `given` for `back` (the taker's shards whose marks landed naming the
/// giver), with `away` (those whose marks landed naming a third member) leaving the taker too,
/// leaves the giver lighter and the taker lighter than the giver was: then the pair's larger
/// weight falls and the fleet's largest does not rise (a third member takes only what leaves it
/// below the giver as it ends: [`onward`](fn@onward)).
pub(crate) fn exchange_lowers(
    giver: Side,
    taker: Side,
    given: &Load,
    back: &[Load],
    away: &[Load],
) -> bool {
    let net = weight(given) - back.iter().map(weight).sum::<f64>();
    let relieved: f64 = away.iter().map(weight).sum();
    net > 0.0 && taker.ratio(taker.weight + net - relieved) < giver.ratio(giver.weight)
}

fn holds(giver: Side, taker: Side, given: f64, back: f64) -> bool {
    let net = given - back;
    net > 0.0 && taker.ratio(taker.weight + net) < top(giver, taker)
}

/// How many standard deviations of the pair's noise ([`Side::noise`]) a move must clear
/// besides [`THRESHOLD`].
pub(crate) const NOISE_MARGIN: f64 = 1.0;

/// The most a taker may end at (over capacity): below the giver's weight less [`THRESHOLD`],
/// and less [`NOISE_MARGIN`] times the noise of the pair's difference, that margin at most
/// another [`THRESHOLD`] of the giver's weight. Uncapped, a few slow records a minute (whose
/// noise is most of their weight) froze a lasting imbalance: four shards alike of 6 records a
/// minute at 5 s each stayed 3 to 1 between two members (`a_move_clears_the_noise_of_the_pair`).
fn top(giver: Side, taker: Side) -> f64 {
    let noise = (giver.noise / giver.capacity).hypot(taker.noise / taker.capacity);
    let ratio = giver.ratio(giver.weight);
    ratio * (1.0 - THRESHOLD) - (NOISE_MARGIN * noise).min(ratio * THRESHOLD)
}

/// The most shards a swap takes back for the one it gives. 8 rather than 4: a member left
/// with five hot shards alone (50 records a second against a mean of 42.5) could not swap one
/// for the five cold ones that would even it with a member of one hot and 29 cold, and
/// `fleet_balance` 1,000 x 50 stopped at 1.18x the mean (1.16x the offline placement).
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

/// How many standard deviations of chance ([`shard_noise`] of the shards given and taken back)
/// the weight an exchange takes off its giver must clear, at most [`THRESHOLD`] of the giver's
/// weight (as [`NOISE_MARGIN`] in a move's bound). Under loads that arrive as
/// independent producers send them (the load simulation's bursty seeds: each second's puts a
/// Poisson count), two hot shards of one rate measure up to 5 % apart over a minute now and
/// then, past [`EXCHANGE_GAIN`] of their member's weight, and members traded them in steady
/// state (seed 16: a shard of 20 a second for another of 20, then one of 4 for one of 3).
/// [`give_for`], the exchange's second half, does not ask it again: the marks have landed
/// then, and giving nothing would leave the giver heavier.
pub(crate) const EXCHANGE_NOISE: f64 = 3.0;

/// One standard deviation of chance in an average handler time over the meter's window (a
/// shard's, or a member's sum), when its records arrive independently (a Poisson count: the
/// handler time over the square root of the records; 0 with no record; [`Side::noise`]).
pub(crate) fn shard_noise(load: &Load) -> f64 {
    match load.records_per_min {
        0 => 0.0,
        records => load.busy_ms_per_min as f64 / (records as f64).sqrt(),
    }
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
    (top(giver, taker) - taker.ratio(taker.weight)) * taker.capacity > giver.weight * EXCHANGE_GAIN
}

/// When no move is worth it ([`bundle`] found none), an exchange that is: one of
/// the giver's shards for lighter ones of the taker's, leaving the giver lighter by more than
/// [`EXCHANGE_GAIN`] and by more than chance between the shards traded ([`EXCHANGE_NOISE`]),
/// the taker below the giver's weight less [`THRESHOLD`], and the
/// two as near each other as the shards
/// allow. This is what moves a fleet out of the
/// spot where single moves stop: a member with three hot shards among members each near the
/// mean cannot give one (the taker would end heavier than it was), and cold shards do not move
/// between members near the mean; swapped for a few cold shards, a hot one can.
///
/// The same rule as [`bundle`] holds for the net weight moved: the pair's larger weight (over
/// capacity) falls, and nothing else changes, so the fleet's largest weight
/// never rises and the exchanges stop. `theirs` is what the giver last saw of the taker's
/// shards (loads from the rows' writes).
///
/// Of the exchanges that hold, the one whose pair may settle lowest once each side gives its
/// light shards on to members below `fill`, the fleet's mean ([`settles_at`]), then the one
/// leaving the pair's larger weight smallest: what the giver takes back stays with it for
/// the three minutes a handed shard stays, the taker's own light shards may go on at once
/// (load simulation seed 319: a hot shard given for a warm one and two cold ones, best for the
/// pair alone, held the giver at 1.2x the offline placement for three minutes; for the warm
/// one alone, the taker gave its cold shards on and both stood at the offline placement).
/// `fill` at `f64::MAX` weighs the pair alone.
pub(crate) fn swap<'a>(
    giver: Side,
    taker: Side,
    mine: &'a [Movable],
    theirs: &'a [Movable],
    fill: f64,
) -> Option<Swap<'a>> {
    scored_swap(giver, taker, mine, theirs, fill).map(|(_, swap)| swap)
}

/// [`swap`] with where its pair may settle ([`settles_at`]: the larger of the two, over
/// capacity), the measure it chose the exchange by.
fn scored_swap<'a>(
    giver: Side,
    taker: Side,
    mine: &'a [Movable],
    theirs: &'a [Movable],
    fill: f64,
) -> Option<(f64, Swap<'a>)> {
    if giver.ratio(giver.weight) <= taker.ratio(taker.weight) {
        return None;
    }
    let mut back: Vec<(f64, &Movable)> = theirs.iter().map(|m| (weight(&m.load), m)).collect();
    // The heaviest first, so that a swap takes few shards.
    back.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.shard.cmp(&b.1.shard)));
    let mut best: Option<((f64, f64), Swap<'a>)> = None;
    if !may_exchange(giver, taker) {
        return None;
    }
    // What each side may shed later to the rest of the fleet: its shards each lighter than a
    // fair share of a member of the default capacity, not part of the exchange.
    let light = |w: f64| w <= fill * Load::DEFAULT_CAPACITY_MILLI as f64;
    let light_mine: f64 = mine
        .iter()
        .map(|m| weight(&m.load))
        .filter(|w| light(*w))
        .sum();
    for given in mine {
        let w = weight(&given.load);
        if holds(giver, taker, w, 0.0) {
            // A move alone (`bundle`).
            continue;
        }
        // Where the two would weigh alike (over capacity): take back about that much, so
        // that the taker does not end a member the next exchange has to relieve.
        let even = (giver.capacity * (taker.weight + w) - taker.capacity * (giver.weight - w))
            / (giver.capacity + taker.capacity);
        // Each prefix of the heaviest-first picks is a candidate: stopping short of `even`
        // may leave the pair's larger weight smaller than reaching it (a hot shard for one
        // warm shard rather than for the warm one and another).
        // A shard that would take back so much that the giver no longer comes down by
        // [`EXCHANGE_GAIN`] is passed over for lighter ones after it.
        let most = w - giver.weight * EXCHANGE_GAIN;
        let mut consider = |take: &[&'a str], sum: f64| {
            // Two moves or more for one: the giver must come down by [`EXCHANGE_GAIN`] too,
            // or shards of about one weight trade places for nothing; and by more than chance
            // puts between the shards' averages ([`EXCHANGE_NOISE`]).
            let gain = giver.ratio(giver.weight) - giver.ratio(giver.weight - w + sum);
            let holds = holds(giver, taker, w, sum);
            let back_noise: f64 = theirs
                .iter()
                .filter(|m| take.contains(&m.shard.as_str()))
                .map(|m| shard_noise(&m.load).powi(2))
                .sum();
            let noise = (back_noise + shard_noise(&given.load).powi(2)).sqrt();
            // At most another [`THRESHOLD`] of the giver's weight, as in `top`: uncapped, a
            // shard of few slow records (9 a minute or fewer) could never be exchanged
            // (`an_exchange_of_slow_records_is_not_refused_on_their_noise`).
            let significant = w - sum > (EXCHANGE_NOISE * noise).min(giver.weight * THRESHOLD);
            if holds && significant && gain > giver.ratio(giver.weight) * EXCHANGE_GAIN {
                let (giver_after, taker_after) = (
                    giver.ratio(giver.weight - w + sum),
                    taker.ratio(taker.weight + w - sum),
                );
                // Where each side may come down to (`settles_at`): the shards taken back stay
                // with the giver for three minutes, the taker's light ones may go on.
                let shed_mine = light_mine - if light(w) { w } else { 0.0 };
                let shed_theirs: f64 = theirs
                    .iter()
                    .filter(|m| !take.contains(&m.shard.as_str()))
                    .map(|m| weight(&m.load))
                    .filter(|w| light(*w))
                    .sum();
                let settled = settles_at(giver, giver_after, shed_mine, fill).max(settles_at(
                    taker,
                    taker_after,
                    shed_theirs,
                    fill,
                ));
                let after = (settled, giver_after.max(taker_after));
                let better = best.as_ref().is_none_or(|(a, s)| {
                    let near = |x: f64, y: f64| (x - y).abs() <= 1e-9;
                    after.0 < a.0 - 1e-9
                        || (near(after.0, a.0) && after.1 < a.1 - 1e-9)
                        || (near(after.0, a.0)
                            && after.1 <= a.1 + 1e-9
                            && take.len() < s.take.len())
                });
                if better {
                    best = Some((
                        after,
                        Swap {
                            give: given.shard.as_str(),
                            take: take.to_vec(),
                        },
                    ));
                }
            }
            holds
        };
        let (mut sum, mut take) = (0.0, Vec::new());
        for (b, m) in &back {
            if sum + b >= most {
                continue;
            }
            sum += b;
            take.push(m.shard.as_str());
            let holds = consider(&take, sum);
            if (sum >= even && holds) || take.len() == SWAP_MOST {
                break;
            }
        }
        // And the heaviest-first picks that stay at or below `even`, passing over a shard that
        // would go past it for lighter ones after it: a hot shard alone (20 a second) for a
        // member of twice the capacity holding shards of 10 and 6 a second and cold ones took
        // back the 10 and the 6, past `even`, and its giver stood at 1.19x the offline placement
        // for the three minutes they stayed (load simulation seed 269); the 10 and two cold
        // shards leave the pair near even.
        let (mut sum, mut take) = (0.0, Vec::new());
        for (b, m) in &back {
            if sum + b >= most || sum + b > even {
                continue;
            }
            sum += b;
            take.push(m.shard.as_str());
            consider(&take, sum);
            if take.len() == SWAP_MOST {
                break;
            }
        }
    }
    best.map(|((settled, _), swap)| (settled, swap))
}

/// The weight over capacity a member left at `after` (over capacity) by an exchange may come
/// down to by giving `shed` (the weight of its shards that may go on) to members below `fill`,
/// the fleet's mean: no further than the mean, and no further than what it cannot give.
fn settles_at(side: Side, after: f64, shed: f64, fill: f64) -> f64 {
    let floor = after - side.ratio(shed);
    floor.max(after.min(fill))
}

#[cfg(test)]
mod tests;
