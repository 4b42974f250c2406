//! `kinesis-sim`: runs simulation seeds. `cargo xtask sim --seed N` replays one seed with its
//! history; `cargo xtask sim --seeds N [--from M]` runs a campaign of N seeds;
//! `--load-seed N` and `--load-seeds N [--from M]` do the same for the load simulation
//! (`kinesis_sim::load`), with `--bursty` each second's puts a Poisson count around each
//! shard's rate.

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    // `RUST_LOG=kinesis_fleet=debug,kinesis_shard_reader=debug` shows the brokers' own logs for a replayed seed.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(SimTime)
            .init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| -> Option<u64> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
    };
    let bursty = args.iter().any(|a| a == "--bursty");
    let plan = |seed| kinesis_sim::load::LoadPlan {
        bursty,
        ..kinesis_sim::load::LoadPlan::of(seed)
    };
    if let Some(seed) = value("--load-seed") {
        let report = kinesis_sim::load::run_plan(plan(seed));
        if args.iter().any(|a| a == "--history") || !report.passed() {
            for line in &report.history {
                println!("{line}");
            }
        }
        println!("{:?}", report.plan);
        println!(
            "records {}, moves {} ({} within {} s of the shard's last), heaviest at the end {:.2}x the offline placement",
            report.puts, report.moves, report.moved_again, kinesis_sim::load::DWELL, report.ratio_at_end
        );
        for violation in &report.violations {
            println!("violation: {violation}");
        }
        return if report.passed() {
            println!("load seed {seed} passed");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if let Some(count) = value("--load-seeds") {
        return load_campaign(count, value("--from").unwrap_or(0), bursty);
    }
    if let Some(seed) = value("--seed") {
        let report = kinesis_sim::run(seed);
        if args.iter().any(|a| a == "--history") || !report.passed() {
            for line in &report.history {
                println!("{line}");
            }
        }
        println!("{}", report.plan);
        println!("stats: {:?}\ndigest: {:016x}", report.stats, report.digest);
        return if report.passed() {
            println!("seed {seed} passed");
            ExitCode::SUCCESS
        } else {
            println!("{}", report.failure(200));
            ExitCode::FAILURE
        };
    }
    let Some(count) = value("--seeds") else {
        eprintln!(
            "usage: kinesis-sim --seed N [--history] | --seeds N [--from M] | --load-seed N [--history] | \
             --load-seeds N [--from M] [--bursty]"
        );
        return ExitCode::from(2);
    };
    let from = value("--from").unwrap_or(0);
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut faults = std::collections::BTreeMap::<String, u64>::new();
    let (mut puts, mut handled, mut dups, mut calm) = (0u64, 0u64, 0u64, 0u64);
    // Hand-overs, in seeds balanced by count and in those balanced by load (some
    // instances or all).
    let (mut by_load, mut load_hand_overs, mut count_hand_overs) = (0u64, 0u64, 0u64);
    for seed in from..from + count {
        let report = watched(seed);
        puts += report.stats.puts;
        handled += report.stats.handled;
        dups += report.stats.duplicates;
        calm += u64::from(report.plan.is_calm());
        if report.plan.balance == kinesis_sim::Balance::Count {
            count_hand_overs += report.stats.hand_overs;
        } else {
            by_load += 1;
            load_hand_overs += report.stats.hand_overs;
        }
        for (k, v) in &report.stats.injected {
            *faults.entry(k.clone()).or_default() += v;
        }
        if !report.passed() {
            println!("{}", report.failure(80));
            failed.push(seed);
        }
        if (seed - from + 1) % 500 == 0 {
            println!(
                "{} seeds, {} failed, {:.0} s",
                seed - from + 1,
                failed.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "campaign: seeds {from}..{}: {} passed, {} failed{}; {calm} calm seeds; hand-overs: {count_hand_overs} in {} seeds balanced by count, {load_hand_overs} in {by_load} balanced by load on some instance or all; {puts} records put, {handled} handled, {dups} handled twice (unplanned faults only); injected {faults:?}; {:.0} s",
        from + count,
        count - failed.len() as u64,
        failed.len(),
        if failed.is_empty() { String::new() } else { format!(" {failed:?}") },
        count - by_load,
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A campaign of `count` load seeds from `from` (`load`): each seed's figures, then the
/// failures.
fn load_campaign(count: u64, from: u64, bursty: bool) -> ExitCode {
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut worst: f64 = 0.0;
    let (mut moves, mut settled, mut churn, mut unbalanced, mut dwell) = (0, Vec::new(), 0, 0, 0);
    let mut moved_again = 0;
    let mut worst_early: f64 = 0.0;
    for seed in from..from + count {
        let report = kinesis_sim::load::run_plan(kinesis_sim::load::LoadPlan {
            bursty,
            ..kinesis_sim::load::LoadPlan::of(seed)
        });
        worst = worst.max(report.ratio_at_end);
        moves += report.moves;
        moved_again += report.moved_again;
        settled.extend(report.settled);
        worst_early = report
            .worst_after_converge
            .iter()
            .fold(worst_early, |a, b| a.max(*b));
        let kinds = |word: &str| report.violations.iter().any(|v| v.contains(word));
        churn += usize::from(kinds("moves in the 10 minutes"));
        unbalanced += usize::from(kinds("offline placement's"));
        dwell += usize::from(kinds("changed hands again"));
        println!(
            "load seed {seed}: {} brokers, {} shards, {} moves ({} within {} s of the shard's last), settled within {}x after {:?} s, at worst {:.2?}x from {} s, heaviest at the end {:.2}x the offline placement{}",
            report.plan.capacities.len(),
            report.plan.rates.len(),
            report.moves,
            report.moved_again,
            kinesis_sim::load::DWELL,
            kinesis_sim::load::TARGET,
            report.settled,
            report.worst_after_converge,
            kinesis_sim::load::CONVERGE,
            report.ratio_at_end,
            if report.passed() {
                String::new()
            } else {
                format!(
                    "; FAILED ({} broken): {:?}",
                    report.violations.len(),
                    &report.violations[..report.violations.len().min(3)]
                )
            }
        );
        if !report.passed() {
            failed.push(seed);
        }
    }
    settled.sort_unstable();
    let at = |q: f64| {
        settled
            .get((settled.len().saturating_sub(1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "load campaign: seeds {from}..{}: {} passed, {} failed {failed:?} ({churn} on churn, {unbalanced} on balance, {dwell} on dwell); \
         {moves} moves ({moved_again} within {} s of the shard's last); settled within {}x after median {} s, p90 {} s, max {} s; at worst {worst_early:.2}x from {} s; worst at the end {worst:.2}x; {:.0} s",
        from + count,
        count - failed.len() as u64,
        failed.len(),
        kinesis_sim::load::DWELL,
        kinesis_sim::load::TARGET,
        at(0.5),
        at(0.9),
        at(1.0),
        kinesis_sim::load::CONVERGE,
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs a seed on a thread of its own; a seed that makes no progress for 120 s of wall time
/// (a task spinning without letting time move) fails the campaign, naming it.
fn watched(seed: u64) -> kinesis_sim::Report {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(kinesis_sim::run(seed));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(report) => report,
        Err(_) => {
            println!("simulation seed {seed} HUNG: no end after 120 s of wall time\nreplay: cargo xtask sim --seed {seed}");
            std::process::exit(1);
        }
    }
}

/// Log times in simulated seconds: from the first logged event, which the first join makes at
/// the run's start, so they line up with the history's times.
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        if tokio::runtime::Handle::try_current().is_err() {
            return write!(w, "{:>10}", "-");
        }
        let start = *START.get_or_init(tokio::time::Instant::now);
        write!(w, "{:>9.3}s", start.elapsed().as_secs_f64())
    }
}
