//! Figure 13: balancing by count against balancing by load (`balance_by_load()`), side by side
//! in one run. N brokers share S shards of a `MemoryStream` on tokio's paused clock (simulated
//! time), each broker's `MemoryLeaseStore` wrapped in `kinesis_lease_dynamo::Billed` (DynamoDB's
//! billing of every call). Handlers wait 2 ms a record, serially. Two loads:
//!
//! - **skewed**: one shard in 8 receives 10 records a second, the others 1; the hot shards are
//!   the first ones by id, side by side, as a hot key range often is;
//! - **uniform**: every shard 1 record a second.
//!
//! Each fleet starts together, then runs 8 minutes of steady load. Reported per size, load and
//! mode: max over mean of the records each broker handled in the last 2 minutes (against the
//! same ratio for an offline longest-processing-time-first placement of the same shards: the
//! reference), when every 10 s window came within 1.25x of the mean for good, the moves (shards
//! changing hands, sampled every second) in the last 4 minutes scaled to an hour, and the lease
//! table's read and write units a second over those 4 minutes.
//!
//! After each pair of runs a line on stderr splits the by-count and by-load reads by kind of
//! call (`Billed::reads_by_call`): where the units went.
//!
//! `FLEET_BALANCE_SIZES=16x3,100x10` (the default) picks the fleets; `cargo xtask bench
//! fleet_balance`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_bench::figure;
use kinesis_broker::testing::{hash_key, MemoryStream, TokioClock};
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use kinesis_lease_dynamo::{Bill, Billed};
use tokio::time::sleep;

const STREAM: &str = "balance";
/// What a handler spends on one record.
const COST: Duration = Duration::from_millis(2);
/// Seconds of steady load; the last `LAST` are measured.
const STEADY: u64 = 480;
const LAST: u64 = 120;
/// The window over which moves and table units are counted.
const QUIET: u64 = 240;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Load {
    Skewed,
    Uniform,
}

/// Records a second each shard receives.
fn rates(shards: u32, load: Load) -> Vec<u64> {
    (0..shards)
        .map(|i| match load {
            Load::Skewed if i < shards.div_ceil(8) => 10,
            _ => 1,
        })
        .collect()
}

/// A partition key of shard `i` of `shards` even shards.
fn key_of(i: u32, shards: u32) -> String {
    let step = u128::MAX / u128::from(shards) + 1;
    (0..)
        .map(|n| format!("k{n}"))
        .find(|k| hash_key(k) / step == u128::from(i))
        .expect("some key hashes into each shard")
}

/// Max over mean of an offline placement: each shard, heaviest first, to the least loaded.
fn lpt(rates: &[u64], brokers: usize) -> f64 {
    let mut sorted = rates.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut loads = vec![0u64; brokers];
    for rate in sorted {
        let least = (0..brokers).min_by_key(|&b| loads[b]).expect("brokers");
        loads[least] += rate;
    }
    max_over_mean(&loads)
}

fn max_over_mean(counts: &[u64]) -> f64 {
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    if mean == 0.0 {
        1.0
    } else {
        max / mean
    }
}

struct Outcome {
    ratio: f64,
    converged: Option<u64>,
    moves_per_hour: f64,
    /// Read and write units a second over the quiet window.
    units: (f64, f64),
    /// Read units a second over the quiet window, per kind of call.
    reads_by_call: BTreeMap<&'static str, f64>,
}

