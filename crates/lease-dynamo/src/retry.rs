//! Retrying DynamoDB calls within a budget, and sorting their failures.
//!
//! The SDK's own retries are switched off for the store's client so that this module alone
//! decides: throttling, 5xx, timeouts and dropped connections are retried with capped
//! exponential backoff and jitter (a tenth of the ceiling to the ceiling) until the budget is spent; everything else is final.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use kinesis_lease_core::LeaseError;
use tokio::time::Instant;

/// How the store retries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub(crate) budget: Duration,
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            budget: Duration::from_millis(2_500),
            base: Duration::from_millis(25),
            cap: Duration::from_millis(800),
        }
    }
}

const CONDITION_FAILED: &str = "ConditionalCheckFailedException";
const RETRYABLE: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ThrottlingException",
    "Throttling",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "TransactionConflictException",
];

enum Class {
    Retry,
    ConditionFailed,
    TableMissing,
    Refused,
}

fn classify<E, R>(err: &SdkError<E, R>) -> Class
where
    E: ProvideErrorMetadata,
    R: HttpStatus,
{
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Class::Retry
        }
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or_default();
            // A cancelled transaction is the caller's to read: its reasons say whether a
            // condition failed.
            if code == CONDITION_FAILED || code == "TransactionCanceledException" {
                Class::ConditionFailed
            } else if code == "ResourceNotFoundException" {
                Class::TableMissing
            } else if RETRYABLE.contains(&code) || ctx.raw().status() >= 500 {
                Class::Retry
            } else {
                Class::Refused
            }
        }
        _ => Class::Refused,
    }
}

/// True when `err` is worth retrying: a dropped connection, a timeout, throttling, a 5xx.
pub(crate) fn is_transient<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
    R: HttpStatus,
{
    matches!(classify(err), Class::Retry)
}

/// True when a DynamoDB call's `err` is worth retrying: a dropped connection, a timeout,
/// throttling, a 5xx. The one definition of transient for every DynamoDB caller of the
/// workspace (the store here, the KCL import's reads of the KCL's table).
pub fn is_transient_sdk_error<E>(
    err: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> bool
where
    E: ProvideErrorMetadata,
{
    is_transient(err)
}

/// The status code of a raw response.
pub(crate) trait HttpStatus {
    fn status(&self) -> u16;
}

impl HttpStatus for aws_sdk_dynamodb::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

/// Runs `call` until it succeeds, fails for good, or the budget is spent.
///
/// `Ok(Err(e))` is a lost condition (the service error, for its old image); every other
/// failure is a [`LeaseError`] naming `operation` and `resource`.
pub(crate) async fn retrying<T, E, R, F, Fut>(
    policy: RetryPolicy,
    table: &str,
    operation: &'static str,
    resource: &str,
    mut call: F,
) -> Result<Result<T, E>, LeaseError>
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    R: HttpStatus + std::fmt::Debug + Send + Sync + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    let started = Instant::now();
    let mut attempt: u32 = 0;
    loop {
        let err = match call().await {
            Ok(value) => return Ok(Ok(value)),
            Err(err) => err,
        };
        match classify(&err) {
            Class::ConditionFailed => match err {
                SdkError::ServiceError(ctx) => return Ok(Err(ctx.into_err())),
                other => return Err(refused(operation, resource, other)),
            },
            Class::TableMissing => {
                return Err(LeaseError::TableNotFound {
                    table: table.to_owned(),
                    operation,
                })
            }
            Class::Refused => return Err(refused(operation, resource, err)),
            Class::Retry => {
                let backoff = backoff(policy, attempt);
                if started.elapsed() + backoff > policy.budget {
                    return Err(LeaseError::Unavailable {
                        operation,
                        resource: resource.to_owned(),
                        source: Box::new(err),
                    });
                }
                tracing::debug!(operation, resource, attempt, ?backoff, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&err), "retrying DynamoDB call");
                tokio::time::sleep(backoff).await;
                attempt += 1;
            }
        }
    }
}

fn refused<E, R>(operation: &'static str, resource: &str, err: SdkError<E, R>) -> LeaseError
where
    E: StdError + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    LeaseError::Refused {
        operation,
        resource: resource.to_owned(),
        source: Box::new(err),
    }
}

/// The jittered wait before retry number `attempt` (from 0), from the one backoff helper.
fn backoff(policy: RetryPolicy, attempt: u32) -> Duration {
    let ceiling = kinesis_lease_core::Backoff::new(policy.base, policy.cap).ceiling(attempt);
    ceiling.mul_f64(0.1 + 0.9 * fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_and_grows() {
        let p = RetryPolicy::default();
        for attempt in 0..40 {
            assert!(backoff(p, attempt) <= p.cap);
        }
        assert!(backoff(p, 0) <= p.base);
    }
}
