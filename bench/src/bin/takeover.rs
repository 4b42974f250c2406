//! Figure 12: how soon a shard is processed again after it changes hands. Three brokers share
//! 16 shards of a `MemoryStream` with a latency model (Kinesis calls and the lease table answer
//! after a round trip), a writer puts about 190 records a second over them, and handlers take
//! 5 ms a record (`TAKEOVER_HANDLER_MS`). Then one broker crashes (dropped, no shutdown) and, once the others hold
//! everything again, another shuts down gracefully. For every shard that moved, per mode
//! (serial, `workers(4)`, `workers(4).by_key()`, fan-out):
//!
//! - **take to first record**: from the write that took the row landing (a watcher reads the
//!   table every 10 ms) to the new holder's handler starting on the shard's first record;
//! - **crash to first record**: from the crash to that first record (the lease is 10 s);
//! - **hand-over to first record**: from the call to `shutdown()` to that first record.
//!
//! p50 and max over the moved shards, on tokio's paused clock (simulated time, so the figures
//! are the protocol's and the latency model's, not this machine's load).
//!
//! `cargo xtask bench takeover`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_bench::figure;
use kinesis_broker::lease::LeaseStore;
use kinesis_broker::testing::{MemoryStream, Op};
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use kinesis_lease_core::testkit::Outage;
use tokio::time::Instant;

const STREAM: &str = "takeover";
const SHARDS: u32 = 16;
const BROKERS: usize = 3;
/// Records a second over the stream.
const RATE: u64 = 190;
/// What a handler spends on one record, in ms (`TAKEOVER_HANDLER_MS` to change it).
const HANDLER_MS: u64 = 5;

fn handler_cost() -> Duration {
    let ms = std::env::var("TAKEOVER_HANDLER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(HANDLER_MS);
    Duration::from_millis(ms)
}

/// The latency model: what each Kinesis call and each lease-table call takes.
const LATENCY: &[(Op, u64)] = &[
    (Op::ListShards, 40),
    (Op::ShardIterator, 25),
    (Op::GetRecords, 30),
    (Op::PutRecords, 20),
    (Op::SubscribeToShard, 60),
    (Op::Consumers, 40),
];
const TABLE_LATENCY: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Serial,
    Workers,
    ByKey,
    FanOut,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Serial => "serial",
            Mode::Workers => "workers(4)",
            Mode::ByKey => "workers(4).by_key()",
            Mode::FanOut => "fan-out (serial)",
        }
    }
}

/// When each broker's handler first started on each shard, after a mark.
#[derive(Debug, Default)]
struct Handled {
    /// (broker, shard) -> the first time its handler started on a record of the shard.
    first: HashMap<(usize, String), Instant>,
}

/// What one mode measured, per moved shard.
#[derive(Debug, Default)]
struct Moves {
    take_to_first: Vec<Duration>,
    event_to_first: Vec<Duration>,
    unread: usize,
}

/// What one mode measured.
struct Measured {
    crash: Moves,
    hand_over: Moves,
}

fn main() {
    let mut results = BTreeMap::new();
    for mode in [Mode::Serial, Mode::Workers, Mode::ByKey, Mode::FanOut] {
        let runtime = kinesis_bench::paused_runtime();
        let wall = std::time::Instant::now();
        let measured = runtime.block_on(run(mode));
        println!("{}: simulated in {:.1?}", mode.name(), wall.elapsed());
        results.insert(mode, measured);
    }
    report(&results);
}

