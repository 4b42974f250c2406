//! Shared pieces of the benchmark scenarios: how figures are printed, process measurements.
//!
//! Each scenario is a binary under `src/bin/` that can run alone (`cargo run --release -p
//! kinesis-bench --bin NAME`); `cargo xtask bench` runs them all (starting the emulators the
//! ones on kinesis-local and moto need) and gathers the `FIGURE` lines into one table.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kinesis_dispatch::{
    channel_for, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

/// The runtime every scenario runs on: two worker threads, as the machine has two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A runtime on tokio's paused clock, on this thread: simulated time for the scenarios that
/// run a fleet in process (`fleet_cost`, `takeover`).
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// Prints one figure as `FIGURE<TAB>name<TAB>value<TAB>target<TAB>met`, the line
/// `cargo xtask bench` collects.
pub fn figure(name: &str, value: &str, target: &str, met: Option<bool>) {
    let verdict = match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "-",
    };
    println!("FIGURE\t{name}\t{value}\t{target}\t{verdict}");
}

/// This process's resident set size in KiB (Linux `/proc`), 0 where unknown.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of every thread of this process so far, to the microsecond
/// (`getrusage`): fine enough to time a few tens of milliseconds of work, which
/// [`cpu_time`]'s ticks of 10 ms are not.
pub fn cpu_time_precise() -> Duration {
    // SAFETY: getrusage only writes the struct it is given; a zeroed rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return cpu_time();
        }
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// CPU time (user + system) this process has used so far (Linux `/proc`).
pub fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start after the last ')'.
            let rest = s.rsplit_once(')')?.1.to_owned();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    // Linux reports clock ticks of 1/100 s on every platform this runs on.
    Duration::from_millis(ticks * 10)
}

/// Records per second.
pub fn rate(records: usize, took: Duration) -> f64 {
    records as f64 / took.as_secs_f64().max(f64::EPSILON)
}

/// Watches every row of a stream's lease table every 100 ms and remembers, per row, the longest
/// time its counter stood still while held: the longest gap between two renewals, as another
/// instance would see it.
#[derive(Debug)]
pub struct RenewalGaps {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Duration>,
}

impl RenewalGaps {
    /// Starts watching `stream` through `store` (a store of its own over the same table).
    pub fn watch(
        store: std::sync::Arc<dyn kinesis_broker::lease::LeaseStore>,
        stream: &str,
    ) -> Self {
        use std::collections::HashMap;
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (s, stream) = (stop.clone(), stream.to_owned());
        let task = tokio::spawn(async move {
            let mut last: HashMap<String, (u64, tokio::time::Instant)> = HashMap::new();
            let mut longest = Duration::ZERO;
            while !s.load(Ordering::SeqCst) {
                if let Ok(rows) = store.list(&stream).await {
                    let now = tokio::time::Instant::now();
                    for row in rows.iter().filter(|r| r.owner.is_some()) {
                        let shard = row.key.shard().to_owned();
                        match last.get(&shard) {
                            Some((counter, since)) if *counter == row.counter => {
                                longest = longest.max(now.duration_since(*since));
                            }
                            _ => {
                                last.insert(shard, (row.counter, now));
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            longest
        });
        Self { stop, task }
    }

    /// Stops watching; the longest gap seen.
    pub async fn finish(self) -> Duration {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.unwrap_or(Duration::MAX)
    }
}

/// Deliveries of the dispatch scenarios.
pub const DISPATCH_RECORDS: usize = 1_000_000;
/// Shards they come from.
pub const DISPATCH_SHARDS: usize = 8;
/// Partition keys they spread over.
pub const DISPATCH_KEYS: usize = 50;

/// Record `i` of `shard` in the dispatch scenarios, built as a reader would (a partition key
/// and a sequence number each).
pub fn dispatch_record(shard: usize, i: usize, payload: &Bytes) -> Record {
    let sequence = SequenceNumber::new(
        format!("{}", 1_000_000_000 + i * DISPATCH_SHARDS + shard),
        None,
    )
    .expect("digits");
    Record::new(
        payload.clone(),
        format!("key-{}", (i * DISPATCH_SHARDS + shard) % DISPATCH_KEYS),
        sequence,
    )
}

/// Records per page a producer sends, as a reader gets them from one GetRecords call.
pub const DISPATCH_PAGE: usize = 1_000;

/// The dispatch scenarios' run: `DISPATCH_RECORDS` deliveries from `DISPATCH_SHARDS` producers
/// through a dispatcher with `workers` (and batches of `batch`), a trivial handler, every
/// shard's settlement awaited; returns the time taken.
pub async fn dispatch_run(workers: Workers, batch: Option<usize>) -> Duration {
    let config = DispatchConfig {
        workers,
        ..Default::default()
    };
    let (sender, receiver) = channel_for(64, &config);
    let handler = match batch {
        None => Handler::one(|d: Delivery| async move {
            black_box(d.payload().len());
            Ok::<(), std::io::Error>(())
        }),
        Some(size) => Handler::batch(size, |b: Vec<Delivery>| async move {
            black_box(b.len());
            Ok(())
        }),
    };
    let handle = Dispatcher::spawn(receiver, handler, config).expect("dispatch");
    let payload = Bytes::from(vec![7u8; 64]);
    let settlements: Vec<_> = (0..DISPATCH_SHARDS)
        .map(|s| ShardSettlement::new("bench", format!("shard-{s}")))
        .collect();
    let started = Instant::now();
    let mut producers = Vec::new();
    for (shard, settlement) in settlements.iter().enumerate() {
        let (feed, payload) = (sender.feed(settlement.clone()), payload.clone());
        producers.push(tokio::spawn(async move {
            // As a shard reader sends a page: quietly while places are free, the loops woken
            // once the page is in or before waiting for a place.
            let records = DISPATCH_RECORDS / DISPATCH_SHARDS;
            for page in (0..records).collect::<Vec<_>>().chunks(DISPATCH_PAGE) {
                let mut quiet = feed.quietly().expecting(page.len());
                for &i in page {
                    quiet
                        .send(dispatch_record(shard, i, &payload))
                        .await
                        .expect("send");
                }
            }
        }));
    }
    for p in producers {
        p.await.expect("producer");
    }
    for s in &settlements {
        s.all_settled().await;
        black_box(s.progress().checkpoint);
    }
    let took = started.elapsed();
    drop(sender);
    handle.join().await;
    took
}
