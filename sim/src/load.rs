//! The load simulation: balancing by load (`balance_by_load()`) under a seeded load model, with
//! its two invariants checked every simulated second.
//!
//! Each seed builds a [`LoadPlan`]: 3 to 6 brokers (one of them, in a third of the seeds, with
//! twice the capacity) on 8 to 30 shards of one `MemoryStream`, serial handlers that wait a
//! fixed time per record, and per-shard put rates with skew: a Zipf spread over the shards in a
//! random order, one shard at 20 times the median, and another shard turning as hot at
//! [`TURN`] (a shard turning hot mid-run). No fault: these are the steady loads the placement
//! is judged on; the fault simulation (`run`) checks safety and liveness.
//!
//! # Invariants
//!
//! A member's weight is what the planner weighs (`load_plan`): its handler milliseconds a
//! minute (here each shard's put rate times the handler's time per record, the truth rather
//! than the measurement) plus 60 per shard held, over its capacity. The reference is an
//! offline placement of the same shards by longest processing time first (each shard, the
//! heaviest first, onto the member it leaves lightest over capacity).
//!
//! 1. **Balanced:** every second from [`CONVERGE`] (the 90 s) after the load starts
//!    or changes, the heaviest member weighs at most [`TARGET`] (the 1.15x) times the
//!    reference's heaviest. A breach counts when the seconds over it make [`SPIKE`] of the last
//!    twice that many (seconds before [`CONVERGE`] are not judged): the hand-overs of an
//!    exchange land over a few renewals, and a
//!    taker holds the shard given before the giver holds those it takes back (a load seed saw
//!    1.82x for 3 s that way, an instant no handler's backlog notices); at no second from
//!    [`CONVERGE`] above [`CAP`]. (Until 2026-12-06 the bound was 1.3x until [`SETTLE`]: 7 of
//!    the steady seeds 0..300 settled within 1.15x only after 104 to 245 s.) Bursty seeds
//!    (`LoadPlan::bursty`), whose members weigh each shard on a Poisson count, are held to
//!    [`BURSTY_BOUND`] until [`SETTLE`] and to [`TARGET`] from then on: the figures
//!    are for steady load, and a move must clear the noise of the pair (`load_plan`).
//! 2. **No churn:** in steady load (from [`SETTLE`] after a change to the next change, 10
//!    minutes each), no member takes part in more than one move in any 10 minutes (a shard
//!    changing hands; shards changing hands between one pair within a minute are one move, an
//!    exchange).
//! 3. **Dwell:** from the start, no shard changes hands again less than [`DWELL`] seconds
//!    after it last did (the "a shard moved at most once in several minutes"): a move
//!    of a shard taken free (at the start) is its first. Until 2026-12-07 this was measured,
//!    not checked: 53 of the 6,179 moves of steady seeds 0..600 broke it, shards an exchange
//!    took back or sent on from a taker handed them a moment before.
//! 4. **Nothing dropped:** from the start, no shard is held by no broker for more than
//!    [`UNHELD`] seconds, and every record put is handled (counted once however often it is
//!    handled) within a minute of the last put.
//!
//! The targets are 1.15x within 90 s, checked as they stand on steady seeds: 599 of
//! the steady seeds 0..600 and 2,995 of 0..3000 meet them on the code of 2026-12-07, with no
//! shard moved twice within [`DWELL`] in any (the report says when each window settled within
//! 1.15x for good: `LoadReport::settled`; see `docs/leases.md`, "Balancing by load", for the
//! five that do not: the dwell holds three of them back).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::{hash_key, MemoryStream};
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use tokio::time::{sleep, Instant};

use crate::clock::SimClock;

/// The distinct payloads handled (a record handled twice counts once).
type Handled = Arc<Mutex<HashSet<String>>>;

const STREAM: &str = "load";

