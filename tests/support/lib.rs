//! Support for the integration tests run by `cargo xtask integ`: endpoints, per-test accounts
//! and names.
//!
//! The endpoints come from the environment (`AWS_ENDPOINT_URL_DYNAMODB`,
//! `AWS_ENDPOINT_URL_KINESIS`, or `AWS_ENDPOINT_URL` for all services), which `aws-config`
//! reads by itself: the code under test has no test-only endpoint plumbing. Without them every
//! test fails loudly, naming the command to use.

mod broker_process;
mod kcl;
mod patience;
mod proxy;
mod read_meter;

pub use broker_process::{read_log, spawn_crash_broker, unix_ms, wait_all_handled, Line, Reaper};
pub use kcl::{kcl_consumer, kcl_consumers, KclProcess, KclRun};
pub use patience::{patience, PATIENCE};
pub use proxy::FaultProxy;
pub use read_meter::Reads;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_kinesis::config::Credentials;

/// The AWS services the suite talks to.
#[derive(Debug, Clone, Copy)]
pub enum Service {
    /// DynamoDB (moto's server, or `AWS_ENDPOINT_URL`).
    Dynamodb,
    /// Kinesis (kinesis-local, or `AWS_ENDPOINT_URL`).
    Kinesis,
}

impl Service {
    fn env(self) -> &'static str {
        match self {
            Service::Dynamodb => "AWS_ENDPOINT_URL_DYNAMODB",
            Service::Kinesis => "AWS_ENDPOINT_URL_KINESIS",
        }
    }
}

/// The endpoint of `service`, or a panic that says to run `cargo xtask integ`.
pub fn endpoint(service: Service) -> String {
    std::env::var(service.env())
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| {
            panic!(
                "no endpoint for {service:?}: neither {} nor AWS_ENDPOINT_URL is set. \
                 Run the integration suite with `cargo xtask integ`, which starts the emulators.",
                service.env()
            )
        })
}

/// A process-unique number, to keep tests from sharing state.
pub fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos / 1_000 % 1_000_000) * 1_000_000
        + u64::from(std::process::id() % 1_000) * 1_000
        + NEXT.fetch_add(1, Ordering::Relaxed) % 1_000
}

/// A name for a table or stream that no other test uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", unique())
}

/// A 12-digit access key id of its own: kinesis-local keys its account on it, so streams of
/// one test are invisible to the others.
pub fn unique_account() -> String {
    format!("{:012}", unique() % 1_000_000_000_000)
}

/// An SDK config for `service` in a fresh account, checked to have an endpoint.
pub async fn sdk_config(service: Service) -> SdkConfig {
    endpoint(service);
    sdk_config_for(&unique_account()).await
}

/// An SDK config whose credentials name `account` (the endpoints come from the environment).
pub async fn sdk_config_for(account: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(
            std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned()),
        ))
        .credentials_provider(Credentials::new(
            account,
            "integ-secret",
            None,
            None,
            "integ",
        ))
        .load()
        .await
}

/// A Kinesis client in `account` (endpoint from the environment), checked to have an endpoint.
pub async fn kinesis_client(account: &str) -> (SdkConfig, aws_sdk_kinesis::Client) {
    endpoint(Service::Kinesis);
    let config = sdk_config_for(account).await;
    let client = aws_sdk_kinesis::Client::new(&config);
    (config, client)
}

/// Creates `stream` with `shards` shards and waits until it is ACTIVE.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, stream: &str, shards: i32) {
    client
        .create_stream()
        .stream_name(stream)
        .shard_count(shards)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "create stream {stream}: {}",
                aws_sdk_kinesis::error::DisplayErrorContext(e)
            )
        });
    wait_active(client, stream).await;
}

