//! Figure 9: the lease table's cost at fleet scale. N brokers share one stream of S shards of a
//! `MemoryStream`, their stores billed as DynamoDB would bill `DynamoLeaseStore`'s requests
//! (`kinesis_lease_dynamo::Billed`), on tokio's paused clock (simulated time, so 60 s of a
//! large fleet take seconds). Per fleet: how soon a simultaneous start is fair, 60 s of steady
//! state (read and write units per second, for the fleet and per instance, and the largest
//! item), then one crash (takeover time) and one graceful leave (hand-over time).
//!
//! `cargo xtask bench fleet_cost`; `FLEET_SIZES=100x10,1000x10` picks the fleets
//! (shards x instances); `FLEET_QUIET=both` runs each fleet without and with quiet idle shards
//! (`quiet_idle_shards()`) side by side, `FLEET_QUIET=on` with it only. The stream is idle
//! (nothing put), the case the option is for.

use std::sync::Arc;
use std::time::Duration;

use kinesis_bench::figure;
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use kinesis_lease_dynamo::{Bill, Billed};
use tokio::time::Instant;

const STREAM: &str = "fleet";
const STEADY: Duration = Duration::from_secs(60);

/// What one fleet measured.
struct Fleet {
    quiet: bool,
    shards: u32,
    instances: usize,
    fair_after: Option<Duration>,
    steady: Bill,
    largest_index: usize,
    takeover: Option<Duration>,
    hand_over: Option<Duration>,
    /// How long the leaving instance's `shutdown()` took.
    exited: Option<Duration>,
}

fn main() {
    let sizes: Vec<(u32, usize)> = std::env::var("FLEET_SIZES")
        .unwrap_or_else(|_| "100x10,1000x10,1000x50".to_owned())
        .split(',')
        .filter_map(|pair| {
            let (s, n) = pair.split_once('x')?;
            Some((s.trim().parse().ok()?, n.trim().parse().ok()?))
        })
        .collect();
    let modes: &[bool] = match std::env::var("FLEET_QUIET").as_deref() {
        Ok("both") => &[false, true],
        Ok("on" | "1") => &[true],
        _ => &[false],
    };
    let mut fleets = Vec::new();
    for (shards, instances) in sizes {
        for &quiet in modes {
            let runtime = kinesis_bench::paused_runtime();
            let wall = std::time::Instant::now();
            let fleet = runtime.block_on(run(shards, instances, quiet));
            println!(
                "{shards} shards x {instances} instances{}: simulated in {:.1?}",
                if quiet { ", quiet" } else { "" },
                wall.elapsed()
            );
            fleets.push(fleet);
        }
    }
    report(&fleets);
}

fn broker(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    billed: &Billed,
    i: usize,
    quiet: bool,
) -> Broker {
    let store = billed.wrap(Arc::new(MemoryLeaseStore::over(table)));
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(format!("i{i:03}"))
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = if quiet { sub.quiet_idle_shards() } else { sub };
    sub.handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker
}

fn held(running: &[Option<RunningBroker>]) -> Vec<usize> {
    running
        .iter()
        .flatten()
        .map(|r| r.stats().shards(STREAM).len())
        .collect()
}

