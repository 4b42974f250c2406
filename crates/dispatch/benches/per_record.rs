//! The per-record path of dispatch, for tuning in seconds: `cargo bench -p kinesis-dispatch`.
//!
//! - `feed_recv_ack`: a record numbered for settlement, through the channel, received and
//!   acked (settled), on one thread: what every record pays before and after its handler.
//! - `checkpoint_offer`: reading a shard's checkpoint offer, as the lease keeper does.
//! - `lane_of`: picking a record's lane by partition key (`workers(n).by_key()`).
//! - `serial_10k`: 10,000 records through the serial dispatcher with a trivial handler, and
//!   `bare_10k`, the same records through a bare `tokio::sync::mpsc` channel to the same
//!   handler, on the same single thread: the difference is dispatch's CPU cost per record.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kinesis_dispatch::{
    channel, lane_of, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement,
};
use kinesis_lease_core::SequenceNumber;

fn records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            Record::new(
                bytes::Bytes::from_static(b"0123456789abcdef"),
                format!("key-{}", i % 50),
                SequenceNumber::new(format!("{}", 49_000_000_000u64 + i as u64), None)
                    .expect("digits"),
            )
        })
        .collect()
}

fn per_record(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let batch = records(1_000);

    c.bench_function("feed_recv_ack", |b| {
        b.to_async(&rt).iter(|| async {
            let (sender, mut receiver) = channel(64);
            let feed = sender.feed(ShardSettlement::new("s", "shard"));
            for record in &batch {
                feed.send(record.clone()).await.expect("send");
                receiver.recv().await.expect("delivery").ack();
            }
            black_box(feed.settlement().progress().checkpoint)
        })
    });

    let settled = {
        let (sender, mut receiver) = channel(2_000);
        let feed = sender.feed(ShardSettlement::new("s", "shard"));
        rt.block_on(async {
            for record in &batch {
                feed.send(record.clone()).await.expect("send");
                receiver.recv().await.expect("delivery").ack();
            }
        });
        feed.settlement().clone()
    };
    c.bench_function("checkpoint_offer", |b| {
        b.iter(|| black_box(settled.progress().checkpoint))
    });

    let keys: Vec<String> = (0..1_000).map(|i| format!("customer-{i}")).collect();
    c.bench_function("lane_of", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(lane_of(&keys[i], 8))
        })
    });

    let many = records(10_000);
    c.bench_function("serial_10k", |b| {
        b.to_async(&rt).iter(|| async {
            let (sender, receiver) = channel(64);
            let handler = Handler::one(|d: Delivery| async move {
                black_box(d.payload().len());
                Ok::<(), std::io::Error>(())
            });
            let handle =
                Dispatcher::spawn(receiver, handler, DispatchConfig::default()).expect("spawn");
            let settlement = ShardSettlement::new("s", "shard");
            let feed = sender.feed(settlement.clone());
            for record in &many {
                feed.send(record.clone()).await.expect("send");
            }
            settlement.all_settled().await;
            drop((sender, feed));
            handle.join().await;
        })
    });
}

fn bare(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let many = records(10_000);
    c.bench_function("bare_10k", |b| {
        b.to_async(&rt).iter(|| async {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Record>(64);
            let consumer = tokio::spawn(async move {
                while let Some(r) = rx.recv().await {
                    black_box(r.payload.len());
                }
            });
            for record in &many {
                tx.send(record.clone()).await.expect("send");
            }
            drop(tx);
            consumer.await.expect("consumer");
        })
    });
}

criterion_group!(benches, per_record, bare);
criterion_main!(benches);
