//! The simulation seeds CI runs: 56 consecutive seeds, so every fault kind is injected in at
//! least four of them (seed n always includes drawn kind n % 19; operator moves come from the
//! seed's bits) and a quarter are calm seeds where no record may be handled twice; 14 start
//! from a table the KCL import wrote, in every shape under faults. A failure prints the seed's replay
//! command and history.

use kinesis_sim::{Fault, Plan};

/// The seeds CI runs.
const CI_SEEDS: std::ops::Range<u64> = 0..56;

fn run_seeds(seeds: std::ops::Range<u64>) {
    let mut failures = Vec::new();
    for seed in seeds {
        let report = kinesis_sim::run(seed);
        if !report.passed() {
            failures.push(report.failure(150));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// CI seeds 0..14 pass every invariant (the four quarters run side by side).
#[test]
fn ci_seeds_first_quarter() {
    run_seeds(0..14);
}

/// CI seeds 14..28 pass every invariant.
#[test]
fn ci_seeds_second_quarter() {
    run_seeds(14..28);
}

/// CI seeds 28..42 pass every invariant.
#[test]
fn ci_seeds_third_quarter() {
    run_seeds(28..42);
}

/// CI seeds 42..56 pass every invariant.
#[test]
fn ci_seeds_fourth_quarter() {
    run_seeds(42..56);
}

/// The CI seeds cover every fault kind, every start position and every dispatch mode.
#[test]
fn ci_seeds_cover_every_fault_position_and_mode() {
    let plans: Vec<Plan> = CI_SEEDS.map(Plan::of).collect();
    for fault in Fault::ALL {
        assert!(
            plans.iter().filter(|p| p.has(fault)).count() >= 4,
            "{fault:?} in fewer than 4 CI seeds"
        );
    }
    let starts: std::collections::BTreeSet<String> =
        plans.iter().map(|p| format!("{:?}", p.start)).collect();
    let modes: std::collections::BTreeSet<String> =
        plans.iter().map(|p| format!("{:?}", p.mode)).collect();
    assert_eq!(starts.len(), 3, "{starts:?}");
    assert_eq!(modes.len(), 5, "{modes:?}");
    assert!(plans.iter().filter(|p| p.is_calm()).count() >= 10);
    // KPL aggregates meet calm seeds (no duplicate allowed) and faulty ones, and every start.
    let kpl = |calm: bool| {
        plans
            .iter()
            .filter(|p| p.kpl && p.is_calm() == calm)
            .count()
    };
    assert!(
        kpl(true) >= 3 && kpl(false) >= 10,
        "{} calm, {} faulty",
        kpl(true),
        kpl(false)
    );
    let kpl_starts: std::collections::BTreeSet<String> = plans
        .iter()
        .filter(|p| p.kpl)
        .map(|p| format!("{:?}", p.start))
        .collect();
    assert_eq!(kpl_starts.len(), 3, "{kpl_starts:?}");
    // Fan-out meets calm seeds and faulty ones, every start and every mode.
    let fan_out = |calm: bool| {
        plans
            .iter()
            .filter(|p| p.fan_out && p.is_calm() == calm)
            .count()
    };
    assert!(
        fan_out(true) >= 3 && fan_out(false) >= 10,
        "fan-out: {} calm, {} faulty",
        fan_out(true),
        fan_out(false)
    );
    let fan_out_kinds: std::collections::BTreeSet<String> = plans
        .iter()
        .filter(|p| p.fan_out)
        .flat_map(|p| [format!("{:?}", p.start), format!("{:?}", p.mode)])
        .collect();
    assert_eq!(fan_out_kinds.len(), 8, "{fan_out_kinds:?}");
    // Slow lifecycle hooks meet calm and faulty seeds, polling and fan-out, every mode.
    let hooks = |calm: bool| {
        plans
            .iter()
            .filter(|p| p.hooks && p.is_calm() == calm)
            .count()
    };
    assert!(
        hooks(true) >= 3 && hooks(false) >= 10,
        "hooks: {} calm, {} faulty",
        hooks(true),
        hooks(false)
    );
    let hook_kinds: std::collections::BTreeSet<String> = plans
        .iter()
        .filter(|p| p.hooks)
        .flat_map(|p| [format!("{:?}", p.mode), format!("fan-out {}", p.fan_out)])
        .collect();
    assert_eq!(hook_kinds.len(), 7, "{hook_kinds:?}");
    // Imported tables in every shape: one and two split levels below the KCL's rows, with and
    // without a trimmed parent, each under faults, in calm seeds too, at the default LATEST.
    let imported: Vec<&Plan> = plans.iter().filter(|p| p.import.is_some()).collect();
    let shapes = |calm: bool| -> std::collections::BTreeSet<(u8, bool)> {
        imported
            .iter()
            .filter(|p| p.is_calm() == calm)
            .filter_map(|p| p.import.map(|i| (i.depth, i.trimmed_parent)))
            .collect()
    };
    assert_eq!(shapes(false).len(), 4, "under faults: {:?}", shapes(false));
    assert!(!shapes(true).is_empty(), "an imported calm seed");
    assert!(
        imported
            .iter()
            .any(|p| p.has(Fault::OperatorMove) && p.import.is_some_and(|i| i.depth == 2)),
        "an operator's move two split levels below an imported row"
    );
    assert!(
        imported
            .iter()
            .any(|p| p.start == kinesis_sim::Start::Latest),
        "an imported seed at LATEST"
    );
    assert!(
        imported.iter().any(|p| p.has(Fault::OperatorMove)),
        "an operator's move on an imported table"
    );
    // Runs that go on past the janitor's ten leases (the roster-size invariant's bite), with
    // crashes among their faults.
    let tails: Vec<&Plan> = plans.iter().filter(|p| p.tail).collect();
    assert!(
        tails.len() >= 8 && tails.iter().filter(|p| p.has(Fault::Crash)).count() >= 2,
        "{} seeds with a tail",
        tails.len()
    );
}

/// A seed replays exactly: two runs write the same history.
#[test]
fn a_seed_replays_exactly() {
    let (a, b) = (kinesis_sim::run(20), kinesis_sim::run(20));
    assert_eq!(a.digest, b.digest, "seed 20 is not deterministic");
    assert_eq!(a.stats.handled, b.stats.handled);
}

/// Seeds whose histories differed from run to run (a third of seeds 0..300 in three runs each,
/// most often in the order of the instances' last leaves at one instant): tokio's watch channel
/// registers each waiter in one of eight lists drawn at random, and `select!` draws its first
/// branch, from a seed of the runtime's own; the fleet's maps iterated in a random order too.
/// Each replays three times alike now.
#[test]
fn seeds_that_differed_from_run_to_run_replay_exactly() {
    for seed in [0, 7, 9, 22, 194, 210_003] {
        let runs: Vec<u64> = (0..3).map(|_| kinesis_sim::run(seed).digest).collect();
        assert!(
            runs.iter().all(|d| *d == runs[0]),
            "seed {seed} wrote different histories: {runs:x?}"
        );
    }
}

/// Seeds whose failures were defects of the library, fixed since (docs/reliability.md, "What
/// the liveness checks found"): 392 and 12016, a crashed run's last renewal landing late refused
/// a same-id restart; 3026, a member whose join was never announced was never buried; 3857, the
/// janitor's delete undone by a late create; 9562, a take of an instance's own row lost to a
/// renewal whose answer was lost left the row unread for good; 16969, a burial whose answer
/// was lost, the roster listed before the next read, was never announced (two shards unread).
/// 50, an operator's hold asked for a row (the request's write restarted the hold: a shard
/// unread for 19 s). And one of the simulation itself: 12711, a start retrying against failing
/// Kinesis stood the world still, so the faults' episode never ended and no checker sampled
/// (26 s unexcused). 1466 and 1909: a member joining between a watcher and a crashed member
/// within one watch of the watcher burying the member before it, so the crashed one was never
/// the watcher's successor at a watch and nobody counted it on its own (16.1 s unburied).
/// 228034, of the simulation: the roster-size check counted the janitor's ten leases from a
/// crash, though the janitor counts them from the burial, which a run of five crashed members
/// (two never announced) put 30 s after it. 518, with the tail that runs on past the janitor's
/// ten leases: a burial's roster listing failed under store faults and was never retried, so
/// the janitor never learnt of the departed row, which stood for good. 23740, of the
/// simulation: the roster-size check aged a restarted janitor from its process's start without
/// excusing the faults (a cut-off and a freeze) that kept it from joining, though it counts its
/// ten leases from its first sight of the departed rows after it joined. 27312: a member whose
/// roster bumps failed, not announced and so taking nothing, was given a shard by load, which
/// stood unread 9.5 s after the hand-over (it now publishes no capacity until announced).
#[test]
fn seeds_that_found_defects() {
    for seed in [
        392, 3026, 3857, 9562, 12016, 16969, 50, 12711, 1466, 1909, 228_034, 518, 23_740, 27_312,
    ] {
        let report = kinesis_sim::run(seed);
        assert!(report.passed(), "{}", report.failure(150));
    }
}

/// Campaign seeds that once failed and were fixed, each named with what it found: they pass
/// every invariant now, and keep doing so.
#[test]
fn seeds_that_found_defects_pass() {
    // 9034: a giver listed a shard beside its taker while every answer to its landed
    // hand-over was lost (the checker's; the code of the fix no longer reaches that state in
    // this seed, `hand_over_giver.rs` pins it). 11381: a giver waited for its epoch bump before its
    // keeper ended. 13518: an unannounced member's burial clock (the checker's). 46072: a
    // round whose only take was refused never listed again (a row the operator released).
    for seed in [9034, 11381, 13518, 46072] {
        run_seeds(seed..seed + 1);
    }
}
