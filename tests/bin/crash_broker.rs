//! A broker process for the multi-process crash test: reads STREAM with a DynamoDB lease
//! table, appends every handled record to OUTFILE as
//! `shard<TAB>sequence<TAB>key<TAB>unix-ms<TAB>payload` (the time its handler began on it), and
//! runs until SIGTERM (graceful) or SIGKILL. The broker's logs (`info`, or `RUST_LOG`) go to
//! stderr without colours.
//!
//! Usage: `crash-broker ACCOUNT TABLE STREAM OWNER OUTFILE [FAN_OUT_CONSUMER]`; endpoints
//! from the environment. With a consumer name, shards are read by enhanced fan-out.
//! By default 4 workers by key; `BROKER_BY_LOAD=1` makes the handler serial and places shards
//! by load (`balance_by_load()`), and `BROKER_HANDLER_MS=N` makes each handler call wait N ms
//! before it writes its line (for the multi-process balancing test).

use std::io::Write;
use std::sync::{Arc, Mutex};

use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, StartAt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (account, table, stream, owner, outfile, fan_out) = match &args[..] {
        [a, t, s, o, f] => (a, t, s, o, f, None),
        [a, t, s, o, f, consumer] => (a, t, s, o, f, Some(consumer.clone())),
        _ => {
            eprintln!("usage: crash-broker ACCOUNT TABLE STREAM OWNER OUTFILE [FAN_OUT_CONSUMER]");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,aws=warn,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let config = kinesis_integ::sdk_config_for(account).await;
    let file = Arc::new(Mutex::new(std::fs::File::create(outfile)?));
    let mut broker = Broker::builder()
        .sdk_config(&config)
        .lease_store(DynamoLeaseStore::new(&config, table.as_str()))
        .owner_id(owner.as_str())
        .poll_interval(std::time::Duration::from_millis(200))
        .build()?;
    let subscription = broker.subscribe(stream.as_str());
    let subscription = match fan_out {
        Some(consumer) => subscription.fan_out(consumer),
        None => subscription,
    };
    let by_load = std::env::var("BROKER_BY_LOAD").is_ok_and(|v| v == "1");
    let cost = std::time::Duration::from_millis(
        std::env::var("BROKER_HANDLER_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0),
    );
    let subscription = subscription.start_at(StartAt::TrimHorizon);
    let subscription = if by_load {
        subscription.balance_by_load()
    } else {
        subscription.workers(4).by_key()
    };
    subscription.handle(move |d: Delivery| {
        let file = file.clone();
        async move {
            if !cost.is_zero() {
                tokio::time::sleep(cost).await;
            }
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let line = format!(
                "{}\t{}\t{}\t{at}\t{}\n",
                d.shard(),
                d.sequence(),
                d.partition_key(),
                String::from_utf8_lossy(d.payload())
            );
            // Written to the kernel before the ack: a SIGKILL cannot lose it.
            file.lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .write_all(line.as_bytes())
        }
    })?;
    let running = broker.start().await?;
    eprintln!("{owner} running");
    running.run_until_signal().await?;
    Ok(())
}
