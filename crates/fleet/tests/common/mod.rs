//! Test support: a consumer made of a coordinator and a dispatcher that records deliveries.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, DispatchHandle, Dispatcher, Handler, Workers,
};
use kinesis_fleet::{Coordinator, CoordinatorHandle, ReaderConfig};
use kinesis_kpl::{Aggregator, Pushed};
use kinesis_lease_core::LeaseStore;
use kinesis_stream_core::{KinesisApi, PutEntry, StartAt};
use kinesis_stream_memory::MemoryStream;

/// One handled record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub owner: String,
    pub shard: String,
    pub key: String,
    pub sequence: String,
    pub payload: String,
}

pub type Log = Arc<Mutex<Vec<Seen>>>;

pub struct Consumer {
    pub coordinator: CoordinatorHandle,
    pub dispatch: DispatchHandle,
    pub log: Log,
}

pub fn config(stream: &str, owner: &str, start_at: StartAt) -> ReaderConfig {
    let mut config = ReaderConfig::new(stream, owner);
    config.start_at = start_at;
    config
}

pub fn start(
    kinesis: &MemoryStream,
    store: Arc<dyn LeaseStore>,
    config: ReaderConfig,
    workers: Workers,
) -> Consumer {
    start_with_log(kinesis, store, config, workers, Log::default())
}

pub fn start_with_log(
    kinesis: &MemoryStream,
    store: Arc<dyn LeaseStore>,
    config: ReaderConfig,
    workers: Workers,
    log: Log,
) -> Consumer {
    start_over(Arc::new(kinesis.clone()), store, config, workers, log)
}

/// As [`start_with_log`], over any `KinesisApi` (a decorator of a `MemoryStream`).
pub fn start_over(
    kinesis: Arc<dyn KinesisApi>,
    store: Arc<dyn LeaseStore>,
    config: ReaderConfig,
    workers: Workers,
    log: Log,
) -> Consumer {
    let (sender, receiver) = channel(64);
    let owner = config.owner.clone();
    let l = log.clone();
    let handler = Handler::one(move |d: Delivery| {
        let (l, owner) = (l.clone(), owner.clone());
        async move {
            l.lock().unwrap().push(Seen {
                owner,
                shard: d.shard().to_owned(),
                key: d.partition_key().to_owned(),
                sequence: d.sequence().to_string(),
                payload: String::from_utf8_lossy(d.payload()).into_owned(),
            });
            Ok::<(), std::io::Error>(())
        }
    });
    let dispatch = Dispatcher::spawn(
        receiver,
        handler,
        DispatchConfig {
            workers,
            ..Default::default()
        },
    )
    .unwrap();
    let coordinator = Coordinator::spawn(config, kinesis, store, sender);
    Consumer {
        coordinator,
        dispatch,
        log,
    }
}

/// A serial consumer of stream `s` from the horizon, over a store of its own on `table`,
/// recording into `log`: one of several instances sharing one lease table.
pub fn on_table(
    kinesis: &MemoryStream,
    table: &kinesis_lease_memory::MemoryLeaseTable,
    owner: &str,
    log: &Log,
) -> Consumer {
    start_with_log(
        kinesis,
        Arc::new(kinesis_lease_memory::MemoryLeaseStore::over(table)),
        config("s", owner, StartAt::TrimHorizon),
        Workers::Serial,
        log.clone(),
    )
}

impl Consumer {
    /// Crash: everything stops at once, nothing is written.
    pub fn crash(self) {
        self.coordinator.abort();
        self.dispatch.close();
    }

    /// Graceful stop: stop reading, finish handlers, write final checkpoints, release.
    pub async fn stop(self) {
        self.coordinator.stop_reading();
        self.dispatch.shutdown(Duration::from_secs(5)).await;
        self.coordinator.release_all().await;
    }
}

/// Waits (in paused time) until `log` holds `n` records, or panics after `limit`.
pub async fn wait_for_count(log: &Log, n: usize, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let len = log.lock().unwrap().len();
        if len >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {len} of {n} records after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (in paused time) until `log` holds `n` distinct payloads, or panics after `limit`.
pub async fn wait_for_distinct(log: &Log, n: usize, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let distinct = {
            let log = log.lock().unwrap();
            log.iter()
                .map(|s| s.payload.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len()
        };
        if distinct >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {distinct} of {n} distinct records after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts that `log` holds `expected` records, each payload once.
pub fn assert_exactly_once(log: &Log, expected: usize) {
    let mut payloads: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    let total = payloads.len();
    payloads.sort();
    payloads.dedup();
    assert_eq!(
        (total, payloads.len()),
        (expected, expected),
        "duplicates or losses"
    );
}

/// Puts `n` records over `keys` keys; payload `key#i`.
pub fn put_many(kinesis: &MemoryStream, stream: &str, keys: usize, from: usize, n: usize) {
    for i in from..from + n {
        let key = format!("key-{}", i % keys);
        kinesis.put(stream, &key, format!("{key}#{i}")).unwrap();
    }
}

/// The payloads handled per key, in handling order.
pub fn per_key(log: &Log) -> HashMap<String, Vec<usize>> {
    let mut out: HashMap<String, Vec<usize>> = HashMap::new();
    for seen in log.lock().unwrap().iter() {
        let n = seen.payload.rsplit('#').next().unwrap().parse().unwrap();
        out.entry(seen.key.clone()).or_default().push(n);
    }
    out
}

/// Aggregates records `from..from + n` (payload `key#i`, keys `key-{i % keys}`) into KPL
/// records of at most `per_aggregate` sub-records and puts them at hash key `route` (else
/// where their first sub-record belongs); returns their sequence numbers.
pub async fn put_aggregated(
    kinesis: &MemoryStream,
    keys: usize,
    from: usize,
    n: usize,
    per_aggregate: usize,
    route: Option<u128>,
) -> Vec<String> {
    let mut entries = Vec::new();
    let mut agg = Aggregator::new();
    for i in from..from + n {
        let key = format!("key-{}", i % keys);
        let pushed = agg
            .push(&key, None, Bytes::from(format!("{key}#{i}")))
            .unwrap();
        assert_eq!(pushed, Pushed::Added);
        if agg.len() == per_aggregate {
            entries.push(agg.finish().unwrap());
        }
    }
    entries.extend(agg.finish());
    let puts: Vec<PutEntry> = entries
        .into_iter()
        .map(|e| {
            PutEntry::new(e.data, e.partition_key)
                .with_hash_key(route.unwrap_or(e.explicit_hash_key))
        })
        .collect();
    kinesis
        .put_records("s", &puts)
        .await
        .unwrap()
        .into_iter()
        .map(|o| match o {
            kinesis_stream_core::PutOutcome::Stored { sequence, .. } => sequence,
            failed => panic!("{failed:?}"),
        })
        .collect()
}
