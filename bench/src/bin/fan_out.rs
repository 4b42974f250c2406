//! Figure 7: enhanced fan-out against polling, in one run. Put-to-handler latency (p50, p99)
//! at a steady 100 records/s over 4 shards for 20 s, and the time to drain 20,000 records
//! already in the stream, each by a broker that polls (the default 1 s poll interval) and by
//! one that subscribes (`fan_out`), on the same stream:
//!
//! - on `MemoryStream`, in process and in real time: what the library adds, with a stream that
//!   pushes a record as soon as it is put;
//! - on kinesis-local over HTTP: the emulator sends fan-out events about once a second (AWS
//!   documents ~70 ms), so its figures bound the emulator, not the library.
//!
//! Needs `AWS_ENDPOINT_URL_KINESIS` (`cargo xtask bench`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use kinesis_broker::RunningBroker;
use std::time::{Duration, Instant};

use kinesis_bench::figure;
use kinesis_broker::{
    kinesis::KinesisApi, testing::MemoryStream, Broker, Delivery, MemoryLeaseStore, PutEntry,
    StartAt,
};
use kinesis_integ::{create_stream, kinesis_client, unique_account, unique_name};

const SHARDS: usize = 4;
const RATE: u64 = 100;
const STEADY: Duration = Duration::from_secs(20);
const DRAIN: usize = 20_000;

/// The process's time origin: payloads carry microseconds since it.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    origin().elapsed().as_micros() as u64
}

/// A running broker recording each record's latency (put to handler, in µs) and a count.
struct Measured {
    running: RunningBroker,
    latencies: Arc<Mutex<Vec<u64>>>,
    handled: Arc<AtomicUsize>,
}

async fn start<K: KinesisApi + Clone + 'static>(
    kinesis: &K,
    stream: &str,
    fan_out: bool,
    start_at: StartAt,
) -> Measured {
    let latencies: Arc<Mutex<Vec<u64>>> = Arc::default();
    let handled = Arc::new(AtomicUsize::new(0));
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::new())
        .build()
        .expect("broker");
    let sub = broker.subscribe(stream).start_at(start_at).workers(4);
    let sub = if fan_out { sub.fan_out("bench") } else { sub };
    let (l, h) = (latencies.clone(), handled.clone());
    sub.handle(move |d: Delivery| {
        let (l, h) = (l.clone(), h.clone());
        async move {
            let text = String::from_utf8_lossy(d.payload());
            if let Some(put) = text.split(':').next().and_then(|t| t.parse::<u64>().ok()) {
                l.lock().unwrap().push(now_us().saturating_sub(put));
            }
            h.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        }
    })
    .expect("subscribe");
    let running = broker.start().await.expect("start");
    // Every shard held (and, with fan-out, subscribed) before measuring.
    let started = Instant::now();
    while running.stats().shards(stream).len() < SHARDS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "shards not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Measured {
        running,
        latencies,
        handled,
    }
}

/// Puts `RATE` records a second over `SHARDS` shards for `STEADY`; returns how many.
async fn steady(kinesis: &dyn KinesisApi, stream: &str) -> usize {
    let mut tick = tokio::time::interval(Duration::from_millis(1_000 / RATE));
    let mut put = 0;
    let started = Instant::now();
    while started.elapsed() < STEADY {
        tick.tick().await;
        let entry = PutEntry::new(format!("{}:{put}", now_us()), format!("key-{}", put % 64));
        kinesis
            .put_records(stream, std::slice::from_ref(&entry))
            .await
            .expect("put");
        put += 1;
    }
    put
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_micros(sorted[i])
}

/// p50 and p99 of put-to-handler latency at a steady rate.
async fn latency<K: KinesisApi + Clone + 'static>(
    kinesis: &K,
    stream: &str,
    fan_out: bool,
) -> (Duration, Duration) {
    let m = start(kinesis, stream, fan_out, StartAt::Latest).await;
    let put = steady(kinesis, stream).await;
    let started = Instant::now();
    while m.handled.load(Ordering::SeqCst) < put {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "records not handled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m.running.shutdown().await;
    let mut l = m.latencies.lock().unwrap().clone();
    l.sort_unstable();
    (percentile(&l, 0.5), percentile(&l, 0.99))
}

/// Time to handle `DRAIN` records already in the stream, from TRIM_HORIZON.
async fn drain<K: KinesisApi + Clone + 'static>(
    kinesis: &K,
    stream: &str,
    fan_out: bool,
) -> Duration {
    let started = Instant::now();
    let m = start(kinesis, stream, fan_out, StartAt::TrimHorizon).await;
    while m.handled.load(Ordering::SeqCst) < DRAIN {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "drain stalled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    m.running.shutdown().await;
    took
}

async fn fill(kinesis: &dyn KinesisApi, stream: &str) {
    for chunk in (0..DRAIN).collect::<Vec<_>>().chunks(500) {
        let entries: Vec<PutEntry> = chunk
            .iter()
            .map(|i| {
                PutEntry::new(
                    format!("0:{i}:{}", "x".repeat(500)),
                    format!("key-{}", i % 64),
                )
            })
            .collect();
        kinesis.put_records(stream, &entries).await.expect("fill");
    }
}

fn report(
    place: &str,
    polling: (Duration, Duration),
    fan_out: (Duration, Duration),
    drains: (Duration, Duration),
) {
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1_000.0);
    figure(
        &format!("fan-out {place}: latency p50 / p99, polling"),
        &format!("{} / {}", ms(polling.0), ms(polling.1)),
        "baseline",
        None,
    );
    figure(
        &format!("fan-out {place}: latency p50 / p99, fan-out"),
        &format!("{} / {}", ms(fan_out.0), ms(fan_out.1)),
        "p99 < polling p50",
        Some(fan_out.1 < polling.0),
    );
    let rate = |d: Duration| DRAIN as f64 / d.as_secs_f64();
    figure(
        &format!("fan-out {place}: drain 20,000, polling / fan-out"),
        &format!(
            "{:.0} / {:.0} rec/s ({:.2}x)",
            rate(drains.0),
            rate(drains.1),
            rate(drains.1) / rate(drains.0)
        ),
        "-",
        None,
    );
}

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        origin();
        // In process.
        let memory = MemoryStream::new();
        for stream in ["lat-poll", "lat-fan", "drain"] {
            memory.create_stream(stream, SHARDS as u32).expect("stream");
        }
        let polling = latency(&memory, "lat-poll", false).await;
        let pushed = latency(&memory, "lat-fan", true).await;
        fill(&memory, "drain").await;
        let drains = (
            drain(&memory, "drain", false).await,
            drain(&memory, "drain", true).await,
        );
        println!("MemoryStream: polling {polling:?}, fan-out {pushed:?}, drains {drains:?}");
        report("MemoryStream", polling, pushed, drains);

        // kinesis-local.
        let (config, client) = kinesis_client(&unique_account()).await;
        let streams = [
            unique_name("fan-lat-poll"),
            unique_name("fan-lat-fan"),
            unique_name("fan-drain"),
        ];
        for stream in &streams {
            create_stream(&client, stream, SHARDS as i32).await;
        }
        let aws = kinesis_broker::AwsKinesis::new(&config);
        let polling = latency(&aws, &streams[0], false).await;
        let pushed = latency(&aws, &streams[1], true).await;
        fill(&aws, &streams[2]).await;
        let drains = (
            drain(&aws, &streams[2], false).await,
            drain(&aws, &streams[2], true).await,
        );
        println!("kinesis-local: polling {polling:?}, fan-out {pushed:?}, drains {drains:?}");
        report("kinesis-local", polling, pushed, drains);
    });
}
