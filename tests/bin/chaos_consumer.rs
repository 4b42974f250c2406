//! A consumer process of the chaos campaign (`cargo xtask chaos`): reads STREAM with a
//! DynamoDB lease table in MODE (`serial`, `workers` or `bykey`) and appends every record its
//! handler settled to OUTFILE as
//! `shard<TAB>sequence<TAB>subsequence<TAB>key<TAB>payload<TAB>began-ms<TAB>ended-ms`
//! (unix milliseconds, written to the kernel before the handler returns, so a SIGKILL loses
//! nothing it settled), and each take and loss of a shard as `TAKE` or `LOST`, the shard, and
//! the time. Runs until SIGTERM (graceful shutdown) or SIGKILL.
//!
//! Usage: `chaos-consumer ACCOUNT TABLE STREAM OWNER OUTFILE MODE [SLOW_KEY FLAKY_KEY]`;
//! endpoints from the environment. A record of SLOW_KEY takes its handler 30 ms; a record of
//! FLAKY_KEY fails its first attempt (and is retried). `-` for neither.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, StartAt};

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (account, table, stream, owner, outfile, mode) = match &args[..] {
        [a, t, s, o, f, m, ..] => (a, t, s, o, f, m.as_str()),
        _ => {
            eprintln!(
                "usage: chaos-consumer ACCOUNT TABLE STREAM OWNER OUTFILE MODE [SLOW_KEY FLAKY_KEY]"
            );
            std::process::exit(2);
        }
    };
    let slow = args.get(6).filter(|k| *k != "-").cloned();
    let flaky = args.get(7).filter(|k| *k != "-").cloned();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,aws=warn,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let config = kinesis_integ::sdk_config_for(account).await;
    let file = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(outfile)?,
    ));
    let mut broker = Broker::builder()
        .sdk_config(&config)
        .lease_store(DynamoLeaseStore::new(&config, table.as_str()))
        .owner_id(owner.as_str())
        .poll_interval(Duration::from_millis(200))
        .build()?;
    let subscription = broker
        .subscribe(stream.as_str())
        .start_at(StartAt::TrimHorizon);
    let subscription = match mode {
        "serial" => subscription,
        "workers" => subscription.workers(4),
        "bykey" => subscription.workers(4).by_key(),
        other => {
            eprintln!("unknown mode {other}: serial, workers or bykey");
            std::process::exit(2);
        }
    };
    // Takes and losses go to the log too (`TAKE` / `LOST` in the shard's place, then the
    // shard): the checker reads a process's records of a shard per holding.
    let marker = |file: Arc<Mutex<std::fs::File>>, what: &'static str| {
        move |info: kinesis_broker::ShardInfo| {
            let file = file.clone();
            async move {
                let at = unix_ms();
                let line = format!("{what}\t{}\t-\t-\t-\t{at}\t{at}\n", info.shard);
                if let Ok(mut f) = file.lock() {
                    let _ = f.write_all(line.as_bytes());
                }
            }
        }
    };
    let subscription = subscription.hooks(
        kinesis_broker::Hooks::new()
            .on_taken(marker(file.clone(), "TAKE"))
            .on_lost(marker(file.clone(), "LOST")),
    );
    // Attempts of FLAKY_KEY's records, by sequence: the first of each fails.
    let attempts: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    subscription.handle(move |d: Delivery| {
        let (file, slow, flaky, attempts) =
            (file.clone(), slow.clone(), flaky.clone(), attempts.clone());
        async move {
            let began = unix_ms();
            if slow.as_deref() == Some(d.partition_key()) {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            if flaky.as_deref() == Some(d.partition_key())
                && attempts
                    .lock()
                    .map_err(|_| std::io::Error::other("poisoned"))?
                    .insert(d.sequence_text().to_owned())
            {
                return Err(std::io::Error::other("flaky key: first attempt fails"));
            }
            let line = format!(
                "{}\t{}\t{}\t{}\t{}\t{began}\t{}\n",
                d.shard(),
                d.sequence().number(),
                d.subsequence().map_or("-".to_owned(), |s| s.to_string()),
                d.partition_key(),
                String::from_utf8_lossy(d.payload()),
                unix_ms(),
            );
            file.lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .write_all(line.as_bytes())
        }
    })?;
    let running = broker.start().await?;
    eprintln!("{owner} running in {mode}");
    running.run_until_signal().await?;
    eprintln!("{owner} stopped");
    Ok(())
}
