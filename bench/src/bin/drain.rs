//! Figure 2: end-to-end drain on kinesis-local. A 4-shard stream pre-filled with 20,000
//! records of 512 bytes over 50 keys is read to the end by (a) our broker with the memory lease
//! store, (b) our broker with the DynamoDB lease store on moto, (c) a raw `aws-sdk-kinesis`
//! GetRecords loop over the same shards with no leases and no checkpoints, all with 1,000
//! records per GetRecords call. Also the longest gap between two renewals of one lease, during
//! (a) and (b) and during a run whose handlers hold the channel full.
//!
//! Then CPU per 1,000 records: this process's CPU time (user + system, every thread, the SDK's
//! own included) while draining the same stream by the raw loop, by the broker serially and
//! by the broker in `workers(4).by_key()`, with the memory store, in 3 rounds (or
//! `DRAIN_CPU_ROUNDS`) each taking the three in turn; the medians, and each broker mode's ratio
//! to the raw loop. Each broker run also prints its CPU until the first record was handled.
//!
//! Needs `AWS_ENDPOINT_URL_KINESIS` and `AWS_ENDPOINT_URL_DYNAMODB` (`cargo xtask bench`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::ShardIteratorType;
use kinesis_bench::{cpu_time_precise as cpu_time, figure, rate, RenewalGaps};
use kinesis_broker::{
    lease::LeaseStore, Broker, Delivery, DynamoLeaseStore, MemoryLeaseStore, MemoryLeaseTable,
    StartAt,
};
use kinesis_integ::{
    create_stream, kinesis_client, put_records_sized, unique_account, unique_name,
};

const RECORDS: usize = 20_000;
const LIMIT: usize = 1_000;

async fn raw(client: &aws_sdk_kinesis::Client, stream: &str) -> Duration {
    let shards = kinesis_integ::shard_ids(client, stream).await;
    let total = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for shard in shards {
        let (client, stream, total) = (client.clone(), stream.to_owned(), total.clone());
        tasks.push(tokio::spawn(async move {
            let mut iterator = client
                .get_shard_iterator()
                .stream_name(&stream)
                .shard_id(shard.shard_id())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("iterator")
                .shard_iterator
                .expect("iterator");
            loop {
                let out = client
                    .get_records()
                    .shard_iterator(&iterator)
                    .limit(LIMIT as i32)
                    .send()
                    .await
                    .expect("get records");
                for r in out.records() {
                    std::hint::black_box(r.data().as_ref().len());
                }
                total.fetch_add(out.records().len(), Ordering::SeqCst);
                if out.records().is_empty() && out.millis_behind_latest() == Some(0) {
                    return;
                }
                iterator = out.next_shard_iterator.expect("open shard");
            }
        }));
    }
    for t in tasks {
        t.await.expect("reader");
    }
    assert_eq!(total.load(Ordering::SeqCst), RECORDS);
    started.elapsed()
}

