//! `DynamoLeaseError`: what setting up a DynamoDB lease table can run into.
//!
//! Store operations themselves report [`kinesis_lease_core::LeaseError`], as the trait
//! requires; this enum covers the table's life cycle ([`ensure_table`]) and is also the
//! `source` of the lease errors this crate returns.
//!
//! [`ensure_table`]: crate::DynamoLeaseStore::ensure_table

use std::time::Duration;

use kinesis_lease_core::BoxError;

/// Errors of the DynamoDB lease table itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoLeaseError {
    /// The table exists but its key is not one string hash key `lease_key`.
    #[error("lease table `{table}` has the wrong key schema: {found}; expected one string (S) hash key `lease_key`")]
    WrongKeySchema {
        /// The table.
        table: String,
        /// The key schema found.
        found: String,
    },
    /// The table did not become ACTIVE in time.
    #[error("lease table `{table}` is still `{status}` after {waited:?}")]
    NotActive {
        /// The table.
        table: String,
        /// Its last status.
        status: String,
        /// How long we waited.
        waited: Duration,
    },
    /// A DynamoDB call failed.
    #[error("DynamoDB {operation} on lease table `{table}` failed")]
    Call {
        /// The table.
        table: String,
        /// The DynamoDB operation.
        operation: &'static str,
        /// The SDK's error.
        #[source]
        source: BoxError,
    },
}
