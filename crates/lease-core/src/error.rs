//! `LeaseError`: what can go wrong in a lease store besides losing a lease.
//!
//! Losing a condition (another owner holds the row) is *not* an error: it is
//! [`Outcome::Lost`](crate::Outcome::Lost), a value callers branch on. Errors are bad input and
//! infrastructure failures, and each names the resource it concerns.

use std::error::Error as StdError;

/// A boxed error from a store's backend, kept as the `source` of a [`LeaseError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors of lease keys, checkpoints and lease stores.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// A lease key that is not `stream:shard` with two non-empty parts.
    #[error("invalid lease key `{input}`: {reason}")]
    InvalidKey {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A checkpoint that is neither a sentinel nor a sequence number.
    #[error("invalid checkpoint `{input}`: {reason}")]
    InvalidCheckpoint {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A stored row that cannot be read back as a lease.
    #[error("lease row `{key}` in table `{table}` is corrupt: {reason}")]
    CorruptRow {
        /// The lease table.
        table: String,
        /// The row's key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The lease table does not exist.
    #[error("lease table `{table}` does not exist ({operation})")]
    TableNotFound {
        /// The lease table.
        table: String,
        /// The store operation that found it missing.
        operation: &'static str,
    },
    /// The backend refused the call for good (access denied, validation): retrying won't help.
    #[error("lease store refused {operation} on `{resource}`")]
    Refused {
        /// The store operation.
        operation: &'static str,
        /// The table or row it concerned.
        resource: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// The backend could not be reached or kept failing (throttling, 5xx, timeouts) within the
    /// store's retry budget; the caller may try again later.
    #[error("lease store unavailable for {operation} on `{resource}`")]
    Unavailable {
        /// The store operation.
        operation: &'static str,
        /// The table or row it concerned.
        resource: String,
        /// The last backend error.
        #[source]
        source: BoxError,
    },
}

/// Displays an error with its whole source chain, `outer: cause: root cause`, for logs: a
/// bare `%error` shows only the outermost message, which for an AWS SDK error is often just
/// "service error".
///
/// # Examples
///
/// ```
/// use kinesis_lease_core::{ErrorChain, LeaseError};
///
/// let error = LeaseError::Unavailable {
///     operation: "GetItem",
///     resource: "leases".into(),
///     source: "connection reset".into(),
/// };
/// assert_eq!(
///     ErrorChain(&error).to_string(),
///     "lease store unavailable for GetItem on `leases`: connection reset"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'a));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl std::fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
