//! `ReaderError`: what Kinesis calls and the readers above them run into, each naming the
//! stream and shard. One enum for the contract and every layer on it, so a custom source
//! answers in the same terms the readers act on (retry, reopen, end, fail).

use kinesis_lease_core::{BoxError, LeaseError};

/// Errors of Kinesis calls and of shard readers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaderError {
    /// The stream does not exist (or was deleted).
    #[error("stream `{stream}` does not exist ({operation})")]
    StreamNotFound {
        /// The stream.
        stream: String,
        /// The Kinesis operation that found it missing.
        operation: &'static str,
    },
    /// A shard is not found (ResourceNotFoundException from GetShardIterator or GetRecords):
    /// trimmed past the stream's retention, or never a shard of it. The stream may well
    /// exist; readers ask ListShards before concluding anything.
    #[error("shard `{stream}/{shard}` not found ({operation}): trimmed past retention or unknown")]
    ShardNotFound {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// The Kinesis operation.
        operation: &'static str,
    },
    /// Another live process uses this broker's lease-owner id: it was seen renewing a row of
    /// this owner id that this process does not hold. Two processes must never share an id.
    #[error("lease owner id `{owner}` is live in another process (it renews `{stream}/{shard}`)")]
    OwnerInUse {
        /// The owner id.
        owner: String,
        /// The stream.
        stream: String,
        /// A shard the other process holds.
        shard: String,
    },
    /// A shard iterator expired (they last 5 minutes); the reader opens a new one.
    #[error("shard iterator of `{stream}/{shard}` expired")]
    ExpiredIterator {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
    },
    /// Kinesis throttled the call (ProvisionedThroughputExceeded, LimitExceeded).
    #[error("Kinesis throttled {operation} on `{resource}`")]
    Throttled {
        /// The operation.
        operation: &'static str,
        /// The stream or `stream/shard`.
        resource: String,
    },
    /// A failure worth retrying: a 5xx, a timeout, a dropped connection.
    #[error(
        "Kinesis {operation} on `{resource}` failed (a 5xx, a timeout or a dropped connection)"
    )]
    Transient {
        /// The operation.
        operation: &'static str,
        /// The stream or `stream/shard`.
        resource: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// Another subscription holds the shard for this fan-out consumer, or the consumer is not
    /// active yet (ResourceInUseException); retried after a pause.
    #[error("Kinesis {operation} on `{resource}`: resource in use")]
    InUse {
        /// The operation.
        operation: &'static str,
        /// The stream, `stream/shard` or consumer.
        resource: String,
    },
    /// The enhanced fan-out consumer does not exist (deregistered, or still being deleted):
    /// it is registered again.
    #[error("fan-out consumer `{consumer}` of `{stream}` not found ({operation})")]
    ConsumerNotFound {
        /// The stream.
        stream: String,
        /// The consumer's name.
        consumer: String,
        /// The operation.
        operation: &'static str,
    },
    /// Kinesis refused the call for good (invalid argument, access denied, bad name).
    #[error("Kinesis refused {operation} on `{resource}`")]
    Refused {
        /// The operation.
        operation: &'static str,
        /// The stream or `stream/shard`.
        resource: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// An argument rejected before any call (an invalid stream name, a split key outside the
    /// shard).
    #[error("invalid {what} `{value}`: {reason}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why.
        reason: String,
    },
    /// The lease store failed for a shard.
    #[error("lease store failed for `{stream}/{shard}`")]
    Lease {
        /// The stream.
        stream: String,
        /// The shard (empty for stream-wide calls such as `list`).
        shard: String,
        /// The store's error.
        #[source]
        source: LeaseError,
    },
}

impl ReaderError {
    /// True for failures a reader retries with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ReaderError::Throttled { .. }
                | ReaderError::InUse { .. }
                | ReaderError::Transient { .. }
                | ReaderError::Lease { .. }
        )
    }
}

/// Checks a stream name against Kinesis' rules: 1 to 128 of `[a-zA-Z0-9_.-]`.
///
/// # Errors
///
/// [`ReaderError::Invalid`] naming the stream and the rule it breaks.
pub fn validate_stream_name(stream: &str) -> Result<(), ReaderError> {
    let invalid = |reason: &str| ReaderError::Invalid {
        what: "stream name",
        value: stream.to_owned(),
        reason: reason.to_owned(),
    };
    if stream.is_empty() || stream.len() > 128 {
        return Err(invalid("a stream name has 1 to 128 characters"));
    }
    if !stream
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(invalid(
            "a stream name uses only a-z, A-Z, 0-9, `_`, `.` and `-`",
        ));
    }
    Ok(())
}