/// Runs a broker over `store` until it handled every record; returns the time and the longest
/// renewal gap `watcher` saw.
async fn broker_run(
    config: &aws_config::SdkConfig,
    stream: &str,
    store: Arc<dyn LeaseStore>,
    watcher: Arc<dyn LeaseStore>,
    handler_delay: Option<Duration>,
    run_for: Option<Duration>,
) -> (Duration, usize, Duration) {
    let handled = Arc::new(AtomicUsize::new(0));
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store_arc(store)
        .build()
        .expect("broker");
    let h = handled.clone();
    broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .records_per_call(LIMIT)
        .workers(4)
        .handle(move |d: Delivery| {
            let h = h.clone();
            async move {
                std::hint::black_box(d.payload().len());
                if let Some(delay) = handler_delay {
                    tokio::time::sleep(delay).await;
                }
                h.fetch_add(1, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .expect("subscribe");
    let gaps = RenewalGaps::watch(watcher, stream);
    let started = Instant::now();
    let running = broker.start().await.expect("start");
    loop {
        let done = handled.load(Ordering::SeqCst);
        if done >= RECORDS || run_for.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "drain stalled at {done}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    let done = handled.load(Ordering::SeqCst);
    running.shutdown().await;
    (took, done, gaps.finish().await)
}

/// How the broker of a CPU run takes its records.
#[derive(Debug, Clone, Copy)]
enum CpuMode {
    Serial,
    ByKey,
}

/// Drains the stream with a broker in `mode` (memory store, nothing else running): the
/// process's CPU time it took.
async fn broker_cpu(config: &aws_config::SdkConfig, stream: &str, mode: CpuMode) -> Duration {
    let handled = Arc::new(AtomicUsize::new(0));
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store(MemoryLeaseStore::new())
        .build()
        .expect("broker");
    let sub = broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .records_per_call(LIMIT);
    let sub = match mode {
        CpuMode::Serial => sub,
        CpuMode::ByKey => sub.workers(4).by_key(),
    };
    let h = handled.clone();
    let done = Arc::new(tokio::sync::Notify::new());
    let d2 = done.clone();
    // The process's CPU time when the first record was handled: what starting took.
    let first = Arc::new(std::sync::OnceLock::new());
    let f2 = first.clone();
    sub.handle(move |d: Delivery| {
        let (h, done, first) = (h.clone(), d2.clone(), f2.clone());
        async move {
            std::hint::black_box(d.payload().len());
            let n = h.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                let _ = first.set(cpu_time());
            }
            if n + 1 == RECORDS {
                done.notify_one();
            }
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    let (cpu, wall) = (cpu_time(), Instant::now());
    let running = broker.start().await.expect("start");
    tokio::time::timeout(Duration::from_secs(300), done.notified())
        .await
        .expect("drain stalled");
    let used = cpu_time().saturating_sub(cpu);
    let starting = first
        .get()
        .map_or(Duration::ZERO, |f| f.saturating_sub(cpu));
    println!(
        "  broker {mode:?}: {:.1} ms CPU to the first record, {:.1} ms CPU in all, {:.0} ms wall",
        starting.as_secs_f64() * 1e3,
        used.as_secs_f64() * 1e3,
        wall.elapsed().as_secs_f64() * 1e3
    );
    running.shutdown().await;
    used
}

/// The raw loop's CPU time for one drain.
async fn raw_cpu(client: &aws_sdk_kinesis::Client, stream: &str) -> Duration {
    let cpu = cpu_time();
    let wall = raw(client, stream).await;
    let used = cpu_time().saturating_sub(cpu);
    println!(
        "  raw loop: {:.1} ms CPU, {:.0} ms wall",
        used.as_secs_f64() * 1e3,
        wall.as_secs_f64() * 1e3
    );
    used
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// CPU per 1,000 records, in ms.
fn per_thousand(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0 * 1_000.0 / RECORDS as f64
}

async fn cpu_figures(
    config: &aws_config::SdkConfig,
    client: &aws_sdk_kinesis::Client,
    stream: &str,
) {
    let (mut raw_runs, mut serial, mut by_key) = (Vec::new(), Vec::new(), Vec::new());
    // `DRAIN_CPU_ROUNDS` gives more rounds (for a profile of many).
    let rounds = std::env::var("DRAIN_CPU_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for round in 0..rounds {
        raw_runs.push(raw_cpu(client, stream).await);
        serial.push(broker_cpu(config, stream, CpuMode::Serial).await);
        by_key.push(broker_cpu(config, stream, CpuMode::ByKey).await);
        println!(
            "cpu round {round}: raw {:.2} ms, serial {:.2} ms, by_key {:.2} ms per 1,000 records",
            per_thousand(raw_runs[round]),
            per_thousand(serial[round]),
            per_thousand(by_key[round])
        );
    }
    let raw = per_thousand(median(raw_runs));
    figure(
        "drain CPU: raw GetRecords loop",
        &format!("{raw:.2} ms / 1,000 records"),
        "baseline",
        None,
    );
    for (name, runs) in [("serial", serial), ("workers(4).by_key()", by_key)] {
        let ms = per_thousand(median(runs));
        figure(
            &format!("drain CPU: broker {name}"),
            &format!("{ms:.2} ms / 1,000 records = {:.2}x raw", ms / raw),
            "<= 1.15x raw",
            Some(ms / raw <= 1.15),
        );
    }
}

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        let (config, client) = kinesis_client(&unique_account()).await;
        let stream = unique_name("drain");
        create_stream(&client, &stream, 4).await;
        let filling = Instant::now();
        put_records_sized(&client, &stream, 50, 0, RECORDS, 512).await;
        println!("filled {RECORDS} records of 512 bytes in {:.1?}", filling.elapsed());

        if std::env::var_os("DRAIN_CPU_ONLY").is_some() {
            cpu_figures(&config, &client, &stream).await;
            return;
        }
        let c = raw(&client, &stream).await;
        println!("(c) raw GetRecords loop: {c:.2?}, {:.0} records/s", rate(RECORDS, c));

        let table = MemoryLeaseTable::new();
        let (a, _, gap_a) = broker_run(
            &config,
            &stream,
            Arc::new(MemoryLeaseStore::over(&table)),
            Arc::new(MemoryLeaseStore::over(&table)),
            None,
            None,
        )
        .await;
        println!("(a) broker + memory store: {a:.2?}, {:.0} records/s; longest renewal gap {gap_a:.2?}", rate(RECORDS, a));

        let dynamo_table = unique_name("drain-leases");
        let store = DynamoLeaseStore::new(&config, &dynamo_table);
        store.ensure_table().await.expect("table");
        let (b, _, gap_b) = broker_run(
            &config,
            &stream,
            Arc::new(store),
            Arc::new(DynamoLeaseStore::new(&config, &dynamo_table)),
            None,
            None,
        )
        .await;
        println!("(b) broker + DynamoDB store: {b:.2?}, {:.0} records/s; longest renewal gap {gap_b:.2?}", rate(RECORDS, b));

        // Handlers slower than the stream: the channel stays full for the whole run.
        let full_table = MemoryLeaseTable::new();
        let (_, handled, gap_full) = broker_run(
            &config,
            &stream,
            Arc::new(MemoryLeaseStore::over(&full_table)),
            Arc::new(MemoryLeaseStore::over(&full_table)),
            Some(Duration::from_millis(20)),
            Some(Duration::from_secs(15)),
        )
        .await;
        println!("full channel for 15 s ({handled} handled): longest renewal gap {gap_full:.2?}");

        let ac = c.as_secs_f64() / a.as_secs_f64();
        let ba = a.as_secs_f64() / b.as_secs_f64();
        figure("drain: (c) raw GetRecords loop", &format!("{:.0} rec/s", rate(RECORDS, c)), "baseline", None);
        figure("drain: (a) broker + memory store", &format!("{:.0} rec/s = {ac:.2}x (c)", rate(RECORDS, a)), ">= 0.9x (c)", Some(ac >= 0.9));
        figure("drain: (b) broker + DynamoDB store", &format!("{:.0} rec/s = {ba:.2}x (a)", rate(RECORDS, b)), ">= 0.95x (a)", Some(ba >= 0.95));
        let gap = gap_a.max(gap_b).max(gap_full);
        cpu_figures(&config, &client, &stream).await;
        figure("drain: longest renewal gap", &format!("{:.2} s (full channel {:.2} s)", gap.as_secs_f64(), gap_full.as_secs_f64()), "< 4 s", Some(gap < Duration::from_secs(4)));
    });
}