/// When the second hot shard turns hot, in seconds of steady load.
pub const TURN: u64 = 900;
/// Seconds of steady load in all.
pub const LENGTH: u64 = 1_800;
/// Seconds after the load starts or changes from which the heaviest member weighs at most
/// [`TARGET`] times the reference's heaviest: the convergence time.
pub const CONVERGE: u64 = 90;
/// The most the heaviest member of a bursty seed may weigh against the reference from
/// [`CONVERGE`] to [`SETTLE`].
pub const BURSTY_BOUND: f64 = 1.3;
/// Seconds a shard handed over stays where it went (`load_plan::dwell`), against which
/// [`LoadReport::moved_again`] counts.
pub const DWELL: u64 = 180;
/// Seconds after the load starts or changes from which the load counts as steady for the
/// no-churn invariant: a correction of the first moves may wait for the three minutes a shard
/// handed over stays where it went (`load_plan::dwell`).
pub const SETTLE: u64 = 300;
/// Seconds a breach of the balance bounds must last, in the last twice as many, to count.
pub const SPIKE: u64 = 10;
/// The most the heaviest member may weigh against the reference at any second from
/// [`CONVERGE`], however briefly (an exchange's hand-overs in flight).
pub const CAP: f64 = 2.0;
/// The bound on the heaviest member against the reference, after convergence: checked
/// from [`CONVERGE`]; the report says when each steady window settled within it
/// (`LoadReport::settled`).
pub const TARGET: f64 = 1.15;
/// Seconds within which shards that change hands between one pair of members count as one
/// move: an exchange (a shard for a few of the taker's) lands over a few renewals.
const EXCHANGE_WINDOW: u64 = 60;
/// The most seconds a shard may be held by no broker in steady load (a hand-over takes a few).
const UNHELD: u64 = 30;
/// What a held shard weighs besides its handler time, in handler milliseconds a minute (as the
/// planner counts it).
const PER_SHARD: f64 = 1.0;

/// One load seed's fleet and load.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// The seed.
    pub seed: u64,
    /// Each broker's capacity (1.0 the default).
    pub capacities: Vec<f64>,
    /// Records a second each shard receives before [`TURN`].
    pub rates: Vec<u64>,
    /// The shard hot from the start (20 times the median rate).
    pub hot: usize,
    /// The shard that turns hot at [`TURN`], and its rate from then on.
    pub turns: (usize, u64),
    /// Whether each second's puts are a Poisson count of mean the shard's rate (`--bursty`)
    /// rather than exactly the rate.
    pub bursty: bool,
    /// What a handler spends on one record.
    pub cost: Duration,
}

impl LoadPlan {
    /// The plan of `seed`.
    pub fn of(seed: u64) -> LoadPlan {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x10ad_ba1a_11ce);
        let brokers = rng.usize(3..=6);
        let shards = rng.usize((2 * brokers).max(8)..=30);
        let mut capacities = vec![1.0; brokers];
        if rng.u8(..3) == 0 {
            capacities[rng.usize(..brokers)] = 2.0;
        }
        // A Zipf spread: the k-th busiest shard gets 10 / k^s records a second (at least 1),
        // the shards in a random order.
        let s = 0.6 + rng.f64() * 0.6;
        let mut rates: Vec<u64> = (1..=shards)
            .map(|k| ((10.0 / (k as f64).powf(s)).round() as u64).max(1))
            .collect();
        rng.shuffle(&mut rates);
        let mut sorted = rates.clone();
        sorted.sort_unstable();
        let hot = 20 * sorted[shards / 2];
        let first = rng.usize(..shards);
        rates[first] = hot;
        let turns = ((first + 1 + rng.usize(..shards - 1)) % shards, hot);
        // Handlers busy about a third of the fleet's capacity once both shards are hot, and
        // a hot shard at most 40 % of one handler.
        let peak: u64 = rates.iter().sum::<u64>() - rates[turns.0] + turns.1;
        let total: f64 = capacities.iter().sum();
        let by_fleet = 0.33 * total * 1_000.0 / peak as f64;
        let by_hot = 400.0 / hot as f64;
        let cost = Duration::from_micros((by_fleet.min(by_hot) * 1_000.0) as u64);
        LoadPlan {
            seed,
            capacities,
            rates,
            hot: first,
            turns,
            bursty: false,
            cost,
        }
    }

    /// Each shard's rate `at` seconds of steady load.
    fn rates_at(&self, at: u64) -> Vec<u64> {
        let mut rates = self.rates.clone();
        if at >= TURN {
            rates[self.turns.0] = self.turns.1;
        }
        rates
    }

    /// Each shard's weight at `rates`: handler milliseconds a minute, plus [`PER_SHARD`].
    fn weights(&self, rates: &[u64]) -> Vec<f64> {
        let per_record = self.cost.as_secs_f64() * 1_000.0 * 60.0;
        rates
            .iter()
            .map(|r| *r as f64 * per_record + PER_SHARD)
            .collect()
    }
}

