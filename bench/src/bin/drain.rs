//! Figure 2: end-to-end drain on kinesis-local. A 4-shard stream pre-filled with 20,000
//! records of 512 bytes over 50 keys is read to the end by (a) our broker with the memory lease
//! store, (b) our broker with the DynamoDB lease store on moto, (c) a raw `aws-sdk-kinesis`
//! GetRecords loop over the same shards with no leases and no checkpoints, all with 1,000
//! records per GetRecords call and at most 5 calls a second per shard (Kinesis's limit). Also the longest gap between two renewals of one lease, during
//! (a) and (b) and during a run whose handlers hold the channel full.
//!
//! Then CPU per 1,000 records: this process's CPU time (user + system, every thread, the SDK's
//! own included) while draining the same stream by the raw loop, by the broker serially and
//! by the broker in `workers(4).by_key()`, with the memory store, in 3 rounds (or
//! `DRAIN_CPU_ROUNDS`) each taking the three in turn; the medians, and each broker mode's ratio
//! to the raw loop. Each broker run also prints its CPU until the first record was handled.
//!
//! The CPU comparison held to its target runs on `canned_kinesis` (this package), a Kinesis
//! endpoint whose answers cost the same every time; the same comparison on kinesis-local follows
//! it. `DRAIN_CPU_ONLY=1` runs only the CPU comparisons, `DRAIN_CPU_ONLY=canned` only the
//! canned one (no emulator needed).
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
    raw_from(client, stream, None).await
}

/// The raw loop; `first`, when given, gets the process's CPU time when the first page with
/// records arrived.
async fn raw_from(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    first: Option<Arc<std::sync::OnceLock<(Duration, Instant)>>>,
) -> Duration {
    let shards = kinesis_integ::shard_ids(client, stream).await;
    let total = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for shard in shards {
        let (client, stream, total) = (client.clone(), stream.to_owned(), total.clone());
        let first = first.clone();
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
            // At most 5 GetRecords a second per shard, the limit Kinesis sets (and the broker's
            // default `max_reads_per_second`): a loop that asked faster would be throttled.
            let mut next_call = tokio::time::Instant::now();
            loop {
                tokio::time::sleep_until(next_call).await;
                next_call = tokio::time::Instant::now() + Duration::from_millis(200);
                let out = client
                    .get_records()
                    .shard_iterator(&iterator)
                    .limit(LIMIT as i32)
                    .send()
                    .await
                    .expect("get records");
                if let (Some(first), false) = (&first, out.records().is_empty()) {
                    let _ = first.set((cpu_time(), Instant::now()));
                }
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
async fn broker_cpu(config: &aws_config::SdkConfig, stream: &str, mode: CpuMode) -> CpuRun {
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
                let _ = first.set((cpu_time(), Instant::now()));
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
    let run = CpuRun::measured(cpu, wall, first.get().copied());
    run.print(&format!("broker {mode:?}"));
    running.shutdown().await;
    run
}

/// The raw loop's CPU time for one drain: like the broker, it starts by making its client
/// from the configuration (its connector and TLS set-up are part of starting either).
async fn raw_cpu(config: &aws_config::SdkConfig, stream: &str) -> CpuRun {
    let first = Arc::new(std::sync::OnceLock::new());
    let (cpu, wall) = (cpu_time(), Instant::now());
    let client = aws_sdk_kinesis::Client::new(config);
    raw_from(&client, stream, Some(first.clone())).await;
    let run = CpuRun::measured(cpu, wall, first.get().copied());
    run.print("raw loop");
    run
}

/// One drain's CPU: in all, and from its first record (the first page, for the raw loop) to
/// its last: the part that grows with the records, without the start (clients, leases,
/// iterators) that a longer drain spreads thinner.
#[derive(Debug, Clone, Copy)]
struct CpuRun {
    total: Duration,
    after_first: Duration,
    wall: Duration,
    wall_to_first: Duration,
}

impl CpuRun {
    /// The run that began at process CPU `cpu` and instant `wall`, its first record handled
    /// at `first`, ending now.
    fn measured(cpu: Duration, wall: Instant, first: Option<(Duration, Instant)>) -> Self {
        let now = cpu_time();
        let (first_cpu, first_at) = first.unwrap_or((cpu, wall));
        Self {
            total: now.saturating_sub(cpu),
            after_first: now.saturating_sub(first_cpu),
            wall: wall.elapsed(),
            wall_to_first: first_at.saturating_duration_since(wall),
        }
    }

    fn print(&self, what: &str) {
        println!(
            "  {what}: {:.1} ms CPU in all, {:.1} ms after the first record; {:.0} ms wall, {:.0} ms to the first record",
            self.total.as_secs_f64() * 1e3,
            self.after_first.as_secs_f64() * 1e3,
            self.wall.as_secs_f64() * 1e3,
            self.wall_to_first.as_secs_f64() * 1e3,
        );
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// CPU per 1,000 records, in ms.
fn per_thousand(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0 * 1_000.0 / RECORDS as f64
}

/// Where a CPU comparison reads its stream.
struct CpuSource<'a> {
    label: &'a str,
    config: &'a aws_config::SdkConfig,
    stream: &'a str,
    rounds: usize,
    /// Whether its ratios are the ones held to the 1.15x target.
    target: bool,
}

async fn cpu_figures(source: CpuSource<'_>) {
    let CpuSource {
        label,
        config,
        stream,
        rounds,
        target,
    } = source;
    let (mut raw_runs, mut serial, mut by_key) = (Vec::new(), Vec::new(), Vec::new());
    println!("CPU per 1,000 records, stream on {label}:");
    for round in 0..rounds {
        raw_runs.push(raw_cpu(config, stream).await);
        serial.push(broker_cpu(config, stream, CpuMode::Serial).await);
        by_key.push(broker_cpu(config, stream, CpuMode::ByKey).await);
        println!(
            "cpu round {round} ({label}): raw {:.2} ms, serial {:.2} ms, by_key {:.2} ms per 1,000 records in all",
            per_thousand(raw_runs[round].total),
            per_thousand(serial[round].total),
            per_thousand(by_key[round].total)
        );
    }
    for (part, pick) in [
        ("in all", (|r: &CpuRun| r.total) as fn(&CpuRun) -> Duration),
        ("after the first record", |r: &CpuRun| r.after_first),
    ] {
        let raw = per_thousand(median(raw_runs.iter().map(pick).collect()));
        figure(
            &format!("drain CPU ({label}, {part}): raw GetRecords loop"),
            &format!("{raw:.2} ms / 1,000 records"),
            "baseline",
            None,
        );
        for (name, runs) in [("serial", &serial), ("workers(4).by_key()", &by_key)] {
            let ms = per_thousand(median(runs.iter().map(pick).collect()));
            let (wanted, met) = if target {
                ("<= 1.15x raw", Some(ms / raw <= 1.15))
            } else {
                ("(the canned figure is the target)", None)
            };
            figure(
                &format!("drain CPU ({label}, {part}): broker {name}"),
                &format!("{ms:.2} ms / 1,000 records = {:.2}x raw", ms / raw),
                wanted,
                met,
            );
        }
    }
}

/// `canned_kinesis` (a binary of this package) serving the same shape of stream as the
/// emulator's: answers that cost the same every time, so that the CPU comparison is not
/// swamped by kinesis-local's load on the shared cores. Stopped on drop.
struct CannedKinesis {
    child: std::process::Child,
    config: aws_config::SdkConfig,
}

impl CannedKinesis {
    async fn start() -> Self {
        use std::io::BufRead;
        let exe = std::env::current_exe()
            .expect("own path")
            .with_file_name("canned_kinesis");
        let mut child = std::process::Command::new(&exe)
            .args(["--shards", "4", "--size", "512", "--keys", "50"])
            .args([
                "--records",
                &RECORDS.to_string(),
                "--limit",
                &LIMIT.to_string(),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} (built with the benchmarks): {e}",
                    exe.display()
                )
            });
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("canned_kinesis answers");
        let port: u16 = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("canned_kinesis said {line:?}"));
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_kinesis::config::Credentials::new(
                "canned", "canned", None, None, "canned",
            ))
            .endpoint_url(format!("http://127.0.0.1:{port}"))
            .load()
            .await;
        Self { child, config }
    }
}