/// Waits until `stream` is ACTIVE (after a create, split or merge).
pub async fn wait_active(client: &aws_sdk_kinesis::Client, stream: &str) {
    for _ in 0..200 {
        let out = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .expect("describe stream");
        let status = out
            .stream_description_summary()
            .map(|d| d.stream_status().clone());
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("stream {stream} did not become ACTIVE");
}

/// Puts records `from..from + n` over `keys` partition keys, payload `key#i`, 500 a call.
pub async fn put_records(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    keys: usize,
    from: usize,
    n: usize,
) {
    put_records_sized(client, stream, keys, from, n, 0).await;
}

/// As [`put_records`], each payload padded with spaces to at least `size` bytes.
pub async fn put_records_sized(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    keys: usize,
    from: usize,
    n: usize,
    size: usize,
) {
    use aws_sdk_kinesis::primitives::Blob;
    use aws_sdk_kinesis::types::PutRecordsRequestEntry;
    let all: Vec<usize> = (from..from + n).collect();
    for chunk in all.chunks(500) {
        let mut pending: Vec<usize> = chunk.to_vec();
        for _ in 0..10 {
            let entries = pending.iter().map(|i| {
                let key = format!("key-{}", i % keys);
                PutRecordsRequestEntry::builder()
                    .partition_key(&key)
                    .data(Blob::new(format!(
                        "{key}#{i:<width$}",
                        width = size.saturating_sub(key.len() + 1)
                    )))
                    .build()
                    .expect("entry")
            });
            let out = client
                .put_records()
                .stream_name(stream)
                .set_records(Some(entries.collect()))
                .send()
                .await
                .expect("put records");
            pending = pending
                .iter()
                .zip(out.records())
                .filter(|(_, r)| r.error_code().is_some())
                .map(|(i, _)| *i)
                .collect();
            if pending.is_empty() {
                break;
            }
        }
        assert!(pending.is_empty(), "records not stored: {pending:?}");
    }
}

/// The shard ids of `stream`, open and closed.
pub async fn shard_ids(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Vec<aws_sdk_kinesis::types::Shard> {
    client
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("list shards")
        .shards()
        .to_vec()
}

/// A log of handled records: `(owner, shard, key, payload)`.
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String, String)>>>;

/// Waits until `log` has `n` entries, panicking after [`patience`]`(limit)` (real time: I/O
/// to emulators).
pub async fn wait_for_count(log: &Log, n: usize, limit: std::time::Duration) {
    let limit = patience(limit);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let len = log.lock().expect("log").len();
        if len >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {len} of {n} records within {limit:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until `running` holds `n` shards of `stream` and each of their readers has read
/// (Kinesis reported how far behind the tip it is), panicking after [`patience`]`(limit)`.
///
/// At `LATEST` a subscription begins where each shard's first reader opened (docs/leases.md,
/// *Pinning*), which is after the take: a record put once a shard is merely held may arrive
/// before its reader opens and, rightly, never be delivered. A record put after this returns
/// is delivered.
pub async fn wait_reading(
    running: &kinesis_broker::RunningBroker,
    stream: &str,
    n: usize,
    limit: std::time::Duration,
) {
    let limit = patience(limit);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let shards = running.stats().shards(stream).to_vec();
        let reading = shards.iter().filter(|s| s.millis_behind.is_some()).count();
        if shards.len() >= n && reading >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{reading} of {n} shards of `{stream}` read within {limit:?} ({} held)",
            shards.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Asserts that no row of `stream` in `table` is `owner`'s: called when its graceful shutdown
/// returned, it proves the rows were handed on or released, not left to expire (so the others
/// take them without waiting out a lease, however slow the machine).
pub async fn assert_released(config: &SdkConfig, table: &str, stream: &str, owner: &str) {
    use kinesis_broker::lease::LeaseStore;
    let rows = kinesis_broker::DynamoLeaseStore::new(config, table)
        .list(stream)
        .await
        .expect("list");
    assert!(
        rows.iter().all(|r| r.owner.as_deref() != Some(owner)),
        "{owner}'s shutdown left rows held: {rows:?}"
    );
}

/// Asserts that `log` holds each payload of `0..n` exactly once and each key in order.
pub fn assert_exactly_once_in_key_order(log: &Log, n: usize) {
    let log = log.lock().expect("log");
    let mut per_key: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (_, _, key, payload) in log.iter() {
        let i: usize = payload
            .rsplit('#')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .expect("payload");
        per_key.entry(key.as_str()).or_default().push(i);
    }
    for (key, seen) in &per_key {
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order or twice: {seen:?}"
        );
    }
    let mut all: Vec<usize> = per_key.into_values().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "every record exactly once");
}

/// A handler that logs each delivery as `(owner, shard, key, payload)` into `log`.
pub fn logging_handler(
    log: &Log,
    owner: &str,
) -> impl Fn(kinesis_broker::Delivery) -> std::future::Ready<Result<(), std::io::Error>>
       + Send
       + Sync
       + 'static {
    let (log, owner) = (log.clone(), owner.to_owned());
    move |d: kinesis_broker::Delivery| {
        log.lock().expect("log").push((
            owner.clone(),
            d.shard().to_owned(),
            d.partition_key().to_owned(),
            String::from_utf8_lossy(d.payload()).into_owned(),
        ));
        std::future::ready(Ok(()))
    }
}

/// One delivered record: `(shard, payload)`.
pub type Delivered = (String, String);

/// What `log` delivered, as `(shard, payload)` in delivery order, and the same set without
/// repeats.
pub fn delivered_pairs(log: &Log) -> (Vec<Delivered>, std::collections::BTreeSet<Delivered>) {
    let delivered: Vec<Delivered> = log
        .lock()
        .expect("log")
        .iter()
        .map(|(_, shard, _, payload)| (shard.clone(), payload.clone()))
        .collect();
    let distinct = delivered.iter().cloned().collect();
    (delivered, distinct)
}

/// A broker reading `stream` with `workers` lanes by key into `log`, polling every 200 ms.
pub fn logging_broker(
    config: &SdkConfig,
    store: std::sync::Arc<dyn kinesis_broker::lease::LeaseStore>,
    owner: &str,
    stream: &str,
    start_at: kinesis_broker::StartAt,
    log: &Log,
) -> kinesis_broker::Broker {
    logging_broker_with(config, store, owner, stream, start_at, log, None)
}

/// As [`logging_broker`], reading by enhanced fan-out through `fan_out` when given.
pub fn logging_broker_with(
    config: &SdkConfig,
    store: std::sync::Arc<dyn kinesis_broker::lease::LeaseStore>,
    owner: &str,
    stream: &str,
    start_at: kinesis_broker::StartAt,
    log: &Log,
    fan_out: Option<&str>,
) -> kinesis_broker::Broker {
    let mut broker = kinesis_broker::Broker::builder()
        .sdk_config(config)
        .lease_store_arc(store)
        .owner_id(owner)
        .poll_interval(std::time::Duration::from_millis(200))
        .shard_sync_interval(std::time::Duration::from_secs(2))
        .build()
        .expect("broker");
    let subscription = broker.subscribe(stream);
    let subscription = match fan_out {
        Some(consumer) => subscription.fan_out(consumer),
        None => subscription,
    };
    subscription
        .start_at(start_at)
        .workers(4)
        .by_key()
        .handle(logging_handler(log, owner))
        .expect("subscribe");
    broker
}

/// An SDK config in `account` whose every service goes to `endpoint` (a fault proxy).
pub async fn sdk_config_via(account: &str, endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            account,
            "integ-secret",
            None,
            None,
            "integ",
        ))
        .endpoint_url(endpoint)
        .load()
        .await
}

