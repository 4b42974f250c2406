//! De-aggregation throughput on one core: KPL aggregates of 100 sub-records of 100 bytes,
//! unpacked as the shard reader does (MD5 check, protobuf decode, one `Record` per sub-record
//! with its key and (sequence, subsequence)), against a baseline that only walks the bytes
//! (a checksum over every byte of every aggregate: the least any reader of the data pays).
//!
//! Five rounds, each measuring the baseline and then de-aggregation; prints min, median and
//! max of the sub-records per second and of the ratio. Target: median >= 1 million
//! sub-records per second.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use kinesis_bench::figure;
use kinesis_dispatch::Record;
use kinesis_kpl::{deaggregate, Aggregator};
use kinesis_lease_core::SequenceNumber;

const AGGREGATES: usize = 2_000;
const PER_AGGREGATE: usize = 100;
const PAYLOAD: usize = 100;
const ROUNDS: usize = 5;

fn aggregates() -> Vec<(Bytes, SequenceNumber)> {
    (0..AGGREGATES)
        .map(|a| {
            let mut agg = Aggregator::new();
            for s in 0..PER_AGGREGATE {
                let key = format!("customer-{}", (a * PER_AGGREGATE + s) % 997);
                let data = Bytes::from(vec![(s % 251) as u8; PAYLOAD]);
                let _ = agg.push(&key, None, data).expect("fits");
            }
            let sequence = SequenceNumber::new(
                format!(
                    "4959033827149025660855969253836157109592157598913658{:04}",
                    a
                ),
                None,
            )
            .expect("digits");
            (agg.finish().expect("records").data, sequence)
        })
        .collect()
}

/// The baseline: every byte read once.
fn walk(records: &[(Bytes, SequenceNumber)]) -> u64 {
    let mut sum = 0u64;
    for (data, _) in records {
        for b in data.iter() {
            sum = sum.wrapping_mul(31).wrapping_add(u64::from(*b));
        }
    }
    sum
}

/// What the reader does per aggregate.
fn unpack(records: &[(Bytes, SequenceNumber)]) -> usize {
    let mut out: Vec<Record> = Vec::with_capacity(PER_AGGREGATE);
    let mut count = 0;
    for (data, sequence) in records {
        out.clear();
        let subs = deaggregate(data).expect("valid").expect("aggregated");
        for (i, sub) in subs.into_iter().enumerate() {
            let mut record = Record::new(
                sub.data,
                sub.partition_key,
                sequence.with_subsequence(Some(i as u64)),
            );
            record.explicit_hash_key = sub.explicit_hash_key;
            out.push(record);
        }
        count += black_box(&out).len();
    }
    count
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    let records = aggregates();
    let subs = AGGREGATES * PER_AGGREGATE;
    let mut unpack_rates = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        black_box(walk(black_box(&records)));
        let walk_rate = subs as f64 / started.elapsed().as_secs_f64();
        let started = Instant::now();
        assert_eq!(unpack(black_box(&records)), subs);
        let unpack_rate = subs as f64 / started.elapsed().as_secs_f64();
        unpack_rates.push(unpack_rate);
        ratios.push(unpack_rate / walk_rate);
    }
    let (lo, mid, hi) = median(unpack_rates);
    let (rlo, rmid, rhi) = median(ratios);
    eprintln!(
        "kpl_deaggregate: {AGGREGATES} aggregates of {PER_AGGREGATE} x {PAYLOAD} B, {ROUNDS} rounds"
    );
    figure(
        "kpl de-aggregation, sub-records/s (min / median / max)",
        &format!("{:.2} M / {:.2} M / {:.2} M", lo / 1e6, mid / 1e6, hi / 1e6),
        ">= 1 M median",
        Some(mid >= 1e6),
    );
    figure(
        "kpl de-aggregation vs walking the bytes (min / median / max)",
        &format!("{rlo:.2}x / {rmid:.2}x / {rhi:.2}x"),
        "-",
        None,
    );
}
