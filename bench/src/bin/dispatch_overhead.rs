//! Figure 1: dispatch overhead. 1,000,000 in-memory deliveries over 8 shards through the
//! serial loop, `workers(4)`, `workers(4, by_key)` and `batch(500)` (settlement and checkpoint
//! offers included), against a bare `tokio::sync::mpsc` loop handing the same records to the
//! same handler, run alternately with it, best of 3 each.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kinesis_bench::{figure, rate};
use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

const RECORDS: usize = 1_000_000;
const SHARDS: usize = 8;
const KEYS: usize = 50;

fn record(shard: usize, i: usize, payload: &Bytes) -> Record {
    let sequence = SequenceNumber::new(format!("{}", 1_000_000_000 + i * SHARDS + shard), None)
        .expect("digits");
    Record::new(
        payload.clone(),
        format!("key-{}", (i * SHARDS + shard) % KEYS),
        sequence,
    )
}

async fn trivial(d: &Record) {
    black_box(d.payload.len());
}

async fn bare() -> Duration {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Record>(64);
    let payload = Bytes::from(vec![7u8; 64]);
    let started = Instant::now();
    for shard in 0..SHARDS {
        let (tx, payload) = (tx.clone(), payload.clone());
        tokio::spawn(async move {
            for i in 0..RECORDS / SHARDS {
                tx.send(record(shard, i, &payload)).await.expect("send");
            }
        });
    }
    drop(tx);
    while let Some(r) = rx.recv().await {
        trivial(&r).await;
    }
    started.elapsed()
}

async fn ours(workers: Workers, batch: Option<usize>) -> Duration {
    let (sender, receiver) = channel(64);
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
    let config = DispatchConfig {
        workers,
        ..Default::default()
    };
    let handle = Dispatcher::spawn(receiver, handler, config).expect("dispatch");
    let payload = Bytes::from(vec![7u8; 64]);
    let settlements: Vec<_> = (0..SHARDS)
        .map(|s| ShardSettlement::new("bench", format!("shard-{s}")))
        .collect();
    let started = Instant::now();
    let mut producers = Vec::new();
    for (shard, settlement) in settlements.iter().enumerate() {
        let (feed, payload) = (sender.feed(settlement.clone()), payload.clone());
        producers.push(tokio::spawn(async move {
            for i in 0..RECORDS / SHARDS {
                feed.send(record(shard, i, &payload)).await.expect("send");
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

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let modes: [(&str, Workers, Option<usize>); 4] = [
            ("serial", Workers::Serial, None),
            ("workers(4)", Workers::Unordered(4), None),
            ("workers(4, by_key)", Workers::ByKey(4), None),
            ("batch(500)", Workers::Serial, Some(500)),
        ];
        // Each mode is measured alternately with the bare loop (3 rounds, best of each), so a
        // ratio compares runs made side by side on a noisy machine.
        let mut overall_bare = Duration::MAX;
        let mut rows = Vec::new();
        for (name, workers, batch) in modes {
            let (mut bare_best, mut ours_best) = (Duration::MAX, Duration::MAX);
            for _ in 0..3 {
                bare_best = bare_best.min(bare().await);
                ours_best = ours_best.min(ours(workers, batch).await);
            }
            overall_bare = overall_bare.min(bare_best);
            let (r, base) = (rate(RECORDS, ours_best), rate(RECORDS, bare_best));
            let ratio = r / base;
            println!("{name}: {r:.0} records/s, bare alongside {base:.0} records/s: {ratio:.2}x");
            rows.push((name, r, ratio));
        }
        let base_rate = rate(RECORDS, overall_bare);
        figure(
            "dispatch: bare mpsc loop",
            &format!("{base_rate:.0} rec/s"),
            "baseline",
            None,
        );
        for (name, r, ratio) in rows {
            figure(
                &format!("dispatch: {name}"),
                &format!("{r:.0} rec/s = {ratio:.2}x bare"),
                ">= 0.5x",
                Some(ratio >= 0.5),
            );
        }
    });
}
