//! `DynamoLeaseError`: what setting up a DynamoDB lease table can run into.
//!
//! Store operations themselves report [`kinesis_lease_core::LeaseError`], as the trait
//! requires; this enum covers the table's life cycle ([`ensure_table`]) and is also the
//! `source` of the lease errors this crate returns.
//!
//! [`ensure_table`]: crate::DynamoLeaseStore::ensure_table

use std::time::Duration;

use kinesis_lease_core::{BoxError, LeaseError};

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
    /// A DynamoDB call failed in a way worth retrying (a dropped connection, a timeout,
    /// throttling, a 5xx).
    #[error("DynamoDB {operation} on lease table `{table}` is unavailable")]
    Unavailable {
        /// The table.
        table: String,
        /// The DynamoDB operation.
        operation: &'static str,
        /// The SDK's error.
        #[source]
        source: BoxError,
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

impl DynamoLeaseError {
    /// The DynamoDB operation that failed: `DescribeTable` for a wrong key schema or a table
    /// that does not become active (nothing was created), the failed call otherwise.
    pub fn operation(&self) -> &'static str {
        match self {
            DynamoLeaseError::WrongKeySchema { .. } | DynamoLeaseError::NotActive { .. } => {
                "DescribeTable"
            }
            DynamoLeaseError::Unavailable { operation, .. }
            | DynamoLeaseError::Call { operation, .. } => operation,
        }
    }

    /// True for failures worth retrying later: [`DynamoLeaseError::Unavailable`], and a
    /// table still not active.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DynamoLeaseError::Unavailable { .. } | DynamoLeaseError::NotActive { .. }
        )
    }
}

/// As a [`LeaseError`] naming the operation that failed: transient failures become
/// [`LeaseError::Unavailable`], the others [`LeaseError::Refused`], this error as the source.
impl From<DynamoLeaseError> for LeaseError {
    fn from(error: DynamoLeaseError) -> Self {
        let operation = error.operation();
        let resource = match &error {
            DynamoLeaseError::WrongKeySchema { table, .. }
            | DynamoLeaseError::NotActive { table, .. }
            | DynamoLeaseError::Unavailable { table, .. }
            | DynamoLeaseError::Call { table, .. } => table.clone(),
        };
        if error.is_transient() {
            LeaseError::Unavailable {
                operation,
                resource,
                source: Box::new(error),
            }
        } else {
            LeaseError::Refused {
                operation,
                resource,
                source: Box::new(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_key_schema_names_describe_table_and_is_final() {
        let error = DynamoLeaseError::WrongKeySchema {
            table: "t".into(),
            found: "id HASH (S)".into(),
        };
        assert!(!error.is_transient());
        match LeaseError::from(error) {
            LeaseError::Refused {
                operation,
                resource,
                ..
            } => assert_eq!((operation, resource.as_str()), ("DescribeTable", "t")),
            other => panic!("{other:?}"),
        }
        let down = DynamoLeaseError::Unavailable {
            table: "t".into(),
            operation: "DescribeTable",
            source: "connection refused".into(),
        };
        assert!(matches!(
            LeaseError::from(down),
            LeaseError::Unavailable {
                operation: "DescribeTable",
                ..
            }
        ));
    }
}
