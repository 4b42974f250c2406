//! Metrics in Prometheus' text format: the broker's metrics (feature `metrics`) recorded by
//! `metrics-exporter-prometheus`, over an in-process stream, printed as a scrape would see
//! them. Serve `handle.render()` at `/metrics` from your service's HTTP server (or enable the
//! exporter's `http-listener` feature and call `PrometheusBuilder::install`).
//!
//! `cargo run --example prometheus --features metrics`

use std::time::Duration;

use kinesis_broker::{testing::MemoryStream, Broker, Delivery, Publisher, PutEntry, StartAt};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;

    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 2)?;
    let entries = (0..100)
        .map(|i| PutEntry::new(format!("order {i}"), format!("customer-{}", i % 7)))
        .collect();
    Publisher::new(kinesis.clone(), "orders")
        .put_all(entries)
        .await?;

    let mut broker = Broker::builder().kinesis(kinesis).build()?;
    broker
        .subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .workers(2)
        .by_key()
        .handle(|_order: Delivery| async { Ok::<(), std::io::Error>(()) })?;
    let running = broker.start().await?;
    while running
        .stats()
        .shards("orders")
        .iter()
        .map(|s| s.settled)
        .sum::<u64>()
        < 100
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // RecordsProcessed is published at each renewal (every 3 s) and when a shard is let go:
    // after the shutdown it holds every order.
    running.shutdown().await;
    println!("{}", handle.render());
    Ok(())
}
