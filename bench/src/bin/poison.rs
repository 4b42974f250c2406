//! Figure: poison isolation. 200,000 in-memory deliveries over 8 shards (7 partition keys per
//! shard, as Kinesis keeps each key on one shard), one key of shard 0 failing on every attempt
//! (default retry policy: forever, backoff from 100 ms), through the serial loop, `workers(4)`
//! and `workers(4).by_key()`. The rate of the records that need not wait (serial: those of the
//! seven healthy shards; otherwise every record of another key) is measured with the poisoned
//! key and, side by side in the same round, with no key failing. 5 rounds per mode; the
//! verdict uses the median ratio (>= 0.9x).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kinesis_bench::figure;
use kinesis_dispatch::{
    channel_for, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

const RECORDS: usize = 200_000;
const SHARDS: usize = 8;
const KEYS_PER_SHARD: usize = 7;
const POISON: &str = "s0-k3";
const ROUNDS: usize = 5;

fn record(shard: usize, i: usize, payload: &Bytes) -> Record {
    let sequence = SequenceNumber::new(format!("{}", 1_000_000_000 + i), None).expect("digits");
    Record::new(
        payload.clone(),
        format!("s{shard}-k{}", i % KEYS_PER_SHARD),
        sequence,
    )
}

/// True for a record that must be handled whatever the poison does.
fn need_not_wait(workers: Workers, shard: usize, key: &str) -> bool {
    match workers {
        Workers::Serial => shard != 0,
        _ => key != POISON,
    }
}

/// One run: the time until every record that need not wait was handled.
async fn run(workers: Workers, poisoned: bool) -> Duration {
    let config = DispatchConfig {
        workers,
        ..Default::default()
    };
    let (sender, receiver) = channel_for(64, &config);
    let healthy = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let expected = (0..SHARDS)
        .flat_map(|s| (0..RECORDS / SHARDS).map(move |i| (s, i)))
        .filter(|(s, i)| need_not_wait(workers, *s, &format!("s{s}-k{}", i % KEYS_PER_SHARD)))
        .count() as u64;
    let (h, d) = (healthy.clone(), done.clone());
    let handler = Handler::one(move |delivery: Delivery| {
        let (h, d) = (h.clone(), d.clone());
        async move {
            let key = delivery.partition_key();
            if poisoned && key == POISON {
                return Err(std::io::Error::other("poison"));
            }
            black_box(delivery.payload().len());
            let shard: usize = delivery.shard()[6..].parse().expect("shard-N");
            if need_not_wait(workers, shard, key)
                && h.fetch_add(1, Ordering::Relaxed) + 1 == expected
            {
                d.notify_one();
            }
            Ok(())
        }
    });
    let handle = Dispatcher::spawn(receiver, handler, config).expect("dispatch");
    let payload = Bytes::from(vec![7u8; 64]);
    let started = Instant::now();
    for shard in 0..SHARDS {
        let settlement = ShardSettlement::new("bench", format!("shard-{shard}"));
        let (feed, payload) = (sender.feed(settlement), payload.clone());
        tokio::spawn(async move {
            for i in 0..RECORDS / SHARDS {
                // Records behind the failing one wait in the loop (no reader here stops at a
                // full settlement window; they are few).
                if feed.send(record(shard, i, &payload)).await.is_err() {
                    return;
                }
            }
        });
    }
    done.notified().await;
    let took = started.elapsed();
    drop(sender);
    handle.shutdown(Duration::from_millis(10)).await;
    took
}

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        let modes = [
            ("serial (healthy shards)", Workers::Serial),
            ("workers(4)", Workers::Unordered(4)),
            ("workers(4).by_key()", Workers::ByKey(4)),
        ];
        for (name, workers) in modes {
            let mut ratios = Vec::new();
            for _ in 0..ROUNDS {
                let clean = run(workers, false).await;
                let poisoned = run(workers, true).await;
                ratios.push(clean.as_secs_f64() / poisoned.as_secs_f64().max(f64::EPSILON));
            }
            ratios.sort_by(f64::total_cmp);
            let (lo, mid, hi) = (ratios[0], ratios[ROUNDS / 2], ratios[ROUNDS - 1]);
            eprintln!("{name}: ratios {ratios:.2?}");
            figure(
                &format!("poison: {name}, one key failing vs none (min / median / max)"),
                &format!("{lo:.2}x / {mid:.2}x / {hi:.2}x"),
                ">= 0.9x (median)",
                Some(mid >= 0.9),
            );
        }
    });
}