async fn start(
    kinesis: &MemoryStream,
    store: impl kinesis_broker::lease::LeaseStore + 'static,
    clock: TokioClock,
    who: usize,
    by_load: bool,
    handled: &Arc<Mutex<HashMap<u64, usize>>>,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .wall_clock(clock)
        .owner_id(format!("broker-{who:03}"))
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = if by_load { sub.balance_by_load() } else { sub };
    let handled = handled.clone();
    sub.handle(move |d: Delivery| {
        let handled = handled.clone();
        async move {
            sleep(COST).await;
            let id = std::str::from_utf8(d.payload())
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(u64::MAX);
            handled.lock().expect("handled").insert(id, who);
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    broker.start().await.expect("start")
}

async fn run(shards: u32, brokers: usize, load: Load, by_load: bool) -> Outcome {
    fastrand::seed(u64::from(shards) * 1_000 + brokers as u64);
    // One wall clock on paused time for the fleet and its stream: the time a hand-over's
    // token carries is read by the others (on the system clock a handed shard would stay for
    // good), and a `LATEST` start is pinned as a time the stream stamps its records by.
    let clock = TokioClock::new(1_700_000_000_000);
    let kinesis = MemoryStream::new().with_clock(clock);
    kinesis.create_stream(STREAM, shards).expect("stream");
    let table = MemoryLeaseTable::new();
    let billed = Billed::new();
    let handled: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    let mut fleet = Vec::new();
    for who in 0..brokers {
        let store = billed.wrap(Arc::new(MemoryLeaseStore::over(&table)));
        fleet.push(start(&kinesis, store, clock, who, by_load, &handled).await);
    }
    sleep(Duration::from_secs(5)).await;
    let rates = rates(shards, load);
    let keys: Vec<String> = (0..shards).map(|i| key_of(i, shards)).collect();
    let mut id = 0u64;
    // Per second of steady load, the first record id put in it.
    let mut second_starts = Vec::new();
    let mut owners: HashMap<String, usize> = HashMap::new();
    let mut moves = 0u64;
    let mut bill_from = None;
    // `FLEET_BALANCE_HISTORY=1`: every move on stderr, and what each broker holds at the end, to
    // explain a figure.
    let history = std::env::var_os("FLEET_BALANCE_HISTORY").is_some();
    let shard_ids: HashMap<String, u64> = kinesis
        .shards(STREAM)
        .expect("the stream's shards")
        .iter()
        .zip(&rates)
        .map(|(s, r)| (s.id.clone(), *r))
        .collect();
    let shard_rate = |id: &str| shard_ids.get(id).copied().unwrap_or(0);
    let mut reads_from = BTreeMap::new();
    for second in 0..STEADY {
        second_starts.push(id);
        if second == STEADY - QUIET {
            bill_from = Some(billed.bill());
            reads_from = billed.reads_by_call();
        }
        for (shard, key) in keys.iter().enumerate() {
            for _ in 0..rates[shard] {
                kinesis.put(STREAM, key, id.to_string()).expect("put");
                id += 1;
            }
        }
        sleep(Duration::from_secs(1)).await;
        for (who, running) in fleet.iter().enumerate() {
            for shard in running.stats().shards(STREAM) {
                let before = owners.insert(shard.shard.clone(), who);
                if let Some(before) = before.filter(|b| *b != who) {
                    if history {
                        eprintln!(
                            "{second} s: {} ({} a second) broker-{before:03} -> broker-{who:03}",
                            shard.shard,
                            shard_rate(&shard.shard)
                        );
                    }
                    if second >= STEADY - QUIET {
                        moves += 1;
                    }
                }
            }
        }
    }
    if history {
        // What each broker holds at the end: shards, hot ones, and records a second.
        for (who, running) in fleet.iter().enumerate() {
            let rates: Vec<u64> = running
                .stats()
                .shards(STREAM)
                .iter()
                .map(|s| shard_rate(&s.shard))
                .collect();
            eprintln!(
                "at the end broker-{who:03}: {} shards, {} hot, {} records a second",
                rates.len(),
                rates.iter().filter(|r| **r > 1).count(),
                rates.iter().sum::<u64>()
            );
        }
    }
    let (before, after): (Bill, Bill) = (bill_from.expect("a quiet window"), billed.bill());
    let units = (
        (after.read_units - before.read_units) / QUIET as f64,
        (after.write_units - before.write_units) / QUIET as f64,
    );
    let mut reads_by_call = billed.reads_by_call();
    for (call, units) in &mut reads_by_call {
        *units = (*units - reads_from.get(call).copied().unwrap_or(0.0)) / QUIET as f64;
    }
    sleep(Duration::from_secs(10)).await;
    for running in fleet {
        running.shutdown().await;
    }
    let handled = handled.lock().expect("handled");
    let counts_between = |from: u64, to: u64| {
        let mut counts = vec![0u64; brokers];
        for record in second_starts[from as usize]..second_starts[to as usize] {
            if let Some(who) = handled.get(&record) {
                counts[*who] += 1;
            }
        }
        counts
    };
    let ratio = max_over_mean(&counts_between(STEADY - LAST, STEADY - 1));
    let windows: Vec<bool> = (0..STEADY / 10 - 1)
        .map(|w| max_over_mean(&counts_between(w * 10, w * 10 + 10)) <= 1.25)
        .collect();
    let converged = (0..windows.len())
        .find(|&w| windows[w..].iter().all(|ok| *ok))
        .map(|w| w as u64 * 10);
    Outcome {
        ratio,
        converged,
        moves_per_hour: moves as f64 * 3_600.0 / QUIET as f64,
        units,
        reads_by_call,
    }
}

fn main() {
    // `RUST_LOG=kinesis_fleet::coordinator::load_balance=debug` shows what the planner of each
    // instance decided, to explain a figure.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_timer(PausedTime)
            .init();
    }
    let sizes = std::env::var("FLEET_BALANCE_SIZES").unwrap_or_else(|_| "16x3,100x10".into());
    for size in sizes.split(',') {
        let Some((shards, brokers)) = size
            .split_once('x')
            .and_then(|(s, b)| Some((s.parse::<u32>().ok()?, b.parse::<usize>().ok()?)))
        else {
            eprintln!("fleet_balance: `{size}` is not SHARDSxBROKERS");
            std::process::exit(2);
        };
        for load in [Load::Skewed, Load::Uniform] {
            let runtime = kinesis_bench::paused_runtime();
            let count = runtime.block_on(run(shards, brokers, load, false));
            let by_load = runtime.block_on(run(shards, brokers, load, true));
            let reference = lpt(&rates(shards, load), brokers);
            let name = format!("fleet_balance {size} {load:?}").to_lowercase();
            let converged =
                |o: &Outcome| o.converged.map_or("never".to_owned(), |s| format!("{s} s"));
            figure(
                &format!("{name}: max/mean handled, count / load (offline {reference:.2})"),
                &format!(
                    "{:.2} / {:.2} ({:.2}x the offline placement by load)",
                    count.ratio,
                    by_load.ratio,
                    by_load.ratio / reference
                ),
                "by load <= 1.15x the offline placement",
                Some(by_load.ratio <= reference * 1.15),
            );
            figure(
                &format!("{name}: within 1.25x of the mean for good, count / load"),
                &format!("{} / {}", converged(&count), converged(&by_load)),
                "by load <= 90 s of steady load",
                Some(by_load.converged.is_some_and(|s| s <= 90)),
            );
            figure(
                &format!("{name}: moves an hour in steady state, count / load"),
                &format!(
                    "{:.0} / {:.0}",
                    count.moves_per_hour, by_load.moves_per_hour
                ),
                "uniform: by load no more than by count",
                (load == Load::Uniform).then_some(by_load.moves_per_hour <= count.moves_per_hour),
            );
            let ((count_r, count_w), (load_r, load_w)) = (count.units, by_load.units);
            figure(
                &format!("{name}: table RCU/s, WCU/s, count / load"),
                &format!(
                    "{count_r:.2}, {count_w:.1} / {load_r:.2}, {load_w:.1} ({:+.0} % reads, {:+.0} % writes)",
                    (load_r / count_r.max(f64::MIN_POSITIVE) - 1.0) * 100.0,
                    (load_w / count_w.max(f64::MIN_POSITIVE) - 1.0) * 100.0
                ),
                "<= +10 % units",
                Some(load_r + load_w <= (count_r + count_w) * 1.10),
            );
            let by_call = |o: &Outcome| {
                o.reads_by_call
                    .iter()
                    .map(|(call, units)| format!("{call} {units:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            eprintln!(
                "{name}: RCU/s by call, count: {}; load: {}",
                by_call(&count),
                by_call(&by_load)
            );
        }
    }
}

/// Log times in seconds of the paused clock since the first logged event of the process.
struct PausedTime;

impl tracing_subscriber::fmt::time::FormatTime for PausedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        if tokio::runtime::Handle::try_current().is_err() {
            return write!(w, "{:>9}", "-");
        }
        let start = *START.get_or_init(tokio::time::Instant::now);
        write!(w, "{:>8.1}s", start.elapsed().as_secs_f64())
    }
}
