//! A consumer process of the chaos campaign (`cargo xtask chaos`): reads STREAM with a
//! DynamoDB lease table in MODE (`serial`, `workers` or `bykey`) and appends every record its
//! handler settled to OUTFILE as
//! `shard<TAB>sequence<TAB>subsequence<TAB>key<TAB>payload<TAB>began-ms<TAB>ended-ms`
//! (unix milliseconds, written to the kernel before the handler returns, so a SIGKILL loses
//! nothing it settled), each failed attempt the same after `FAIL`, and each take and loss of a shard as `TAKE` or `LOST`, the shard, and
//! the time. Runs until SIGTERM (graceful shutdown) or SIGKILL.
//!
//! Usage: `chaos-consumer ACCOUNT TABLE STREAM OWNER OUTFILE MODE [SLOW_KEY FLAKY_KEY
//! FAN_OUT]`; endpoints from the environment. A record of SLOW_KEY takes its handler 30 ms; a
//! record of FLAKY_KEY fails its first attempt (and is retried); with FAN_OUT, the process
//! reads by enhanced fan-out through that stream consumer instead of polling. `-` for none.
//! With `CHAOS_QUIET=1` in the environment, the subscription runs with quiet idle shards
//! (`quiet_idle_shards()`).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, StartAt};
use kinesis_lease_core::{
    BoxFuture, Checkpoint, Epochs, Holder, Lease, LeaseKey, LeaseResult, Load, Outcome, Take,
};

/// The DynamoDB store, with every checkpoint write that landed logged (`CKPT`, the shard,
/// the checkpoint, and when the write was sent): the runner checks that no checkpoint passed
/// a record not yet handled when it was sent.
#[derive(Debug, Clone)]
struct CheckpointLog {
    inner: Arc<DynamoLeaseStore>,
    file: Arc<Mutex<std::fs::File>>,
}

impl CheckpointLog {
    fn note(
        &self,
        key: &LeaseKey,
        checkpoint: Option<&Checkpoint>,
        sent: u128,
        out: &LeaseResult<Outcome>,
    ) {
        let (Some(checkpoint), Ok(Outcome::Written(_))) = (checkpoint, out) else {
            return;
        };
        let line = format!(
            "CKPT\t{}\t{checkpoint}\t-\t-\t{sent}\t{}\n",
            key.shard(),
            unix_ms()
        );
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

impl LeaseStore for CheckpointLog {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.create(row)
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.take(key, holder, take)
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = unix_ms();
            let out = self.inner.renew(key, holder, ttl, checkpoint).await;
            self.note(key, checkpoint, sent, &out);
            out
        })
    }
    // Forwarded with the load (the trait's default drops it, and the loads would never reach
    // the table: the simulation's fault layer did so, and its seeds balanced by load shared by
    // count).
    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = unix_ms();
            let out = self
                .inner
                .renew_with_load(key, holder, ttl, checkpoint, load)
                .await;
            self.note(key, checkpoint, sent, &out);
            out
        })
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = unix_ms();
            let out = self.inner.checkpoint(key, holder, checkpoint).await;
            self.note(key, Some(checkpoint), sent, &out);
            out
        })
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = unix_ms();
            let out = self.inner.release(key, holder, checkpoint).await;
            self.note(key, checkpoint, sent, &out);
            out
        })
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.request(key, asker, holder)
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let sent = unix_ms();
            let out = self.inner.hand_over(key, holder, to, ttl, checkpoint).await;
            self.note(key, checkpoint, sent, &out);
            out
        })
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.delete(key, observed)
    }
    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.evict(key, observed, checkpoint, poke)
    }
    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.poke(member, about)
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        self.inner.bump_epoch(stream)
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        self.inner.epoch(stream)
    }
    fn epochs<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Epochs>> {
        self.inner.epochs(stream)
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        self.inner.read(key)
    }
    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        self.inner.read_eventually(key)
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        self.inner.list(stream)
    }
}

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
                "usage: chaos-consumer ACCOUNT TABLE STREAM OWNER OUTFILE MODE [SLOW_KEY FLAKY_KEY FAN_OUT]"
            );
            std::process::exit(2);
        }
    };
    let slow = args.get(6).filter(|k| *k != "-").cloned();
    let flaky = args.get(7).filter(|k| *k != "-").cloned();
    let fan_out = args.get(8).filter(|k| *k != "-").cloned();
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
        .lease_store(CheckpointLog {
            inner: Arc::new(DynamoLeaseStore::new(&config, table.as_str())),
            file: file.clone(),
        })
        .owner_id(owner.as_str())
        .poll_interval(Duration::from_millis(200))
        .build()?;
    let subscription = broker
        .subscribe(stream.as_str())
        .start_at(StartAt::TrimHorizon);
    let subscription = match fan_out {
        Some(consumer) => subscription.fan_out(consumer),
        None => subscription,
    };
    let subscription = if std::env::var("CHAOS_QUIET").is_ok_and(|v| v == "1") {
        subscription.quiet_idle_shards()
    } else {
        subscription
    };
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
            let fails = flaky.as_deref() == Some(d.partition_key())
                && attempts
                    .lock()
                    .map_err(|_| std::io::Error::other("poisoned"))?
                    .insert(d.sequence_text().to_owned());
            // A failed attempt is logged too (`FAIL`, then the same fields): a handler began.
            let line = format!(
                "{}{}\t{}\t{}\t{}\t{}\t{began}\t{}\n",
                if fails { "FAIL\t" } else { "" },
                d.shard(),
                d.sequence().number(),
                d.subsequence().map_or("-".to_owned(), |s| s.to_string()),
                d.partition_key(),
                String::from_utf8_lossy(d.payload()),
                unix_ms(),
            );
            file.lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .write_all(line.as_bytes())?;
            if fails {
                return Err(std::io::Error::other("flaky key: first attempt fails"));
            }
            Ok(())
        }
    })?;
    let running = broker.start().await?;
    eprintln!("{owner} running in {mode}");
    running.run_until_signal().await?;
    eprintln!("{owner} stopped");
    Ok(())
}
