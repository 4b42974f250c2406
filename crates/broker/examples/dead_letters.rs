//! Dead letters: a record that keeps failing is retried in place (forever, by default, which
//! holds its shard's checkpoint back). Capping the attempts with a dead-letter callback sends
//! it elsewhere (a queue, a table) and lets the shard move on. In process.
//!
//! `cargo run --example dead_letters`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, Publisher, PutEntry, RetryPolicy, StartAt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("payments", 1)?;
    let entries = vec![
        PutEntry::new("10.00", "acct-1"),
        PutEntry::new("not a number", "acct-2"),
        PutEntry::new("7.50", "acct-3"),
    ];
    Publisher::new(kinesis.clone(), "payments")
        .put_all(entries)
        .await?;

    let dead: Arc<Mutex<Vec<String>>> = Arc::default();
    let paid: Arc<Mutex<Vec<f64>>> = Arc::default();
    let (d, p) = (dead.clone(), paid.clone());
    let mut broker = Broker::builder().kinesis(kinesis).build()?;
    broker
        .subscribe("payments")
        .start_at(StartAt::TrimHorizon)
        .retry(RetryPolicy::default().max_attempts(3).then_dead_letter(
            move |delivery: Delivery, error| {
                let d = d.clone();
                async move {
                    // Your queue here; an Err leaves the record unsettled and logged.
                    println!(
                        "dead letter: {:?} at {} ({error})",
                        String::from_utf8_lossy(delivery.payload()),
                        delivery.sequence()
                    );
                    d.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(String::from_utf8_lossy(delivery.payload()).into_owned());
                    Ok::<(), std::io::Error>(())
                }
            },
        ))
        .handle(move |delivery: Delivery| {
            let p = p.clone();
            async move {
                let amount: f64 = String::from_utf8_lossy(delivery.payload()).parse()?;
                p.lock().unwrap_or_else(|p| p.into_inner()).push(amount);
                Ok::<(), std::num::ParseFloatError>(())
            }
        })?;
    let running = broker.start().await?;
    let waited = tokio::time::Instant::now();
    while paid.lock().unwrap_or_else(|p| p.into_inner()).len() < 2
        || dead.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    {
        if waited.elapsed() > Duration::from_secs(30) {
            return Err("the bad payment was not dead-lettered".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "paid {:?}; dead letters {:?}",
        paid.lock().unwrap_or_else(|p| p.into_inner()),
        dead.lock().unwrap_or_else(|p| p.into_inner())
    );
    running.shutdown().await;
    Ok(())
}