fn broker(
    mode: Mode,
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    i: usize,
    handled: &Arc<Mutex<Handled>>,
) -> Broker {
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(table)));
    switch.slow(TABLE_LATENCY);
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(format!("b{i}"))
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = match mode {
        Mode::Serial => sub,
        Mode::Workers => sub.workers(4),
        Mode::ByKey => sub.workers(4).by_key(),
        Mode::FanOut => sub.fan_out("takeover-bench"),
    };
    let handled = handled.clone();
    let cost = handler_cost();
    sub.handle(move |d: Delivery| {
        let handled = handled.clone();
        async move {
            handled
                .lock()
                .unwrap()
                .first
                .entry((i, d.shard().to_owned()))
                .or_insert_with(Instant::now);
            tokio::time::sleep(cost).await;
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    broker
}

/// Puts about `RATE` records a second over many keys until dropped.
async fn write(kinesis: MemoryStream) {
    let mut key = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        for _ in 0..RATE / 20 {
            key += 1;
            let _ = kinesis.put(STREAM, &format!("key-{}", key % 500), format!("r{key}"));
        }
    }
}

/// The holder of every row, read straight from the table.
async fn holders(table: &MemoryLeaseTable) -> HashMap<String, Option<String>> {
    let rows = MemoryLeaseStore::over(table)
        .list(STREAM)
        .await
        .expect("list");
    rows.into_iter()
        .map(|r| (r.key.shard().to_owned(), r.owner))
        .collect()
}

/// Watches the shards `moved` (held by `from`) until each has been taken by another broker and
/// that broker's handler has started on one of its records, or `bound` passes. `since` is the
/// crash or the call to `shutdown()`.
async fn watch_moves(
    table: &MemoryLeaseTable,
    handled: &Arc<Mutex<Handled>>,
    moved: &[String],
    from: &str,
    since: Instant,
    bound: Duration,
) -> Moves {
    let mut taken: HashMap<String, (usize, Instant)> = HashMap::new();
    let mut out = Moves::default();
    let mut done: Vec<String> = Vec::new();
    while done.len() < moved.len() && since.elapsed() < bound {
        let rows = holders(table).await;
        let now = Instant::now();
        for shard in moved {
            if taken.contains_key(shard) {
                continue;
            }
            if let Some(Some(owner)) = rows.get(shard) {
                if owner != from {
                    let i: usize = owner[1..].parse().expect("owner b<i>");
                    taken.insert(shard.clone(), (i, now));
                }
            }
        }
        {
            let handled = handled.lock().unwrap();
            for (shard, (i, at)) in &taken {
                if done.contains(shard) {
                    continue;
                }
                if let Some(first) = handled.first.get(&(*i, shard.clone())) {
                    out.take_to_first.push(first.saturating_duration_since(*at));
                    out.event_to_first
                        .push(first.saturating_duration_since(since));
                    done.push(shard.clone());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    out.unread = moved.len() - done.len();
    out
}

/// The shards `broker` holds now.
fn held_shards(broker: &RunningBroker) -> Vec<String> {
    broker
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect()
}

fn held(running: &[Option<RunningBroker>]) -> Vec<usize> {
    running
        .iter()
        .map(|r| r.as_ref().map_or(0, |r| r.stats().shards(STREAM).len()))
        .collect()
}

async fn run(mode: Mode) -> Measured {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, SHARDS).expect("stream");
    for (op, ms) in LATENCY {
        kinesis.set_latency(*op, Duration::from_millis(*ms));
    }
    let table = MemoryLeaseTable::new();
    let handled: Arc<Mutex<Handled>> = Arc::default();
    let writer = tokio::spawn(write(kinesis.clone()));
    let mut running = Vec::new();
    for i in 0..BROKERS {
        let b = broker(mode, &kinesis, &table, i, &handled);
        running.push(Some(b.start().await.expect("start")));
    }
    // Steady state: every shard held and read for a while.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let counts = held(&running);
    assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize, "{counts:?}");

    // A crash of the broker holding the most.
    let victim = (0..BROKERS).max_by_key(|&i| counts[i]).expect("brokers");
    let moved = held_shards(running[victim].as_ref().expect("live"));
    handled.lock().unwrap().first.clear();
    let crashed_at = Instant::now();
    drop(running[victim].take());
    let crash = watch_moves(
        &table,
        &handled,
        &moved,
        &format!("b{victim}"),
        crashed_at,
        Duration::from_secs(60),
    )
    .await;

    // A graceful leave of a survivor, once the fleet is steady again.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let leaver = (0..BROKERS)
        .filter(|&i| running[i].is_some())
        .max_by_key(|&i| held(&running)[i])
        .expect("survivors");
    let leaving = running[leaver].take().expect("live");
    let moved = held_shards(&leaving);
    handled.lock().unwrap().first.clear();
    let left_at = Instant::now();
    let from = format!("b{leaver}");
    let watch = watch_moves(
        &table,
        &handled,
        &moved,
        &from,
        left_at,
        Duration::from_secs(60),
    );
    let (hand_over, _report) = tokio::join!(watch, leaving.shutdown());
    for r in running.into_iter().flatten() {
        r.shutdown().await;
    }
    writer.abort();
    Measured { crash, hand_over }
}

fn quantiles(values: &[Duration]) -> Option<(Duration, Duration)> {
    let mut v = values.to_vec();
    v.sort();
    Some((*v.get(v.len().checked_sub(1)? / 2)?, *v.last()?))
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1_000.0)
}

fn row(name: &str, values: &[Duration], unread: usize, target: &str, bound: Duration) {
    let (value, met) = match quantiles(values) {
        Some((p50, max)) => (
            format!("{} / {} ({} shards)", ms(p50), ms(max), values.len()),
            unread == 0 && max <= bound,
        ),
        None => ("never".to_owned(), false),
    };
    let value = if unread > 0 {
        format!("{value}, {unread} never read")
    } else {
        value
    };
    figure(name, &value, target, Some(met));
}

fn report(results: &BTreeMap<Mode, Measured>) {
    for (mode, m) in results {
        let name = mode.name();
        row(
            &format!("takeover {name}: take -> first record, crash (p50 / max)"),
            &m.crash.take_to_first,
            m.crash.unread,
            "<= 1 s",
            Duration::from_secs(1),
        );
        row(
            &format!("takeover {name}: crash -> first record (p50 / max)"),
            &m.crash.event_to_first,
            m.crash.unread,
            "<= 13 s",
            Duration::from_secs(13),
        );
        row(
            &format!("takeover {name}: take -> first record, hand-over (p50 / max)"),
            &m.hand_over.take_to_first,
            m.hand_over.unread,
            "<= 1 s",
            Duration::from_secs(1),
        );
        row(
            &format!("takeover {name}: shutdown() -> first record elsewhere (p50 / max)"),
            &m.hand_over.event_to_first,
            m.hand_over.unread,
            "<= 2 s",
            Duration::from_secs(2),
        );
    }
}
