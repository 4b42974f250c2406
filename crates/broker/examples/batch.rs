//! A batch handler: up to 100 records per call (or what arrived within 50 ms of the first),
//! as a bulk insert into a database would take them. When some records of a batch fail,
//! `BatchFailure::items` names them: the others settle, and only the failed ones (with the
//! later records of their keys, to keep each key in order) are retried. In process.
//!
//! `cargo run --example batch`

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{BatchFailure, Broker, Delivery, Publisher, PutEntry, StartAt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("readings", 2)?;
    let entries = (0..500)
        .map(|i| PutEntry::new(format!("{i}"), format!("sensor-{}", i % 10)))
        .collect();
    Publisher::new(kinesis.clone(), "readings")
        .put_all(entries)
        .await?;

    // The "database": rows stored, and reading 42 that it refuses the first time.
    let stored: Arc<Mutex<BTreeSet<u32>>> = Arc::default();
    let refused_once = Arc::new(Mutex::new(false));
    let mut broker = Broker::builder().kinesis(kinesis).build()?;
    let (db, refused) = (stored.clone(), refused_once.clone());
    broker
        .subscribe("readings")
        .start_at(StartAt::TrimHorizon)
        .batch(100)
        .handle(move |batch: Vec<Delivery>| {
            let (db, refused) = (db.clone(), refused.clone());
            async move {
                let mut failed = Vec::new();
                let mut db = db.lock().unwrap_or_else(|p| p.into_inner());
                for (i, delivery) in batch.iter().enumerate() {
                    let value: u32 = String::from_utf8_lossy(delivery.payload())
                        .parse()
                        .map_err(BatchFailure::all)?;
                    let mut refused = refused.lock().unwrap_or_else(|p| p.into_inner());
                    if value == 42 && !*refused {
                        *refused = true;
                        failed.push(i);
                        continue;
                    }
                    db.insert(value);
                }
                println!("batch of {}: {} failed", batch.len(), failed.len());
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(BatchFailure::items(failed, "constraint violation"))
                }
            }
        })?;
    let running = broker.start().await?;
    let waited = tokio::time::Instant::now();
    while stored.lock().unwrap_or_else(|p| p.into_inner()).len() < 500 {
        if waited.elapsed() > Duration::from_secs(30) {
            return Err("not every reading was stored".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("all 500 readings stored; 42 on its second attempt");
    running.shutdown().await;
    Ok(())
}
