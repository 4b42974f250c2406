//! Figure 1: dispatch overhead. 1,000,000 in-memory deliveries over 8 shards through the
//! serial loop, `workers(4)`, `workers(4).by_key()`, `batch(500)` and `workers(4).batch(500)`
//! (settlement and checkpoint offers included), against a bare `tokio::sync::mpsc` loop handing the same records to the
//! same handler. Each mode runs 5 rounds, each round the bare loop then the mode, and reports
//! the minimum, median and maximum of the ratio of the round's two rates; the verdict uses the
//! median (every mode >= 0.8x, batches > 1x).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kinesis_bench::{
    dispatch_record, dispatch_run, figure, rate, DISPATCH_RECORDS as RECORDS,
    DISPATCH_SHARDS as SHARDS,
};
use kinesis_dispatch::{Record, Workers};

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
                tx.send(dispatch_record(shard, i, &payload))
                    .await
                    .expect("send");
            }
        });
    }
    drop(tx);
    while let Some(r) = rx.recv().await {
        trivial(&r).await;
    }
    started.elapsed()
}

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        let modes: [(&str, Workers, Option<usize>); 5] = [
            ("serial", Workers::Serial, None),
            ("workers(4)", Workers::Unordered(4), None),
            ("workers(4).by_key()", Workers::ByKey(4), None),
            ("batch(500)", Workers::Serial, Some(500)),
            ("workers(4).batch(500)", Workers::Unordered(4), Some(500)),
        ];
        // Each mode is measured alternately with the bare loop, round by round, so a ratio
        // compares two runs made side by side on a noisy machine; all rounds are reported.
        let mut rows = Vec::new();
        // `dispatch_overhead serial batch` runs only those modes (for profiling one).
        let only: Vec<String> = std::env::args().skip(1).collect();
        let chosen = modes
            .into_iter()
            .filter(|(name, _, _)| only.is_empty() || only.iter().any(|o| name.starts_with(o.as_str())));
        for (name, workers, batch) in chosen {
            let mut ratios = Vec::new();
            let mut rates = Vec::new();
            let mut bares = Vec::new();
            for _ in 0..ROUNDS {
                let base = rate(RECORDS, bare().await);
                let r = rate(RECORDS, dispatch_run(workers, batch).await);
                ratios.push(r / base);
                rates.push(r);
                bares.push(base);
            }
            let (lo, mid, hi) = spread(&ratios);
            let (_, rate_mid, _) = spread(&rates);
            let (_, bare_mid, _) = spread(&bares);
            eprintln!(
                "{name}: ratios {}",
                ratios.iter().map(|r| format!("{r:.2}x")).collect::<Vec<_>>().join(" ")
            );
            rows.push((name, batch.is_some(), lo, mid, hi, rate_mid, bare_mid));
        }
        for (name, batch, lo, mid, hi, rate_mid, bare_mid) in rows {
            let (target, met) = if batch {
                ("> 1x (median)", mid > 1.0)
            } else {
                (">= 0.8x (median)", mid >= 0.8)
            };
            figure(
                &format!("dispatch: {name} vs bare (min / median / max)"),
                &format!(
                    "{lo:.2}x / {mid:.2}x / {hi:.2}x ({rate_mid:.0} vs {bare_mid:.0} rec/s, medians)"
                ),
                target,
                Some(met),
            );
        }
    });
}

/// Rounds per mode.
const ROUNDS: usize = 5;

/// Minimum, median and maximum.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}
