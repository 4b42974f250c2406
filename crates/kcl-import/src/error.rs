//! `ImportError`: every way an import can fail, naming the tables, the stream and the shard.

use std::time::Duration;

use kinesis_lease_core::{BoxError, LeaseError};
use kinesis_stream_core::ReaderError;

use crate::Movement;

/// Why an import did not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The KCL's lease table does not exist.
    #[error("KCL lease table `{table}` does not exist")]
    KclTableNotFound {
        /// The KCL table.
        table: String,
    },
    /// Reading the KCL's lease table failed.
    #[error("reading KCL lease table `{table}` failed ({operation})")]
    KclTable {
        /// The KCL table.
        table: String,
        /// The call.
        operation: &'static str,
        /// True for a failure worth retrying (throttling, a 5xx, a timeout, a dropped
        /// connection).
        transient: bool,
        /// The SDK's error.
        #[source]
        source: BoxError,
    },
    /// A setting of the import is unusable.
    #[error("invalid import setting {setting} `{value}`: {reason}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// The value given.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A row of the KCL's table cannot be read as the KCL writes it (perhaps not a KCL table).
    #[error("row `{lease_key}` of KCL lease table `{table}` is unreadable: {reason}")]
    UnreadableRow {
        /// The KCL table.
        table: String,
        /// The row's key (`?` without one).
        lease_key: String,
        /// What is wrong.
        reason: String,
    },
    /// The KCL's table has no lease of the stream.
    #[error("KCL lease table `{table}` has no lease of stream `{stream}`: {hint}")]
    NoLeases {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// What the table holds instead.
        hint: String,
    },
    /// Several multi-stream identifiers name the stream.
    #[error(
        "KCL lease table `{table}` has leases of several streams named `{stream}` ({}); name one with --kcl-stream-key",
        .candidates.join(", ")
    )]
    AmbiguousStream {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// The candidates.
        candidates: Vec<String>,
    },
    /// None of the KCL's shards is a shard of the stream: the table belongs to another stream.
    #[error("none of the shards in KCL lease table `{table}` ({shards}) is a shard of stream `{stream}`")]
    ForeignShards {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// The KCL's shards (the first few).
        shards: String,
    },
    /// A KCL lease whose checkpoint cannot be mapped.
    #[error("cannot import shard `{shard}` of stream `{stream}` from KCL lease table `{table}`: {reason}")]
    Unmappable {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// Why.
        reason: String,
    },
    /// KCL workers still run: a lease row moved while it was watched. Nothing was written.
    #[error(
        "KCL workers still run on KCL lease table `{table}`: {movement} within {:.1} s; stop the KCL application (gracefully) and import again, or add --force; nothing was written",
        .window.as_secs_f64()
    )]
    KclRunning {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// The row that moved.
        movement: Box<Movement>,
        /// The window watched.
        window: Duration,
    },
    /// The KCL wrote its table while the import wrote ours: a KCL worker came back. What was
    /// written stays (see the report); the KCL and the brokers may now both read the stream.
    #[error("the KCL wrote lease table `{table}` during the import ({movement}): a KCL worker runs again on stream `{stream}`; stop it before starting brokers, then import again")]
    KclResumed {
        /// The KCL table.
        table: String,
        /// The stream.
        stream: String,
        /// The row that moved.
        movement: Box<Movement>,
    },
    /// A row of ours was refused (held by a reader, or written since it was read).
    #[error("refused on shard `{shard}` of stream `{stream}` in lease table `{table}`: {reason}")]
    Refused {
        /// Our lease table.
        table: String,
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// Why.
        reason: String,
    },
    /// Our lease table failed.
    #[error("lease table `{table}` failed for stream `{stream}`")]
    Store {
        /// Our lease table.
        table: String,
        /// The stream.
        stream: String,
        /// The store's error (it names the operation and the row).
        #[source]
        source: Box<LeaseError>,
    },
    /// A Kinesis call failed (ListShards for the stream, GetShardIterator for a shard).
    #[error("Kinesis {operation} failed for {}", match shard { Some(shard) => format!("shard `{shard}` of stream `{stream}`"), None => format!("stream `{stream}`") })]
    Kinesis {
        /// The stream.
        stream: String,
        /// The shard, for calls about one.
        shard: Option<String>,
        /// The Kinesis operation.
        operation: &'static str,
        /// The reader's error.
        #[source]
        source: Box<ReaderError>,
    },
}

impl ImportError {
    /// True when the import refused (KCL live, a held row, a row not found or not mappable), as
    /// opposed to a failure of a table or of Kinesis.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ImportError::KclTable { .. } | ImportError::Store { .. } | ImportError::Kinesis { .. }
        )
    }

    /// The operation that failed, when the failure is worth retrying: throttling, a 5xx, a
    /// timeout or a dropped connection, of the KCL's table, this library's table or Kinesis.
    pub fn transient_operation(&self) -> Option<&'static str> {
        match self {
            ImportError::KclTable {
                operation,
                transient: true,
                ..
            } => Some(operation),
            ImportError::Store { source, .. } => match **source {
                LeaseError::Unavailable { operation, .. } => Some(operation),
                _ => None,
            },
            ImportError::Kinesis {
                operation, source, ..
            } => match **source {
                ReaderError::Throttled { .. } | ReaderError::Transient { .. } => Some(operation),
                ReaderError::Lease {
                    source: LeaseError::Unavailable { operation, .. },
                    ..
                } => Some(operation),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_tables_stream_and_shard() {
        let running = ImportError::KclRunning {
            table: "orders-kcl".into(),
            stream: "orders".into(),
            movement: Box::new(Movement {
                shard: "shardId-000000000001".into(),
                owner: Some("w1".into()),
                before: Some(4),
                after: Some(5),
            }),
            window: Duration::from_secs(10),
        };
        let text = running.to_string();
        for part in [
            "`orders-kcl`",
            "`shardId-000000000001`",
            "`w1`",
            "4 to 5",
            "10.0 s",
            "--force",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(running.is_refusal());
        let ambiguous = ImportError::AmbiguousStream {
            table: "k".into(),
            stream: "orders".into(),
            candidates: vec!["1:orders:5".into(), "1:orders:6".into()],
        };
        assert!(ambiguous.to_string().contains("1:orders:5, 1:orders:6"));
        let failed = ImportError::Kinesis {
            stream: "orders".into(),
            shard: None,
            operation: "ListShards",
            source: Box::new(ReaderError::StreamNotFound {
                stream: "orders".into(),
                operation: "ListShards",
            }),
        };
        assert!(!failed.is_refusal());
        assert_eq!(
            failed.transient_operation(),
            None,
            "a missing stream is final"
        );
        let throttled = ImportError::Kinesis {
            stream: "orders".into(),
            shard: Some("shardId-000000000002".into()),
            operation: "GetShardIterator",
            source: Box::new(ReaderError::Throttled {
                operation: "GetShardIterator",
                resource: "orders/shardId-000000000002".into(),
            }),
        };
        assert_eq!(
            throttled.to_string(),
            "Kinesis GetShardIterator failed for shard `shardId-000000000002` of stream `orders`",
            "names the call that failed"
        );
        assert_eq!(throttled.transient_operation(), Some("GetShardIterator"));
    }
}
