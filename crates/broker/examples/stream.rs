//! A stream of deliveries: the subscription as a `tokio_stream::Stream` your own loop pulls
//! from, acking each delivery once processed. The checkpoint never passes a delivery not yet
//! acked. In process, no AWS account.
//!
//! `cargo run --example stream`

use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Publisher, PutEntry, StartAt};
use tokio_stream::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("clicks", 2)?;
    let entries = (0..30)
        .map(|i| PutEntry::new(format!("click {i}"), format!("user-{}", i % 4)))
        .collect();
    Publisher::new(kinesis.clone(), "clicks")
        .put_all(entries)
        .await?;

    let mut broker = Broker::builder().kinesis(kinesis).build()?;
    let mut deliveries = broker
        .subscribe("clicks")
        .start_at(StartAt::TrimHorizon)
        .stream()?;
    let running = broker.start().await?;

    let mut handled = 0;
    while handled < 30 {
        let delivery = tokio::time::timeout(Duration::from_secs(20), deliveries.next())
            .await?
            .ok_or("the stream ended early")?;
        // Process, then ack: only acked deliveries can be checkpointed.
        handled += 1;
        if handled % 10 == 0 {
            println!(
                "{handled}: {} from {} ({})",
                String::from_utf8_lossy(delivery.payload()),
                delivery.partition_key(),
                delivery.shard()
            );
        }
        delivery.ack();
    }
    // Let the next renewal write the acked positions, then leave cleanly.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let totals = running.stats().totals();
    println!(
        "delivered {}, settled {}, in flight {}",
        totals.delivered, totals.settled, totals.in_flight
    );
    if totals.settled != 30 {
        return Err(format!("{} of 30 settled", totals.settled).into());
    }
    running.shutdown().await;
    Ok(())
}
