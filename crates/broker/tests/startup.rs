//! A start-up that tells the truth: missing AWS settings are named by `build()`, transient
//! failures of `start()`'s checks are retried (each retry logged) until the start-up deadline,
//! and the final error names the operation and the endpoint; the default in-process lease
//! store beside a real Kinesis is warned about once.
//!
//! Timing is checked on paused time against a `MemoryStream` with injected failures; the real
//! I/O path against a closed port of 127.0.0.1. The port that opens after a few seconds is in
//! `tests/startup_endpoints.rs` (`cargo xtask integ`), where kinesis-local answers.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use kinesis_broker::testing::{MemoryStream, Op};
use kinesis_broker::{Broker, BrokerError, Delivery};

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's logs at `warn` and above until the guard drops.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn subscribed(mut broker: Broker) -> Broker {
    broker
        .subscribe("orders")
        .handle(|_: Delivery| async { Ok::<(), std::io::Error>(()) })
        .unwrap();
    broker
}

#[test]
fn build_names_a_missing_region() {
    let no_region = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .build();
    match Broker::builder().sdk_config(&no_region).build() {
        Err(BrokerError::AwsSetting {
            setting, client, ..
        }) => assert_eq!((setting, client.as_str()), ("region", "Kinesis")),
        other => panic!("{other:?}"),
    }
    let no_credentials = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("eu-west-1"))
        .build();
    assert!(matches!(
        Broker::builder().sdk_config(&no_credentials).build(),
        Err(BrokerError::AwsSetting {
            setting: "credentials provider",
            ..
        })
    ));
}

#[cfg(feature = "dynamodb-lease")]
#[test]
fn build_names_a_lease_table_without_a_region() {
    use kinesis_broker::{DynamoLeaseStore, TableSetup};
    let no_region = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .build();
    let store = DynamoLeaseStore::new(&no_region, "orders-leases");
    let err = Broker::builder()
        .kinesis(MemoryStream::new())
        .dynamo_lease_table(store, TableSetup::MustExist)
        .build()
        .unwrap_err();
    match err {
        BrokerError::AwsSetting {
            setting, client, ..
        } => {
            assert_eq!(setting, "region");
            assert!(client.contains("`orders-leases`"), "{client}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn transient_failures_at_start_are_retried_and_each_retry_logged() {
    let (logs, _guard) = Logs::capture();
    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 2).unwrap();
    kinesis.fail_next(Op::ListShards, 4);
    let broker = subscribed(Broker::builder().kinesis(kinesis.clone()).build().unwrap());
    let running = broker
        .start()
        .await
        .expect("start succeeds once ListShards answers");
    assert!(kinesis.calls(Op::ListShards) >= 5);
    let text = logs.text();
    let retries = text
        .lines()
        .filter(|l| l.contains("retrying until the start-up deadline"))
        .collect::<Vec<_>>();
    assert_eq!(retries.len(), 4, "{text}");
    assert!(
        retries
            .iter()
            .all(|l| l.contains("operation=\"ListShards\"")),
        "{text}"
    );
    assert!(
        !text.contains("MemoryLeaseStore"),
        "no warning without AwsKinesis: {text}"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_check_failing_until_the_deadline_names_the_operation_and_endpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 1).unwrap();
    kinesis.throttle_next(Op::ListShards, u32::MAX);
    let deadline = Duration::from_secs(10);
    let broker = subscribed(
        Broker::builder()
            .kinesis(kinesis)
            .startup_deadline(deadline)
            .build()
            .unwrap(),
    );
    let started = tokio::time::Instant::now();
    let err = broker.start().await.unwrap_err();
    let took = started.elapsed();
    match &err {
        BrokerError::Unreachable {
            stream,
            operation,
            endpoint,
            waited,
            attempts,
            ..
        } => {
            assert_eq!((stream.as_str(), *operation), ("orders", "ListShards"));
            assert_eq!(endpoint, "the given KinesisApi");
            assert!(
                *waited >= deadline,
                "retried up to the deadline: {waited:?}"
            );
            assert!(*attempts > 3, "{attempts}");
        }
        other => panic!("{other:?}"),
    }
    // Paused time: this is the virtual clock, which only the retries' waits move.
    assert!(
        took <= deadline,
        "start gave up at the deadline, took {took:?}"
    );
    assert!(err
        .to_string()
        .contains("ListShards on the given KinesisApi"));
}

#[tokio::test(start_paused = true)]
async fn a_zero_startup_deadline_is_refused() {
    let err = Broker::builder()
        .kinesis(MemoryStream::new())
        .startup_deadline(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BrokerError::InvalidConfig {
            setting: "startup_deadline",
            ..
        }
    ));
}

/// A port of 127.0.0.1 nobody listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_closed_kinesis_port_fails_start_naming_the_endpoint_and_warns_of_the_memory_store() {
    let (logs, _guard) = Logs::capture();
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_kinesis_credentials())
        .endpoint_url(&endpoint)
        .load()
        .await;
    let broker = subscribed(
        Broker::builder()
            .sdk_config(&config)
            .startup_deadline(Duration::from_secs(2))
            .build()
            .unwrap(),
    );
    match broker.start().await {
        Err(BrokerError::Unreachable {
            operation,
            endpoint: named,
            ..
        }) => {
            assert_eq!(operation, "ListShards");
            assert_eq!(named, endpoint);
        }
        Err(other) => panic!("{other}: {other:?}"),
        Ok(_) => panic!("started against a closed port"),
    }
    let text = logs.text();
    assert_eq!(
        text.matches("MemoryLeaseStore").count(),
        1,
        "one warning about the in-process lease store: {text}"
    );
    assert!(text.contains("dynamo_lease_table"), "{text}");
    assert!(
        text.contains("retrying until the start-up deadline"),
        "{text}"
    );
}

fn aws_sdk_kinesis_credentials() -> aws_credential_types::Credentials {
    aws_credential_types::Credentials::new("000000000000", "secret", None, None, "test")
}
