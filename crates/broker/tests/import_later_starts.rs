//! Later starts with `.import_kcl(..)`: a recorded import stands when the KCL's table no
//! longer describes the stream, a second cut-over after a rollback imports the KCL's new
//! checkpoints, and the import's retries keep to the start-up deadline (30 s of retrying, the
//! watch of the KCL on top), for every subscription (a hostile review of issue 33 proved each
//! of these wrong first).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{
    BoxFuture, Checkpoint, Holder, Lease, LeaseError, LeaseKey, LeaseResult, LeaseStore, Outcome,
    Take,
};
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{
    Broker, BrokerError, Delivery, KclImport, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_kcl_import::{ImportError, KclRow, KclTable, Target};
use tokio::time::Instant;

const STREAM: &str = "s";
const SHARD0: &str = "shardId-000000000000";
const SHARD1: &str = "shardId-000000000001";
const SHARD2: &str = "shardId-000000000002";

/// A stopped KCL application's table, whose rows a test rewrites as a KCL run would.
#[derive(Debug, Clone)]
struct Kcl {
    name: &'static str,
    rows: Arc<Mutex<Vec<KclRow>>>,
}

impl Kcl {
    fn new(name: &'static str, rows: Vec<KclRow>) -> Self {
        Self {
            name,
            rows: Arc::new(Mutex::new(rows)),
        }
    }
}

impl KclTable for Kcl {
    fn name(&self) -> &str {
        self.name
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<KclRow>, ImportError>> {
        let rows = self.rows.lock().unwrap().clone();
        Box::pin(async move { Ok(rows) })
    }
}

fn lease(shard: &str, checkpoint: &str, counter: u64) -> KclRow {
    KclRow {
        owner: Some("kcl-worker".into()),
        checkpoint: Some(checkpoint.into()),
        entity_type: Some("LEASE".into()),
        ..KclRow::lease(shard, counter)
    }
}

/// A memory store that can fail some calls as a throttled DynamoDB does (`Unavailable`).
#[derive(Debug, Clone)]
struct Faulty {
    inner: MemoryLeaseStore,
    /// Every bump of the epoch fails.
    bumps_fail: Arc<AtomicBool>,
    /// Reads of rows of these streams fail once each.
    read_fails_once: Arc<Mutex<HashSet<String>>>,
}

impl Faulty {
    fn over(table: &MemoryLeaseTable) -> Self {
        Self {
            inner: MemoryLeaseStore::over(table),
            bumps_fail: Arc::default(),
            read_fails_once: Arc::default(),
        }
    }
}

fn throttled(operation: &'static str, resource: &str) -> LeaseError {
    LeaseError::Unavailable {
        operation,
        resource: resource.to_owned(),
        source: "ProvisionedThroughputExceededException".into(),
    }
}

macro_rules! forward {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $out:ty;)*) => {
        $(fn $name<'a>(&'a self, $($arg: $ty),*) -> BoxFuture<'a, LeaseResult<$out>> {
            self.inner.$name($($arg),*)
        })*
    };
}

