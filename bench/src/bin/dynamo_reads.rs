//! Issue 13's outside measure of lease-table reads: 3 instances on one stream, through the real
//! `DynamoLeaseStore` on moto, with every read counted at the HTTP layer by items and by read
//! units computed from the responses' item sizes (as DynamoDB bills them), not by calls: a
//! `BatchGetItem` carries up to 100 keys, so calls stay flat while cost grows. Run on 16 and on
//! 64 shards (records from a `MemoryStream`, so only the leases touch the emulator), after a
//! 15 s warm-up, for 60 s of steady state each. Before the roster, one instance read 6.5 RCU/s
//! on 16 shards and 23.7 on 64, measured the same way.
//!
//! Needs `AWS_ENDPOINT_URL_DYNAMODB` (`cargo xtask bench`).

use std::time::{Duration, Instant};

use kinesis_bench::figure;
use kinesis_broker::{testing::MemoryStream, Broker, Delivery, DynamoLeaseStore};
use kinesis_integ::{endpoint, sdk_config_via, unique_account, unique_name, FaultProxy, Service};

const INSTANCES: usize = 3;
const WARM_UP: Duration = Duration::from_secs(15);
const WINDOW: Duration = Duration::from_secs(60);

/// Per instance-minute: (items read, read units).
async fn measure(shards: u32) -> (f64, f64) {
    let proxy = FaultProxy::start(&endpoint(Service::Dynamodb)).await;
    let config = sdk_config_via(&unique_account(), proxy.endpoint()).await;
    let table = unique_name("reads-leases");
    DynamoLeaseStore::new(&config, table.as_str())
        .ensure_table()
        .await
        .expect("table");
    let kinesis = MemoryStream::new();
    kinesis.create_stream("reads", shards).expect("stream");
    let mut running = Vec::new();
    for i in 0..INSTANCES {
        let mut broker = Broker::builder()
            .kinesis(kinesis.clone())
            .lease_store(DynamoLeaseStore::new(&config, table.as_str()))
            .owner_id(format!("reader-{i}"))
            .build()
            .expect("broker");
        broker
            .subscribe("reads")
            .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
            .expect("subscribe");
        running.push(broker.start().await.expect("start"));
    }
    tokio::time::sleep(WARM_UP).await;
    let (before, t0) = (proxy.reads(), Instant::now());
    tokio::time::sleep(WINDOW).await;
    let (after, took) = (proxy.reads(), t0.elapsed());
    let held: usize = running
        .iter()
        .map(|r| r.stats().shards("reads").len())
        .sum();
    for r in running {
        r.shutdown().await;
    }
    let per = took.as_secs_f64() / 60.0 * INSTANCES as f64;
    let items = (after.items - before.items) as f64 / per;
    let units = (after.units - before.units) / per;
    println!(
        "{shards} shards x {INSTANCES} instances: {held} shards held; per instance-minute {items:.0} items, {units:.0} RCU ({:.2} RCU/s), {} requests in all",
        units / 60.0,
        after.requests - before.requests
    );
    (items, units)
}

fn main() {
    // `RUST_LOG=kinesis_fleet=debug` shows what the instances do, to explain a figure.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = kinesis_bench::runtime();
    runtime.block_on(async {
        // `DYNAMO_READS_ONLY=64` measures one size alone, to explain a figure.
        let only: Option<u32> = std::env::var("DYNAMO_READS_ONLY")
            .ok()
            .and_then(|v| v.parse().ok());
        if let Some(shards) = only {
            measure(shards).await;
            return;
        }
        let (items16, units16) = measure(16).await;
        let (items64, units64) = measure(64).await;
        for (shards, items, units) in [(16, items16, units16), (64, items64, units64)] {
            figure(
                &format!("moto reads, 3 instances on {shards} shards, per instance"),
                &format!("{:.2} RCU/s ({items:.0} items/min)", units / 60.0),
                "flat in shards",
                None,
            );
        }
        let ratio = units64 / units16;
        figure(
            "moto reads per instance, 64 / 16 shards",
            &format!("{ratio:.2}x units, {:.2}x items", items64 / items16),
            "~1x (flat)",
            Some(ratio < 1.2),
        );
    });
}