impl Drop for CannedKinesis {
    fn drop(&mut self) {
        // Closing its standard input stops it.
        drop(self.child.stdin.take());
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}

/// Rounds of `DRAIN_CPU_ROUNDS` (or `default`).
fn rounds(default: usize) -> usize {
    std::env::var("DRAIN_CPU_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// The CPU comparisons: on the canned endpoint (the target) and on kinesis-local.
async fn all_cpu_figures(config: &aws_config::SdkConfig, stream: &str) {
    let canned = CannedKinesis::start().await;
    cpu_figures(CpuSource {
        label: "canned endpoint",
        config: &canned.config,
        stream: "canned",
        rounds: rounds(9),
        target: true,
    })
    .await;
    drop(canned);
    cpu_figures(CpuSource {
        label: "kinesis-local",
        config,
        stream,
        rounds: rounds(3),
        target: false,
    })
    .await;
}

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        // `DRAIN_CPU_ONLY=canned`: the CPU comparison on the canned endpoint alone (no emulator).
        if std::env::var("DRAIN_CPU_ONLY").as_deref() == Ok("canned") {
            let canned = CannedKinesis::start().await;
            cpu_figures(CpuSource {
                label: "canned endpoint",
                config: &canned.config,
                stream: "canned",
                rounds: rounds(9),
                target: true,
            })
            .await;
            return;
        }
        let (config, client) = kinesis_client(&unique_account()).await;
        let stream = unique_name("drain");
        create_stream(&client, &stream, 4).await;
        let filling = Instant::now();
        put_records_sized(&client, &stream, 50, 0, RECORDS, 512).await;
        println!("filled {RECORDS} records of 512 bytes in {:.1?}", filling.elapsed());

        if std::env::var_os("DRAIN_CPU_ONLY").is_some() {
            all_cpu_figures(&config, &stream).await;
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
        all_cpu_figures(&config, &stream).await;
        figure("drain: longest renewal gap", &format!("{:.2} s (full channel {:.2} s)", gap.as_secs_f64(), gap_full.as_secs_f64()), "< 4 s", Some(gap < Duration::from_secs(4)));
    });
}
