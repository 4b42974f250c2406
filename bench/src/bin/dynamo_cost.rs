//! Figure 3: DynamoDB writes per shard-minute in steady state (one renewal per shard every
//! 3 s, plus the instance's member row, which its shards share), counted through the store,
//! while one broker consumes 4 busy shards at full speed for 60 s (records from a
//! `MemoryStream`, so Kinesis is never the limit; leases on moto).
//!
//! Needs `AWS_ENDPOINT_URL_DYNAMODB` (`cargo xtask bench`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinesis_bench::figure;
use kinesis_broker::{testing::MemoryStream, Broker, Delivery, DynamoLeaseStore, StartAt};
use kinesis_integ::{sdk_config, unique_name, Service};

const SHARDS: u32 = 4;
const WINDOW: Duration = Duration::from_secs(60);

fn main() {
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        let config = sdk_config(Service::Dynamodb).await;
        let store = DynamoLeaseStore::new(&config, unique_name("cost-leases"));
        store.ensure_table().await.expect("table");
        let kinesis = MemoryStream::new();
        kinesis.create_stream("cost", SHARDS).expect("stream");
        let stop = Arc::new(AtomicBool::new(false));
        let (k, s) = (kinesis.clone(), stop.clone());
        let producer = tokio::spawn(async move {
            let mut i = 0u64;
            while !s.load(Ordering::SeqCst) {
                for _ in 0..200 {
                    k.put("cost", &format!("key-{}", i % 50), format!("record {i}")).expect("put");
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let handled = Arc::new(AtomicUsize::new(0));
        let h = handled.clone();
        let mut broker = Broker::builder().kinesis(kinesis).lease_store(store.clone()).build().expect("broker");
        broker
            .subscribe("cost")
            .start_at(StartAt::TrimHorizon)
            .workers(4)
            .by_key()
            .handle(move |_d: Delivery| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
            .expect("subscribe");
        let running = broker.start().await.expect("start");
        tokio::time::sleep(Duration::from_secs(10)).await; // past start-up: rows created, leases taken
        let (calls0, handled0, t0) = (store.calls(), handled.load(Ordering::SeqCst), Instant::now());
        tokio::time::sleep(WINDOW).await;
        let (calls, took) = (store.calls(), t0.elapsed());
        let handled = handled.load(Ordering::SeqCst) - handled0;
        stop.store(true, Ordering::SeqCst);
        producer.await.expect("producer");
        running.shutdown().await;
        let minutes = took.as_secs_f64() / 60.0;
        let writes = (calls.writes - calls0.writes) as f64 / f64::from(SHARDS) / minutes;
        let reads = (calls.reads - calls0.reads) as f64 / minutes;
        println!(
            "steady state over {took:.1?}: {handled} records handled ({:.0}/s), {writes:.1} writes per shard-minute, {reads:.0} read calls per minute (epoch + lists)",
            handled as f64 / took.as_secs_f64()
        );
        // One renewal per shard every 3 s (20 a minute), plus the instance's member row (20 a
        // minute, shared by its shards), plus a little.
        let bound = 21.0 + 20.0 / f64::from(SHARDS);
        figure(
            "DynamoDB writes per shard-minute",
            &format!("{writes:.1} ({SHARDS} shards, 1 instance)"),
            &format!("<= {bound:.0} (20 + 20 / shards + 1)"),
            Some(writes <= bound),
        );
        figure("DynamoDB read calls per instance-minute", &format!("{reads:.0} (4 shards)"), "-", None);
    });
}