impl LeaseStore for Faulty {
    forward! {
        create(row: &'a Lease) -> bool;
        take(key: &'a LeaseKey, holder: &'a Holder, take: &'a Take) -> Outcome;
        renew(key: &'a LeaseKey, holder: &'a Holder, ttl: Duration, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        checkpoint(key: &'a LeaseKey, holder: &'a Holder, checkpoint: &'a Checkpoint) -> Outcome;
        release(key: &'a LeaseKey, holder: &'a Holder, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        request(key: &'a LeaseKey, asker: &'a str, holder: &'a str) -> Outcome;
        hand_over(key: &'a LeaseKey, holder: &'a Holder, to: &'a str, ttl: Duration, checkpoint: Option<&'a Checkpoint>) -> Outcome;
        delete(key: &'a LeaseKey, observed: u64) -> bool;
        evict(key: &'a LeaseKey, observed: u64, checkpoint: Option<&'a Checkpoint>, poke: Option<&'a LeaseKey>) -> Outcome;
        poke(member: &'a LeaseKey, about: &'a LeaseKey) -> bool;
        epoch(stream: &'a str) -> u64;
        list(stream: &'a str) -> Vec<Lease>;
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        if self.bumps_fail.load(Ordering::SeqCst) {
            return Box::pin(async move { Err(throttled("bump_epoch", stream)) });
        }
        self.inner.bump_epoch(stream)
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        if self.read_fails_once.lock().unwrap().remove(key.stream()) {
            return Box::pin(async move { Err(throttled("read", &key.to_string())) });
        }
        self.inner.read(key)
    }
}

/// One broker reading `subs` (stream, KCL table), each with `.import_kcl(..)`.
async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    subs: &[(&str, &Kcl)],
    owner: &str,
) -> Result<RunningBroker, BrokerError> {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .unwrap();
    for (stream, kcl) in subs {
        broker
            .subscribe(*stream)
            .import_kcl(KclImport::new((*kcl).clone()))
            .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
            .unwrap();
    }
    broker.start().await
}

fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn stream_with_records(kinesis: &MemoryStream, stream: &str) -> String {
    kinesis.create_stream(stream, 1).unwrap();
    let mut last = String::new();
    for i in 0..5 {
        last = kinesis.put(stream, "k", format!("r{i}")).unwrap().sequence;
    }
    last
}

// ---------------------------------------------------------------------------------------------
// A recorded import still fails `start()`.
// ---------------------------------------------------------------------------------------------

/// Cut over, the brokers read on; the stream is rescaled (every shard replaced, as
/// UpdateShardCount does) and the KCL's shards age out of the stream. The same code
/// (`.import_kcl(..)` kept, as the docs allow) deploys again: the import's record matches
/// the KCL's leases, so the import should write nothing and let the start go on.
#[tokio::test(start_paused = true)]
async fn a_recorded_import_lets_start_go_on_once_the_kcls_shards_aged_out() {
    let kinesis = MemoryStream::new();
    let last = stream_with_records(&kinesis, STREAM);
    let table = MemoryLeaseTable::new();
    let kcl = Kcl::new("kcl-app", vec![lease(SHARD0, &last, 12)]);
    let first = start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        &[(STREAM, &kcl)],
        "a",
    )
    .await
    .expect("the cut-over");
    kinesis.split_evenly(STREAM, SHARD0).unwrap();
    for i in 0..10 {
        kinesis.put(STREAM, &format!("k{i}"), "after").unwrap();
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    first.shutdown().await;
    kinesis.trim_shard(STREAM, SHARD0).unwrap();
    match start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        &[(STREAM, &kcl)],
        "b",
    )
    .await
    {
        Ok(running) => {
            running.shutdown().await;
        }
        Err(error) => panic!("a later start failed: {}", chain(&error)),
    }
}

/// Cut over; then the KCL's leases of the stream are deleted from its table (a multi-stream
/// KCL application dropping a former stream's leases, or an operator's clean-up), the table
/// kept. The import's record exists: a later start should go on.
#[tokio::test(start_paused = true)]
async fn a_recorded_import_lets_start_go_on_once_the_kcls_leases_are_gone() {
    let kinesis = MemoryStream::new();
    let last = stream_with_records(&kinesis, STREAM);
    let table = MemoryLeaseTable::new();
    let kcl = Kcl::new("kcl-app", vec![lease(SHARD0, &last, 12)]);
    start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        &[(STREAM, &kcl)],
        "a",
    )
    .await
    .expect("the cut-over")
    .shutdown()
    .await;
    kcl.rows.lock().unwrap().clear();
    match start(
        &kinesis,
        MemoryLeaseStore::over(&table),
        &[(STREAM, &kcl)],
        "b",
    )
    .await
    {
        Ok(running) => {
            running.shutdown().await;
        }
        Err(error) => panic!("a later start failed: {}", chain(&error)),
    }
}

// ---------------------------------------------------------------------------------------------
// The imprint can stand still although the KCL ran.
// ---------------------------------------------------------------------------------------------

/// Cut over (by hand, `import-kcl`), then roll back: the KCL runs again, shards 0 and 1 are
/// merged into 2, the KCL reads 0 and 1 to their end and 2 on, its clean-up deletes 1's
/// finished lease. Its leases now hold the same count and counter sum as at the cut-over
/// (2 leases, 30 + 30 = 40 + 20). The second cut-over must import the KCL's new checkpoints.
#[tokio::test(start_paused = true)]
async fn a_second_cut_over_after_a_rollback_imports_the_kcls_new_checkpoints() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let mut last = std::collections::HashMap::new();
    for i in 0..20 {
        let stored = kinesis.put(STREAM, &format!("k{i}"), "before").unwrap();
        last.insert(stored.shard, stored.sequence);
    }
    let kcl = Kcl::new(
        "kcl-app",
        vec![
            lease(SHARD0, &last[SHARD0], 30),
            lease(SHARD1, &last[SHARD1], 30),
        ],
    );
    let table = MemoryLeaseTable::new();
    let store = MemoryLeaseStore::over(&table);
    let target = Target {
        store: &store,
        table: "leases",
        kinesis: &kinesis,
    };
    let first = KclImport::new(kcl.clone())
        .run(target, STREAM, |_| {})
        .await
        .unwrap();
    assert_eq!(first.written(), 2);
    // The rollback: the KCL reads on, the shards are merged, the KCL follows.
    for i in 0..20 {
        kinesis.put(STREAM, &format!("k{i}"), "during").unwrap();
    }
    kinesis.merge_shards(STREAM, SHARD0, SHARD1).unwrap();
    let mut last2 = String::new();
    for i in 0..10 {
        last2 = kinesis
            .put(STREAM, &format!("k{i}"), "merged")
            .unwrap()
            .sequence;
    }
    *kcl.rows.lock().unwrap() = vec![
        lease(SHARD0, "SHARD_END", 40),
        KclRow {
            parents: vec![SHARD0.into(), SHARD1.into()],
            ..lease(SHARD2, &last2, 20)
        },
    ];
    let second = KclImport::new(kcl.clone())
        .run(target, STREAM, |_| {})
        .await
        .unwrap();
    let row0 = store
        .read(&LeaseKey::new(STREAM, SHARD0).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        !second.imported_before && row0.checkpoint == Some(Checkpoint::ShardEnd),
        "the KCL ran, yet the import took it for unchanged (imported_before = {}) and left \
         shard 0 at {:?} behind the KCL's SHARD_END; shard 2 row: {:?}",
        second.imported_before,
        row0.checkpoint,
        store
            .read(&LeaseKey::new(STREAM, SHARD2).unwrap())
            .await
            .unwrap()
            .map(|r| r.checkpoint)
    );
}

// ---------------------------------------------------------------------------------------------
// The start-up deadline.
// ---------------------------------------------------------------------------------------------

/// The lease table throttles after the watch (every epoch bump fails): `start()` should
/// fail within its deadline (30 s), as the docs say of every start-up call.
#[tokio::test(start_paused = true)]
async fn a_failing_import_call_fails_start_within_the_deadline() {
    let kinesis = MemoryStream::new();
    let last = stream_with_records(&kinesis, STREAM);
    let table = MemoryLeaseTable::new();
    let store = Faulty::over(&table);
    store.bumps_fail.store(true, Ordering::SeqCst);
    let kcl = Kcl::new("kcl-app", vec![lease(SHARD0, &last, 12)]);
    let started = Instant::now();
    let result = start(&kinesis, store, &[(STREAM, &kcl)], "a").await;
    let elapsed = started.elapsed();
    match result {
        Err(BrokerError::Unreachable {
            operation, waited, ..
        }) => {
            assert_eq!(operation, "bump_epoch");
            // 30 s of retrying, and the deliberate watch of the KCL (21.05 s) on top.
            let watch =
                kinesis_kcl_import::liveness::watch_window(kinesis_kcl_import::DEFAULT_FAILOVER);
            assert!(
                elapsed <= Duration::from_secs(31) + watch,
                "start() failed only {elapsed:?} in (waited {waited:?}), past its deadline"
            );
        }
        Err(other) => panic!("{}", chain(&other)),
        Ok(_) => panic!("started"),
    }
}

/// Two streams cut over at once, each with `.import_kcl(..)` (a broker reading both): each
/// import watches 21 s, so the second stream's checks run past the 30 s deadline and one
/// throttled read is not retried at all. Control: the same throttle on the first stream's
/// check (before the deadline) is retried.
#[tokio::test(start_paused = true)]
async fn one_throttled_call_after_a_second_import_does_not_fail_start() {
    for (throttled_stream, control) in [("s@members", true), ("t@members", false)] {
        let kinesis = MemoryStream::new();
        let last_s = stream_with_records(&kinesis, "s");
        let last_t = stream_with_records(&kinesis, "t");
        let kcl_s = Kcl::new("kcl-s", vec![lease(SHARD0, &last_s, 12)]);
        let kcl_t = Kcl::new("kcl-t", vec![lease(SHARD0, &last_t, 12)]);
        let table = MemoryLeaseTable::new();
        let store = Faulty::over(&table);
        store
            .read_fails_once
            .lock()
            .unwrap()
            .insert(throttled_stream.to_owned());
        let started = Instant::now();
        match start(&kinesis, store, &[("s", &kcl_s), ("t", &kcl_t)], "a").await {
            Ok(running) => {
                running.shutdown().await;
            }
            Err(error) => panic!(
                "{} throttled once ({}): start() failed {:?} in: {}",
                throttled_stream,
                if control {
                    "control"
                } else {
                    "after the second import"
                },
                started.elapsed(),
                chain(&error)
            ),
        }
    }
}
