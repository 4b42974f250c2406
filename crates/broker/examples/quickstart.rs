//! Quickstart: an in-process 4-shard stream, orders of a handful of customers, consumed with
//! two lanes by customer, checkpointed and shut down cleanly. No AWS account, no network.
//!
//! `cargo run --example quickstart`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    lease::LeaseStore, testing::MemoryStream, Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable,
    Publisher, PutEntry, StartAt,
};

const CUSTOMERS: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];
const ORDERS_EACH: usize = 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 4)?;

    // Publish 100 orders: order n of each customer says so in its payload.
    let entries = (0..ORDERS_EACH)
        .flat_map(|n| {
            CUSTOMERS
                .iter()
                .map(move |c| PutEntry::new(format!("{c} order {n}"), *c))
        })
        .collect();
    let stored = Publisher::new(kinesis.clone(), "orders")
        .put_all(entries)
        .await?;
    println!(
        "published {} orders over {} customers",
        stored.len(),
        CUSTOMERS.len()
    );

    let seen: Arc<Mutex<BTreeMap<String, Vec<usize>>>> = Arc::default();
    let done = Arc::new(tokio::sync::Notify::new());
    // The lease table, kept here to show the final checkpoints after shutdown.
    let table = MemoryLeaseTable::new();
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .build()?;
    let (s, d) = (seen.clone(), done.clone());
    broker
        .subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .workers(2)
        .by_key()
        .handle(move |delivery: Delivery| {
            let (s, d) = (s.clone(), d.clone());
            async move {
                let text = String::from_utf8_lossy(delivery.payload()).into_owned();
                let n: usize = text.rsplit(' ').next().unwrap_or("0").parse()?;
                let mut seen = s.lock().unwrap_or_else(|p| p.into_inner());
                let orders = seen.entry(delivery.partition_key().to_owned()).or_default();
                orders.push(n);
                let total: usize = seen.values().map(Vec::len).sum();
                if total.is_multiple_of(25) {
                    println!(
                        "handled {total} orders (last: {text} from {})",
                        delivery.shard()
                    );
                }
                if total == CUSTOMERS.len() * ORDERS_EACH {
                    d.notify_one();
                }
                Ok::<(), std::num::ParseIntError>(())
            }
        })?;

    let running = broker.start().await?;
    println!("broker {} started", running.owner_id());
    tokio::time::timeout(Duration::from_secs(20), done.notified()).await?;

    for (customer, orders) in seen.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let in_order = orders.windows(2).all(|w| w[0] < w[1]);
        println!(
            "{customer:>6}: {} orders, in order: {in_order}",
            orders.len()
        );
        if !in_order {
            return Err(format!("{customer}'s orders were handled out of order").into());
        }
    }
    let stats = running.stats();
    for shard in stats.shards("orders") {
        println!(
            "{}: delivered {}, settled {}, in flight {}",
            shard.shard, shard.delivered, shard.settled, shard.in_flight
        );
    }
    let report = running.shutdown().await;
    println!("shut down cleanly: {}", report.handlers_finished);
    // Shutdown wrote each shard's final checkpoint with its release, in one write per shard.
    for row in MemoryLeaseStore::over(&table).list("orders").await? {
        let checkpoint = row
            .checkpoint
            .as_ref()
            .map_or("none".to_owned(), ToString::to_string);
        println!(
            "lease {}: owner {:?}, checkpoint {checkpoint}",
            row.key, row.owner
        );
    }
    Ok(())
}