/// Waits until every live instance holds within one of the fair share and the held counts add
/// up to the shard count; `None` if that takes longer than `bound`.
async fn until_fair(
    running: &[Option<RunningBroker>],
    shards: u32,
    bound: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    loop {
        let counts = held(running);
        let total: usize = counts.iter().sum();
        let share = (shards as usize).div_ceil(counts.len().max(1));
        let fair = counts.iter().all(|&c| c + 1 >= share && c <= share);
        if total == shards as usize && fair {
            return Some(started.elapsed());
        }
        if started.elapsed() > bound {
            println!("  not fair after {bound:?}: {counts:?}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every shard is held again; `None` after `bound`.
async fn until_all_held(
    running: &[Option<RunningBroker>],
    shards: u32,
    bound: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while held(running).iter().sum::<usize>() < shards as usize {
        if started.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(started.elapsed())
}

fn minus(a: Bill, b: Bill) -> Bill {
    let mut d = a;
    d.read_units -= b.read_units;
    d.write_units -= b.write_units;
    d.items_read -= b.items_read;
    d.read_requests -= b.read_requests;
    d.write_requests -= b.write_requests;
    d
}

async fn run(shards: u32, instances: usize, quiet: bool) -> Fleet {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, shards).expect("stream");
    let table = MemoryLeaseTable::new();
    let billed = Billed::new();
    // All together, as a deploy of a new service starts them.
    let mut running = Vec::new();
    for i in 0..instances {
        running.push(Some(
            broker(&kinesis, &table, &billed, i, quiet)
                .start()
                .await
                .expect("start"),
        ));
    }
    let fair_after = until_fair(&running, shards, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = billed.bill();
    tokio::time::sleep(STEADY).await;
    let steady = minus(billed.bill(), before);
    let largest_index = billed.index_size(STREAM);
    // One crash: its leases lapse and the others take them.
    drop(running[0].take());
    let takeover = until_all_held(&running, shards, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    // One graceful leave: its shards are released and taken at once. Timed from the call to
    // `shutdown()`, so the time its shards went unread is all in; and, apart, how long the
    // leaving process takes to return from `shutdown()` (it hands its ring watch on after it
    // released everything).
    let leaving = running[1].take().expect("live");
    let left_at = Instant::now();
    let exit = tokio::spawn(async move {
        leaving.shutdown().await;
        left_at.elapsed()
    });
    let hand_over = until_all_held(&running, shards, Duration::from_secs(60))
        .await
        .map(|_| left_at.elapsed());
    let exited = exit.await.ok();
    for r in running.into_iter().flatten() {
        r.shutdown().await;
    }
    Fleet {
        quiet,
        shards,
        instances,
        fair_after,
        steady,
        largest_index,
        takeover,
        hand_over,
        exited,
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

fn report(fleets: &[Fleet]) {
    println!(
        "{:>6} {:>7} {:>9} {:>10} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "quiet",
        "shards",
        "instances",
        "fair",
        "RCU/s",
        "RCU/s/inst",
        "WCU/s",
        "items/min/i",
        "largest",
        "index",
        "takeover",
        "hand-over",
        "exit"
    );
    let per_sec = STEADY.as_secs_f64();
    for f in fleets {
        let rcu = f.steady.read_units / per_sec;
        let wcu = f.steady.write_units / per_sec;
        let per_instance = rcu / f.instances as f64;
        let items = f.steady.items_read as f64 / f.instances as f64 / (per_sec / 60.0);
        println!(
            "{:>6} {:>7} {:>9} {:>10} {:>10.1} {:>12.2} {:>10.1} {:>12.0} {:>9} {:>9} {:>9} {:>9} {:>9}",
            if f.quiet { "on" } else { "off" },
            f.shards,
            f.instances,
            secs(f.fair_after),
            rcu,
            per_instance,
            wcu,
            items,
            f.steady.largest_item,
            f.largest_index,
            secs(f.takeover),
            secs(f.hand_over),
            secs(f.exited)
        );
        let name = format!(
            "fleet {}x{}{}",
            f.shards,
            f.instances,
            if f.quiet { " quiet" } else { "" }
        );
        figure(
            &format!("{name}: reads per instance"),
            &format!("{per_instance:.2} RCU/s ({items:.0} items/min)"),
            "flat in shards",
            None,
        );
        figure(
            &format!("{name}: fleet reads"),
            &format!("{rcu:.1} RCU/s"),
            "<= 50 RCU/s at 10,000 x 100",
            None,
        );
        figure(
            &format!("{name}: fleet writes"),
            &format!(
                "{wcu:.1} WCU/s ({:.2} per shard per renew interval)",
                wcu * 3.0 / f.shards as f64
            ),
            "1 per held shard per renewal + O(instances)",
            None,
        );
        figure(
            &format!("{name}: simultaneous start fair"),
            &secs(f.fair_after),
            "<= 3 s",
            Some(f.fair_after.is_some_and(|d| d <= Duration::from_secs(3))),
        );
        figure(
            &format!("{name}: crash takeover"),
            &secs(f.takeover),
            "<= 13 s",
            Some(f.takeover.is_some_and(|d| d <= Duration::from_secs(13))),
        );
        figure(
            &format!("{name}: graceful leave"),
            &secs(f.hand_over),
            "<= 1 s (next take round)",
            Some(
                f.hand_over
                    .is_some_and(|d| d <= Duration::from_millis(1_100)),
            ),
        );
        figure(
            &format!("{name}: graceful leave, shutdown() returned"),
            &secs(f.exited),
            "-",
            None,
        );
    }
    // Reads per instance against shards: flat means independent of the stream's size.
    if let (Some(small), Some(big)) = (
        fleets
            .iter()
            .find(|f| !f.quiet && f.instances == 10 && f.shards == 100),
        fleets
            .iter()
            .find(|f| !f.quiet && f.instances == 10 && f.shards == 1_000),
    ) {
        let ratio = (big.steady.read_units / big.instances as f64)
            / (small.steady.read_units / small.instances as f64);
        figure(
            "fleet: reads per instance, 1,000 / 100 shards",
            &format!("{ratio:.2}x"),
            "~1x (flat)",
            Some(ratio < 1.5),
        );
    }
    // Idle writes with quiet idle shards against without, per fleet run both ways.
    for quiet in fleets.iter().filter(|f| f.quiet) {
        let Some(renewing) = fleets
            .iter()
            .find(|f| !f.quiet && f.shards == quiet.shards && f.instances == quiet.instances)
        else {
            continue;
        };
        let ratio = quiet.steady.write_units / renewing.steady.write_units.max(f64::MIN_POSITIVE);
        figure(
            &format!(
                "fleet {}x{}: idle writes, quiet / renewing",
                quiet.shards, quiet.instances
            ),
            &format!(
                "{:.1} / {:.1} WCU/s = {ratio:.3}x",
                quiet.steady.write_units / STEADY.as_secs_f64(),
                renewing.steady.write_units / STEADY.as_secs_f64()
            ),
            "<= 0.1x",
            Some(ratio <= 0.1),
        );
    }
}