/// The heaviest weight over capacity of an offline placement, longest processing time first.
pub fn lpt(weights: &[f64], capacities: &[f64]) -> f64 {
    let mut sorted = weights.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut loads = vec![0.0; capacities.len()];
    for w in sorted {
        let best = (0..loads.len())
            .min_by(|&a, &b| {
                ((loads[a] + w) / capacities[a]).total_cmp(&((loads[b] + w) / capacities[b]))
            })
            .expect("a member");
        loads[best] += w;
    }
    (0..loads.len())
        .map(|m| loads[m] / capacities[m])
        .fold(0.0, f64::max)
}

/// What one load seed did.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The plan it ran.
    pub plan: LoadPlan,
    /// Broken invariants (empty: the seed passed).
    pub violations: Vec<String>,
    /// Every shard that changed hands: when, its rate, from and to.
    pub history: Vec<String>,
    /// A digest of the history: equal for two runs of one seed when the run is deterministic.
    pub digest: u64,
    /// Records put.
    pub puts: u64,
    /// Moves (shards changing hands) in all.
    pub moves: usize,
    /// Moves of a shard less than [`DWELL`] after it last changed hands, each a violation
    /// (until 2026-12-07 an exchange's shards taken back could be ones its taker was handed a
    /// moment before: seed 23's two shards given at 947 s were taken back at 974 s).
    pub moved_again: usize,
    /// The heaviest member against the reference at the end.
    pub ratio_at_end: f64,
    /// Per steady window (from the start, from [`TURN`]): seconds after its change from which
    /// the heaviest member stayed within [`TARGET`] of the reference to the window's end.
    pub settled: [u64; 2],
    /// Per steady window: the heaviest member against the reference at its worst from
    /// [`CONVERGE`] on, held for [`SPIKE`] seconds.
    pub worst_after_converge: [f64; 2],
}

impl LoadReport {
    /// True when no invariant broke.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs one load seed on a fresh single-threaded runtime with paused time.
pub fn run_load(seed: u64) -> LoadReport {
    run_plan(LoadPlan::of(seed))
}

/// Runs one load plan (`LoadPlan::of`, perhaps made bursty).
pub fn run_plan(plan: LoadPlan) -> LoadReport {
    fastrand::seed(plan.seed);
    crate::paused_runtime(plan.seed).block_on(simulate(plan))
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    clock: &SimClock,
    who: usize,
    capacity: f64,
    cost: Duration,
    handled: &Handled,
) -> RunningBroker {
    let handled = handled.clone();
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table).with_clock(clock.clone()))
        .owner_id(format!("broker-{who}"))
        .wall_clock(clock.clone())
        .build()
        .expect("broker");
    broker
        .subscribe(STREAM)
        .balance_by_load()
        .capacity(capacity)
        .handle(move |d: Delivery| {
            let handled = handled.clone();
            async move {
                sleep(cost).await;
                let payload = String::from_utf8_lossy(d.payload()).into_owned();
                handled.lock().expect("handled").insert(payload);
                Ok::<(), std::io::Error>(())
            }
        })
        .expect("subscribe");
    broker.start().await.expect("start")
}

/// Who holds each shard now (by index), as the brokers' stats say.
fn holders(fleet: &[RunningBroker], shard_index: &HashMap<String, usize>) -> Vec<Option<usize>> {
    let mut held = vec![None; shard_index.len()];
    for (who, running) in fleet.iter().enumerate() {
        for shard in running.stats().shards(STREAM) {
            if let Some(&i) = shard_index.get(&shard.shard) {
                held[i] = Some(who);
            }
        }
    }
    held
}

