//! Support for the integration tests run by `cargo xtask integ`: endpoints, per-test accounts
//! and names.
//!
//! The endpoints come from the environment (`AWS_ENDPOINT_URL_DYNAMODB`,
//! `AWS_ENDPOINT_URL_KINESIS`, or `AWS_ENDPOINT_URL` for all services), which `aws-config`
//! reads by itself: the code under test has no test-only endpoint plumbing. Without them every
//! test fails loudly, naming the command to use.

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
