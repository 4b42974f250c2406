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
