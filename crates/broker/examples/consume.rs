//! Consume a real stream with a DynamoDB lease table, until Ctrl-C or SIGTERM.
//!
//! `cargo run --example consume --features dynamodb-lease -- STREAM TABLE [trim-horizon]`
//!
//! Region, credentials and endpoints come from the environment as in any AWS SDK program
//! (`AWS_REGION`, `AWS_ENDPOINT_URL`, ...). The table is created if missing. Each handled
//! record is printed as `owner shard sequence partition-key`.

use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, StartAt, TableSetup};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(stream), Some(table)) = (args.next(), args.next()) else {
        eprintln!("usage: consume STREAM TABLE [trim-horizon]");
        std::process::exit(2);
    };
    let start_at = match args.next().as_deref() {
        Some("trim-horizon") => StartAt::TrimHorizon,
        _ => StartAt::Latest,
    };
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let broker = Broker::builder()
        .sdk_config(&config)
        .dynamo_lease_table(
            DynamoLeaseStore::new(&config, table),
            TableSetup::CreateIfMissing,
        )
        .build()?;
    let owner = broker.owner_id().to_owned();
    let mut broker = broker;
    broker
        .subscribe(stream)
        .start_at(start_at)
        .workers(8)
        .by_key()
        .handle(move |d: Delivery| {
            let owner = owner.clone();
            async move {
                println!(
                    "{owner} {} {} {}",
                    d.shard(),
                    d.sequence(),
                    d.partition_key()
                );
                Ok::<(), std::io::Error>(())
            }
        })?;
    let running = broker.start().await?;
    eprintln!("consuming as {}; Ctrl-C to stop", running.owner_id());
    let report = running.run_until_signal().await?;
    eprintln!("stopped; handlers finished: {}", report.handlers_finished);
    Ok(())
}