/// The number of distinct payloads in `log`.
pub fn distinct(log: &Log) -> usize {
    log.lock()
        .expect("log")
        .iter()
        .map(|(_, _, _, p)| p.clone())
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// Waits until `log` holds `n` distinct payloads, panicking after [`patience`]`(limit)`.
pub async fn wait_for_distinct(log: &Log, n: usize, limit: std::time::Duration) {
    let limit = patience(limit);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let d = distinct(log);
        if d >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {d} of {n} distinct records within {limit:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The `kinesis-broker` binary `cargo xtask integ` built (`KINESIS_BROKER_BIN`).
pub fn cli_binary() -> std::path::PathBuf {
    std::env::var_os("KINESIS_BROKER_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "KINESIS_BROKER_BIN is not set: run the integration suite with `cargo xtask \
                 integ`, which builds the kinesis-broker binary"
            )
        })
}

/// Runs the `kinesis-broker` binary with `args` in `account` (the endpoints come from this
/// process's environment, as `cargo xtask integ` set them).
pub async fn run_cli(account: &str, args: &[&str]) -> std::process::Output {
    endpoint(Service::Dynamodb);
    endpoint(Service::Kinesis);
    tokio::process::Command::new(cli_binary())
        .args(args)
        .env("AWS_ACCESS_KEY_ID", account)
        .env("AWS_SECRET_ACCESS_KEY", "integ-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .output()
        .await
        .expect("run kinesis-broker")
}