async fn simulate(plan: LoadPlan) -> LoadReport {
    let shards = plan.rates.len();
    let clock = SimClock::new(Instant::now());
    let kinesis = MemoryStream::new().with_clock(clock.clone());
    kinesis
        .create_stream(STREAM, shards as u32)
        .expect("stream");
    let layout = kinesis.shards(STREAM).expect("the stream's shards");
    let shard_index: HashMap<String, usize> = layout
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    // Per shard, a partition key that hashes into it.
    let keys: Vec<String> = layout
        .iter()
        .map(|s| {
            (0..)
                .map(|n| format!("k{n}"))
                .find(|k| (s.hash_range.0..=s.hash_range.1).contains(&hash_key(k)))
                .expect("some key hashes into each shard")
        })
        .collect();
    let table = MemoryLeaseTable::new();
    let handled = Handled::default();
    let mut fleet = Vec::new();
    for (who, capacity) in plan.capacities.iter().enumerate() {
        let running = start(
            &kinesis, &table, &clock, who, *capacity, plan.cost, &handled,
        );
        fleet.push(running.await);
    }
    let mut puts = 0u64;
    // Bursty (`LoadPlan::bursty`): each second a shard receives a Poisson count of mean its
    // rate, as independent producers' records arrive, rather than exactly its rate.
    let mut bursts = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(plan.seed ^ 0xb0_257);
    sleep(Duration::from_secs(5)).await;
    let mut violations = Vec::new();
    let mut last: Vec<Option<usize>> = vec![None; shards];
    // Per member, the times (seconds of steady load) of the moves it took part in.
    // Shards that changed hands between one pair within a minute of the pair's first are one
    // move (an exchange hands several at once).
    let mut moved: Vec<Vec<u64>> = vec![Vec::new(); fleet.len()];
    let mut pair_since: HashMap<(usize, usize), u64> = HashMap::new();
    let mut moves = 0;
    let mut moved_again = 0;
    let mut changed_at: Vec<Option<u64>> = vec![None; shards];
    let mut history = Vec::new();
    let mut unheld_since: Vec<Option<u64>> = vec![None; shards];
    let mut ratio = 0.0;
    let mut settled = [0u64; 2];
    let mut worst_after_converge = [0.0f64; 2];
    let mut recent = std::collections::VecDeque::new();
    for second in 0..LENGTH {
        let rates = plan.rates_at(second);
        for (shard, key) in keys.iter().enumerate() {
            let count = match plan.bursty {
                true if rates[shard] > 0 => {
                    let poisson =
                        rand_distr::Poisson::new(rates[shard] as f64).expect("a positive rate");
                    rand::Rng::sample(&mut bursts, poisson) as u64
                }
                _ => rates[shard],
            };
            for n in 0..count {
                kinesis
                    .put(STREAM, key, format!("{second}.{shard}.{n}"))
                    .expect("put");
                puts += 1;
            }
        }
        sleep(Duration::from_secs(1)).await;
        let held = holders(&fleet, &shard_index);
        let since_change = if second >= TURN {
            second - TURN
        } else {
            second
        };
        for (shard, now) in held.iter().enumerate() {
            match (now, unheld_since[shard]) {
                (Some(_), _) => unheld_since[shard] = None,
                (None, None) => unheld_since[shard] = Some(second),
                (None, Some(since)) => {
                    if second - since > UNHELD && violations.len() < 20 {
                        violations.push(format!(
                            "at {second} s: shard {shard} held by no broker since {since} s"
                        ));
                    }
                }
            }
        }
        let weights = plan.weights(&rates);
        let weighed = |last: &[Option<usize>]| {
            let mut loads = vec![0.0; fleet.len()];
            for (shard, holder) in last.iter().enumerate() {
                if let Some(m) = holder {
                    loads[*m] += weights[shard];
                }
            }
            loads
        };
        let before_moves = weighed(&last);
        for (shard, now) in held.iter().enumerate() {
            if let (Some(before), Some(now)) = (last[shard], now) {
                if before != *now {
                    history.push(format!(
                        "{second} s: shard {shard} ({} a second) broker-{before} -> broker-{now}; \
                         members weighed {:?}",
                        rates[shard],
                        before_moves
                            .iter()
                            .zip(&plan.capacities)
                            .map(|(l, c)| (l / c).round())
                            .collect::<Vec<_>>()
                    ));
                    moves += 1;
                    if let Some(at) = changed_at[shard].filter(|at| second - at < DWELL) {
                        moved_again += 1;
                        if violations.len() < 20 {
                            violations.push(format!(
                                "at {second} s: shard {shard} changed hands again {} s after it \
                                 last did (at {at} s; at most once in {DWELL} s)",
                                second - at
                            ));
                        }
                    }
                    changed_at[shard] = Some(second);
                    let pair = (before.min(*now), before.max(*now));
                    let new_move = pair_since
                        .get(&pair)
                        .is_none_or(|since| second - since > EXCHANGE_WINDOW);
                    if new_move {
                        pair_since.insert(pair, second);
                        moved[before].push(second);
                        moved[*now].push(second);
                    }
                }
            }
            if now.is_some() {
                last[shard] = *now;
            }
        }
        // Invariant 1, from `CONVERGE` after the start and after the turn.
        let loads = weighed(&last);
        let heaviest = (0..loads.len())
            .map(|m| loads[m] / plan.capacities[m])
            .fold(0.0, f64::max);
        ratio = heaviest / lpt(&weights, &plan.capacities);
        if ratio > TARGET {
            settled[usize::from(second >= TURN)] = since_change + 1;
        }
        // From `CONVERGE`, each second is judged by the bound in force at that second (`TARGET`;
        // for a bursty seed `BURSTY_BOUND` until `SETTLE`): a breach counts when the seconds
        // over their bound make `SPIKE` of the last `2 * SPIKE` (within this window), broken
        // or not.
        let (bound, bound_from) = match plan.bursty && since_change < SETTLE {
            true => (BURSTY_BOUND, CONVERGE),
            false if plan.bursty => (TARGET, SETTLE),
            false => (TARGET, CONVERGE),
        };
        if since_change == 0 {
            recent.clear();
        }
        if since_change >= CONVERGE {
            recent.push_back((ratio, bound));
            if recent.len() as u64 > 2 * SPIKE {
                recent.pop_front();
            }
        }
        let over = recent.iter().filter(|(ratio, bound)| ratio > bound).count() as u64;
        // The ratio reached in `SPIKE` of those seconds: how heavy the fleet was at worst
        // for longer than a spike.
        let mut sorted: Vec<f64> = recent.iter().map(|(ratio, _)| *ratio).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let held = sorted.get(SPIKE as usize - 1).copied().unwrap_or(0.0);
        if since_change >= CONVERGE {
            let worst = &mut worst_after_converge[usize::from(second >= TURN)];
            *worst = worst.max(held);
        }
        if since_change >= CONVERGE && ratio > CAP && violations.len() < 20 {
            violations.push(format!(
                "at {second} s: the heaviest member weighs {ratio:.2}x the offline placement's \
                 (at no second above {CAP} from {CONVERGE} s)"
            ));
        }
        if over >= SPIKE && violations.len() < 20 {
            violations.push(format!(
                "at {second} s: the heaviest member weighed more than its bound (now {bound}, \
                 from {} s) in {over} of the last {} s, {held:.2}x the offline placement's or \
                 more in {SPIKE} of them; loads over capacity {:?}",
                bound_from,
                2 * SPIKE,
                loads
                    .iter()
                    .zip(&plan.capacities)
                    .map(|(l, c)| (l / c).round())
                    .collect::<Vec<_>>()
            ));
        }
    }
    // Invariant 2: in each steady window, at most one move per member in any 10 minutes.
    for (from, to) in [(SETTLE, TURN), (TURN + SETTLE, LENGTH)] {
        for (member, times) in moved.iter().enumerate() {
            let steady: Vec<u64> = times
                .iter()
                .copied()
                .filter(|t| (from..to).contains(t))
                .collect();
            let crowded = steady.iter().find_map(|&t| {
                let n = steady.iter().filter(|u| (t..t + 600).contains(*u)).count();
                (n > 1).then_some((t, n))
            });
            if let Some((t, n)) = crowded {
                violations.push(format!(
                    "broker-{member} took part in {n} moves in the 10 minutes from {t} s of \
                     steady load (at most 1; steady from {from} to {to} s)"
                ));
            }
        }
    }
    // Everything put is handled (at least once) within a minute of the last put.
    let distinct = || handled.lock().expect("handled").len() as u64;
    for _ in 0..60 {
        if distinct() >= puts {
            break;
        }
        sleep(Duration::from_secs(1)).await;
    }
    let handled = distinct();
    if handled < puts {
        violations.push(format!(
            "{handled} of {puts} records handled a minute after the last put"
        ));
    }
    for running in fleet {
        running.shutdown().await;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&history, &mut hasher);
    LoadReport {
        digest: std::hash::Hasher::finish(&hasher),
        history,
        puts,
        plan,
        violations,
        moves,
        moved_again,
        ratio_at_end: ratio,
        settled,
        worst_after_converge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lpt_places_the_heaviest_first_on_the_lightest_member() {
        // 6, 5, 4, 3 over two equal members: 6 + 3 and 5 + 4.
        assert_eq!(lpt(&[3.0, 6.0, 4.0, 5.0], &[1.0, 1.0]), 9.0);
        // A member of twice the capacity takes twice the load.
        assert_eq!(lpt(&[4.0, 4.0, 4.0], &[1.0, 2.0]), 4.0);
    }

    #[test]
    fn plans_keep_handlers_below_their_capacity() {
        for seed in 0..200 {
            let plan = LoadPlan::of(seed);
            let peak = plan.rates_at(TURN);
            let busy: f64 = peak
                .iter()
                .map(|r| *r as f64 * plan.cost.as_secs_f64())
                .sum();
            let total: f64 = plan.capacities.iter().sum();
            assert!(busy <= 0.34 * total, "seed {seed}: {busy} of {total}");
            assert_ne!(
                plan.turns.0, plan.hot,
                "seed {seed}: the shard turning hot is hot"
            );
        }
    }
}
