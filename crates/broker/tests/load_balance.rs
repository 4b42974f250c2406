//! Balancing by load (`balance_by_load()`): three instances share 12 shards, two of them hot
//! (10 records a second against 1), handlers that wait 20 ms a record, serial. By count the
//! two hot shards sit side by side in one instance's stretch; by load each hot shard ends on an
//! instance of its own and the cold ones on the third, every record handled exactly once.
//! Paused time, a `MemoryStream`, one `MemoryLeaseTable`, default timings and start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::{hash_key, MemoryStream};
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use tokio::time::sleep;

const STREAM: &str = "s";
const SHARDS: u32 = 12;
const COST: Duration = Duration::from_millis(20);

/// Who handled each record (by payload), and how many times.
type Handled = Arc<Mutex<HashMap<u64, Vec<usize>>>>;

/// A partition key of shard `i` of the stream's 12 even shards.
fn key_of(i: u32) -> String {
    let step = u128::MAX / u128::from(SHARDS) + 1;
    (0..)
        .map(|n| format!("k{n}"))
        .find(|k| hash_key(k) / step == u128::from(i))
        .expect("some key hashes into each shard")
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    who: usize,
    by_load: bool,
    handled: &Handled,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(format!("instance-{who}"))
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = if by_load { sub.balance_by_load() } else { sub };
    let handled = handled.clone();
    sub.handle(move |d: Delivery| {
        let handled = handled.clone();
        async move {
            sleep(COST).await;
            let id: u64 = std::str::from_utf8(d.payload()).unwrap().parse().unwrap();
            handled.lock().unwrap().entry(id).or_default().push(who);
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    broker.start().await.expect("start")
}

/// A stream of `shards` shards, a lease table, and one instance started on them per entry of
/// `by_load` (with the option or without it), as `instance-0`, `instance-1`, ...
async fn fleet(
    shards: u32,
    by_load: &[bool],
) -> (MemoryStream, MemoryLeaseTable, Handled, Vec<RunningBroker>) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, shards).expect("stream");
    let table = MemoryLeaseTable::new();
    let handled = Handled::default();
    let mut fleet = Vec::new();
    for (who, by_load) in by_load.iter().enumerate() {
        fleet.push(start(&kinesis, &table, who, *by_load, &handled).await);
    }
    (kinesis, table, handled, fleet)
}

/// Runs the fleet for `secs` of steady load; returns the records each instance handled in the
/// last `last` seconds, and the handled map.
async fn run(by_load: bool, secs: u64, last: u64) -> (Vec<usize>, Handled) {
    let (kinesis, _table, handled, fleet) = fleet(SHARDS, &[by_load; 3]).await;
    // Past the shared start and the pinned `LATEST` start.
    sleep(Duration::from_secs(5)).await;
    let keys: Vec<String> = (0..SHARDS).map(key_of).collect();
    let mut id = 0u64;
    let mut counted_from = None;
    for second in 0..secs {
        if second == secs - last {
            counted_from = Some(id);
        }
        for (shard, key) in keys.iter().enumerate() {
            // Shards 0 and 1 hot: 10 records a second; the others 1.
            for _ in 0..if shard < 2 { 10 } else { 1 } {
                kinesis.put(STREAM, key, id.to_string()).expect("put");
                id += 1;
            }
        }
        sleep(Duration::from_secs(1)).await;
    }
    // Let what was put settle, then stop.
    sleep(Duration::from_secs(10)).await;
    for running in fleet {
        running.shutdown().await;
    }
    let from = counted_from.expect("a last window");
    let mut per_instance = vec![0; 3];
    {
        let handled = handled.lock().unwrap();
        assert_eq!(handled.len() as u64, id, "every record handled");
        for (record, by) in handled.iter() {
            if *record >= from {
                per_instance[by[0]] += 1;
            }
        }
    }
    (per_instance, handled)
}

/// The first second of steady load from which every 10 s window's records (by when they were
/// put: 30 a second) were handled within 1.25x of the mean per instance.
fn converged_after(handled: &Handled, secs: u64) -> Option<u64> {
    let handled = handled.lock().unwrap();
    let window_ok = |from: u64| {
        let mut counts = vec![0; 3];
        for id in from * 30..(from + 10) * 30 {
            counts[handled[&id][0]] += 1;
        }
        max_over_mean(&counts) <= 1.25
    };
    let windows: Vec<bool> = (0..secs / 10).map(|w| window_ok(w * 10)).collect();
    (0..windows.len())
        .find(|&w| windows[w..].iter().all(|ok| *ok))
        .map(|w| w as u64 * 10)
}

fn max_over_mean(counts: &[usize]) -> f64 {
    let max = *counts.iter().max().unwrap() as f64;
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    max / mean
}

#[tokio::test(start_paused = true)]
async fn two_hot_shards_end_on_instances_of_their_own_and_nothing_is_handled_twice() {
    for seed in [1, 2, 3] {
        // The members each instance compares itself with, and when, come from `fastrand`:
        // seeded, a failure replays.
        fastrand::seed(seed);
        two_hot_shards(seed).await;
    }
}

async fn two_hot_shards(seed: u64) {
    let (by_count, _) = run(false, 360, 120).await;
    let (by_load, handled) = run(true, 360, 120).await;
    let twice = handled
        .lock()
        .unwrap()
        .values()
        .filter(|by| by.len() > 1)
        .count();
    let converged = converged_after(&handled, 360);
    eprintln!(
        "seed {seed}: records handled per instance in the last two minutes: by count \
         {by_count:?}, by load {by_load:?}; by load balanced from {converged:?} s of steady load"
    );
    assert_eq!(
        twice, 0,
        "records handled twice: moves are graceful hand-overs"
    );
    // By count, one instance holds both hot shards: 22 of 34 records a second, 2.2x the mean.
    assert!(
        max_over_mean(&by_count) > 1.5,
        "by count the hot shards were expected side by side: {by_count:?}"
    );
    // By load: after four minutes, each instance handles about a third.
    assert!(
        max_over_mean(&by_load) <= 1.25,
        "by load, the last two minutes per instance: {by_load:?} (by count {by_count:?})"
    );
    assert!(
        converged.is_some_and(|at| at <= 150),
        "by load, balanced from {converged:?} s (loads are known a minute after the takes)"
    );
}

fn sorted(mut counts: Vec<usize>) -> Vec<usize> {
    counts.sort_unstable();
    counts
}

/// The shards each instance holds now.
fn counts(fleet: &[RunningBroker]) -> Vec<usize> {
    fleet
        .iter()
        .map(|r| r.stats().shards(STREAM).len())
        .collect()
}

/// On an idle stream every shard weighs alike: instances share by count, a newcomer gets its
/// share from the others (nobody asks by count under this option: the heavier give), and
/// once shared nothing moves, though 14 shards leave counts one apart (a planner without
/// hysteresis trades a shard back and forth between them).
#[tokio::test(start_paused = true)]
async fn on_an_idle_stream_shares_come_out_as_by_count_and_then_stay() {
    fastrand::seed(4);
    let (kinesis, table, handled, mut fleet) = fleet(14, &[true; 3]).await;
    sleep(Duration::from_secs(30)).await;
    assert_eq!(
        sorted(counts(&fleet)),
        [4, 5, 5],
        "a shared start, by count"
    );
    fleet.push(start(&kinesis, &table, 3, true, &handled).await);
    // Shards taken at the start may move a minute after their take; the others compare
    // themselves with the newcomer every 10 s or so.
    let mut joined_after = None;
    for second in 0..180 {
        sleep(Duration::from_secs(1)).await;
        if sorted(counts(&fleet)) == [3, 3, 4, 4] {
            joined_after = Some(second);
            break;
        }
    }
    let joined_after =
        joined_after.unwrap_or_else(|| panic!("newcomer not served: {:?}", counts(&fleet)));
    let settled: Vec<Vec<String>> = fleet
        .iter()
        .map(|r| {
            r.stats()
                .shards(STREAM)
                .iter()
                .map(|s| s.shard.clone())
                .collect()
        })
        .collect();
    sleep(Duration::from_secs(600)).await;
    let after: Vec<Vec<String>> = fleet
        .iter()
        .map(|r| {
            r.stats()
                .shards(STREAM)
                .iter()
                .map(|s| s.shard.clone())
                .collect()
        })
        .collect();
    eprintln!("the newcomer had its share {joined_after} s after it started");
    assert_eq!(settled, after, "nothing moves once shared");
    for running in fleet {
        running.shutdown().await;
    }
}

/// Turning the option on one instance at a time: the first to restart with it finds the others
/// holding every shard and giving nothing (they balance by count and never give). Holding
/// nothing, it asks by count as without the option, and is not left empty.
#[tokio::test(start_paused = true)]
async fn the_first_instance_with_the_option_among_others_without_it_is_not_left_empty() {
    fastrand::seed(5);
    let (kinesis, table, handled, mut fleet) = fleet(SHARDS, &[false; 3]).await;
    sleep(Duration::from_secs(30)).await;
    assert_eq!(counts(&fleet), [4, 4, 4]);
    fleet.push(start(&kinesis, &table, 3, true, &handled).await);
    sleep(Duration::from_secs(60)).await;
    assert!(
        counts(&fleet)[3] >= 1,
        "the instance with the option holds nothing: {:?}",
        counts(&fleet)
    );
    for running in fleet {
        running.shutdown().await;
    }
}
