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
//! canned one (no emulator needed). `DRAIN_CPU_SIDE=raw`, `serial` or `by_key` runs only that
//! side in each round and prints no ratios: for a profiler's samples of one side alone.
//!
//! Last, **instructions per 1,000 records** on the canned endpoint, counted by valgrind's
//! cachegrind (`DRAIN_CPU_ONLY=instructions` runs only these): each side drains in this binary
//! run under valgrind once for one round and once for three, and the difference (two rounds,
//! without the process's own start) over 40,000 records is its figure. Unlike CPU time on this
//! 2-core VM, which swings 10 % from round to round, the count repeats to within 0.1 %, so a
//! change of a few per cent in the broker's own work shows; it does not see what costs time
//! without instructions (threads parking and waking, cache lines moving between cores, which
//! valgrind, running one thread at a time, does not have), so the CPU ratios above stay the
//! target. Skipped, saying so, when valgrind is not installed.
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

/// What a CPU run's handler counts: records handled, the last one's signal, and the process's
/// CPU time when the first was handled (what starting took).
struct Counted {
    handled: AtomicUsize,
    done: tokio::sync::Notify,
    first: std::sync::OnceLock<(Duration, Instant)>,
}

/// Drains the stream with a broker in `mode` (memory store, nothing else running): the
/// process's CPU time it took.
async fn broker_cpu(config: &aws_config::SdkConfig, stream: &str, mode: CpuMode) -> CpuRun {
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
    // What the handler counts, in one `Arc` (a handler's future is `'static`, so it clones
    // what it uses once per record; the raw loop clones nothing per record).
    let counted = Arc::new(Counted {
        handled: AtomicUsize::new(0),
        done: tokio::sync::Notify::new(),
        first: std::sync::OnceLock::new(),
    });
    let c = counted.clone();
    sub.handle(move |d: Delivery| {
        let c = c.clone();
        async move {
            std::hint::black_box(d.payload().len());
            let n = c.handled.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                let _ = c.first.set((cpu_time(), Instant::now()));
            }
            if n + 1 == RECORDS {
                c.done.notify_one();
            }
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    let (cpu, wall) = (cpu_time(), Instant::now());
    let running = broker.start().await.expect("start");
    tokio::time::timeout(Duration::from_secs(300), counted.done.notified())
        .await
        .expect("drain stalled");
    let run = CpuRun::measured(cpu, wall, counted.first.get().copied());
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
    if let Ok(side) = std::env::var("DRAIN_CPU_SIDE") {
        for _ in 0..rounds {
            match side.as_str() {
                "raw" => drop(raw_cpu(config, stream).await),
                "serial" => drop(broker_cpu(config, stream, CpuMode::Serial).await),
                "by_key" => drop(broker_cpu(config, stream, CpuMode::ByKey).await),
                other => panic!("DRAIN_CPU_SIDE={other}: raw, serial or by_key"),
            }
        }
        return;
    }
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

/// Instructions one run of this binary under cachegrind executed to drain the canned stream
/// `rounds` times on `side` (`raw`, `serial` or `by_key`); `None` when valgrind cannot run.
fn instructions(side: &str, rounds: usize) -> Option<u64> {
    let exe = std::env::current_exe().ok()?;
    let out_file = std::env::temp_dir().join(format!(
        "drain-cachegrind-{}-{side}-{rounds}.out",
        std::process::id()
    ));
    let output = std::process::Command::new("valgrind")
        .arg("--tool=cachegrind")
        .arg("--cache-sim=no")
        .arg(format!("--cachegrind-out-file={}", out_file.display()))
        .arg(&exe)
        .env("DRAIN_CPU_ONLY", "canned")
        .env("DRAIN_CPU_SIDE", side)
        .env("DRAIN_CPU_ROUNDS", rounds.to_string())
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&out_file);
    if !output.status.success() {
        eprintln!(
            "valgrind on the {side} side failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    // `==pid== I   refs:      855,857,892`
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .find_map(|line| {
            line.split_once("I   refs:")
                .map(|(_, n)| n.trim().replace(',', ""))
        })
        .and_then(|n| n.parse().ok())
}

/// Instructions per 1,000 records on the canned endpoint, per side, and each broker mode's
/// ratio to the raw loop (see the module's docs).
fn instruction_figures() {
    let available = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        println!("instructions per 1,000 records: skipped (valgrind is not installed)");
        return;
    }
    let mut per_thousand = Vec::new();
    for side in ["raw", "serial", "by_key"] {
        let (Some(one), Some(three)) = (instructions(side, 1), instructions(side, 3)) else {
            println!("instructions per 1,000 records: skipped (valgrind failed on {side})");
            return;
        };
        let per = three.saturating_sub(one) as f64 / (2 * RECORDS) as f64 * 1_000.0;
        println!("  {side}: {one} instructions for one round, {three} for three");
        per_thousand.push(per);
    }
    let raw = per_thousand[0];
    figure(
        "drain instructions (canned endpoint): raw GetRecords loop",
        &format!("{:.0}k / 1,000 records", raw / 1e3),
        "baseline",
        None,
    );
    for (name, per) in [
        ("serial", per_thousand[1]),
        ("workers(4).by_key()", per_thousand[2]),
    ] {
        figure(
            &format!("drain instructions (canned endpoint): broker {name}"),
            &format!("{:.0}k / 1,000 records = {:.3}x raw", per / 1e3, per / raw),
            "(the CPU ratio is the target)",
            None,
        );
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
        // `DRAIN_CPU_ONLY=instructions`: the instruction counts alone (no emulator).
        if std::env::var("DRAIN_CPU_ONLY").as_deref() == Ok("instructions") {
            instruction_figures();
            return;
        }
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
            instruction_figures();
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
        instruction_figures();
    });
}
