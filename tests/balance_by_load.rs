//! Balancing by load across processes on kinesis-local and moto: three `crash-broker` processes
//! with `balance_by_load()` and serial handlers that wait 20 ms a record share one DynamoDB
//! lease table on a 12-shard stream. The first two shards get 10 records a second, the other
//! ten 1 each (30 a second in all, so a process that ends up with both hot shards is offered
//! 2.2x the mean). From 90 s of steady load on, each process handles within 1.25x of the
//! mean; every record is handled, none twice (a move is a graceful hand-over).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use kinesis_broker::testing::hash_key;
use kinesis_broker::{lease::LeaseStore, DynamoLeaseStore};
use kinesis_integ::*;

const SHARDS: i32 = 12;
/// Seconds of steady load; records put from `MEASURED_FROM` on are counted.
const STEADY: usize = 150;
const MEASURED_FROM: usize = 90;
const OWNERS: [&str; 3] = ["p0", "p1", "p2"];

/// Per shard (in the stream's order), a partition key that hashes into it.
async fn keys(client: &aws_sdk_kinesis::Client, stream: &str) -> Vec<String> {
    let out = client
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("list shards");
    let mut ranges: Vec<(u128, u128)> = out
        .shards()
        .iter()
        .map(|s| {
            let range = s.hash_key_range().expect("a hash key range");
            (
                range.starting_hash_key().parse().expect("a number"),
                range.ending_hash_key().parse().expect("a number"),
            )
        })
        .collect();
    ranges.sort_unstable();
    ranges
        .iter()
        .map(|(from, to)| {
            (0..)
                .map(|n| format!("k{n}"))
                .find(|k| (*from..=*to).contains(&hash_key(k)))
                .expect("some key hashes into each shard")
        })
        .collect()
}

/// Max over mean of `counts`.
fn max_over_mean(counts: &[usize]) -> f64 {
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    max / mean.max(f64::MIN_POSITIVE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hot_shards_of_twelve_spread_over_three_processes_by_load() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("by-load");
    create_stream(&client, &stream, SHARDS).await;
    let table = unique_name("by-load-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let keys = keys(&client, &stream).await;
    let dir = std::env::temp_dir().join(unique_name("kinesis-by-load"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut children = Reaper(HashMap::new());
    for owner in OWNERS {
        let child = spawn_crash_broker(
            env!("CARGO_BIN_EXE_crash-broker"),
            [&account, &table, &stream],
            &dir,
            owner,
            &[("BROKER_BY_LOAD", "1"), ("BROKER_HANDLER_MS", "20")],
        );
        children.0.insert(owner, child);
    }
    // Steady load begins once every shard is held.
    let started = Instant::now();
    loop {
        let rows = store.list(&stream).await.unwrap();
        let held = rows.iter().filter(|r| r.token.is_some()).count();
        if held == SHARDS as usize {
            eprintln!("every shard held after {:.1?}", started.elapsed());
            break;
        }
        assert!(
            started.elapsed() < patience(Duration::from_secs(60)),
            "{held} of {SHARDS} shards held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Per second of steady load, the first record index put in it.
    let mut second_starts = Vec::new();
    let mut next = 0usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..STEADY {
        tick.tick().await;
        second_starts.push(next);
        let mut entries = Vec::new();
        for (shard, key) in keys.iter().enumerate() {
            for _ in 0..if shard < 2 { 10 } else { 1 } {
                entries.push(
                    PutRecordsRequestEntry::builder()
                        .partition_key(key)
                        .data(Blob::new(format!("{key}#{next}")))
                        .build()
                        .expect("an entry"),
                );
                next += 1;
            }
        }
        let out = client
            .put_records()
            .stream_name(&stream)
            .set_records(Some(entries))
            .send()
            .await
            .expect("put records");
        assert_eq!(out.failed_record_count(), Some(0), "records refused");
    }
    second_starts.push(next);
    let records = next;
    // Every record handled.
    wait_all_handled(&dir, &OWNERS, records, Duration::from_secs(60)).await;
    let rows = store.list(&stream).await.unwrap();
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in &rows {
        if let Some(owner) = &row.owner {
            let shard = row.key.shard().to_owned();
            held.entry(owner.clone()).or_default().push(shard);
        }
    }
    eprintln!("held at the end: {held:?}");
    // Graceful stop (SIGTERM).
    children.stop_all();
    // Who handled each record.
    let mut by: HashMap<usize, Vec<usize>> = HashMap::new();
    for (who, owner) in OWNERS.iter().enumerate() {
        for line in read_log(&dir.join(owner)) {
            by.entry(line.3).or_default().push(who);
        }
    }
    let twice = by.values().filter(|w| w.len() > 1).count();
    let moves: usize = OWNERS
        .iter()
        .map(|o| {
            std::fs::read_to_string(dir.join(format!("{o}.log")))
                .unwrap_or_default()
                .matches("giving a shard to balance load")
                .count()
        })
        .sum();
    let counts_between = |from: usize, to: usize| {
        let mut counts = vec![0usize; OWNERS.len()];
        for record in second_starts[from]..second_starts[to] {
            counts[by[&record][0]] += 1;
        }
        counts
    };
    let measured = counts_between(MEASURED_FROM, STEADY);
    let windows: Vec<f64> = (0..STEADY / 10)
        .map(|w| max_over_mean(&counts_between(w * 10, w * 10 + 10)))
        .collect();
    let balanced_from = (0..windows.len())
        .find(|&w| windows[w..].iter().all(|r| *r <= 1.25))
        .map(|w| w * 10);
    eprintln!(
        "records {records}, handled twice {twice}, moves {moves}; handled per process from {MEASURED_FROM} s: \
         {measured:?} (max/mean {:.2}); per 10 s window: {:?}; within 1.25x from {balanced_from:?} s",
        max_over_mean(&measured),
        windows
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        twice, 0,
        "records handled twice: moves are graceful hand-overs"
    );
    assert!(
        max_over_mean(&measured) <= 1.25,
        "handled per process from {MEASURED_FROM} s of steady load: {measured:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
