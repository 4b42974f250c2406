//! `CliError`: every way a command can fail, naming the table, stream and shard, with the
//! exit code scripts branch on.

use kinesis_lease_core::LeaseError;
use kinesis_stream_core::ReaderError;

/// Why a command did not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The lease table does not exist.
    #[error("lease table `{table}` does not exist")]
    TableNotFound {
        /// The table.
        table: String,
    },
    /// The table has no row of the stream (no broker ever read it with this table).
    #[error("lease table `{table}` has no rows of stream `{stream}`")]
    StreamNotFound {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
    },
    /// The table has no row of the shard.
    #[error("lease table `{table}` has no row of shard `{shard}` of stream `{stream}`")]
    ShardNotFound {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
    },
    /// The command refused to write (a finished row, a live holder, a row written since it
    /// was read); nothing, or only what was reported before, was changed.
    #[error("refused on shard `{shard}` of stream `{stream}` in lease table `{table}`: {reason}")]
    Refused {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// Why.
        reason: String,
    },
    /// The lease table could not be read or written.
    #[error("lease table `{table}` failed for stream `{stream}`")]
    Store {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
        /// The store's error (it names the operation and row).
        #[source]
        source: LeaseError,
    },
    /// Kinesis refuses to read the shard at this sequence number (another shard's, one never
    /// assigned, or a shard Kinesis no longer finds): a reader given it would be refused for
    /// good, so nothing was written.
    #[error(
        "sequence number `{sequence}` is not of shard `{shard}` of stream `{stream}`: Kinesis \
         refuses to read there; nothing was written"
    )]
    SequenceNotInShard {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// The sequence number given.
        sequence: String,
        /// Kinesis' answer.
        #[source]
        source: Box<ReaderError>,
    },
    /// Kinesis could not be asked about a shard (throttled, a 5xx, a timeout, the stream
    /// missing): nothing was decided from it, and nothing was written.
    #[error(
        "Kinesis could not be asked about shard `{shard}` of stream `{stream}`; nothing was \
         written"
    )]
    Kinesis {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// Kinesis' error.
        #[source]
        source: Box<ReaderError>,
    },
    /// An AWS setting is missing (no region), so no call can be made.
    #[error("no AWS {setting} configured: {hint}")]
    AwsSetting {
        /// The setting: `region`, `credentials provider`.
        setting: &'static str,
        /// How to set it.
        hint: &'static str,
    },
    /// An argument is valid for clap but not for the table (an invalid stream or shard name).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was given.
        what: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// `import-kcl` refused (KCL workers still run, a row held by a broker, ...) or could not
    /// read what it imports (the KCL's table, the stream's shards); the error names the
    /// tables, the stream and the shard.
    #[error("import from the KCL failed")]
    Import(#[source] Box<kinesis_kcl_import::ImportError>),
    /// Writing the result to stdout failed (a closed pipe).
    #[error("cannot write the result")]
    Output(#[source] std::io::Error),
}

impl CliError {
    /// The process exit code: 1 for refused, not found and failures of the table, 2 for usage
    /// (a missing region or an invalid name is a usage error, as clap's own are).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::AwsSetting { .. } | CliError::Invalid { .. } => 2,
            _ => 1,
        }
    }

    /// The store error for `table` and `stream`: a missing table has its own variant.
    pub fn store(table: &str, stream: &str, source: LeaseError) -> Self {
        match source {
            LeaseError::TableNotFound { .. } => CliError::TableNotFound {
                table: table.to_owned(),
            },
            source => CliError::Store {
                table: table.to_owned(),
                stream: stream.to_owned(),
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_their_resources_and_map_to_exit_codes() {
        let missing = CliError::store(
            "t",
            "s",
            LeaseError::TableNotFound {
                table: "t".into(),
                operation: "GetItem",
            },
        );
        assert!(matches!(&missing, CliError::TableNotFound { table } if table == "t"));
        assert_eq!(missing.exit_code(), 1);
        let refused = CliError::Refused {
            table: "t".into(),
            stream: "s".into(),
            shard: "shardId-1".into(),
            reason: "finished".into(),
        };
        assert_eq!(
            refused.to_string(),
            "refused on shard `shardId-1` of stream `s` in lease table `t`: finished"
        );
        assert_eq!(refused.exit_code(), 1);
        let region = CliError::AwsSetting {
            setting: "region",
            hint: "set AWS_REGION",
        };
        assert_eq!(region.exit_code(), 2);
        let foreign = CliError::SequenceNotInShard {
            stream: "s".into(),
            shard: "shardId-1".into(),
            sequence: "4959".into(),
            source: Box::new(ReaderError::ShardNotFound {
                stream: "s".into(),
                shard: "shardId-1".into(),
                operation: "GetShardIterator",
            }),
        };
        assert!(
            foreign
                .to_string()
                .starts_with("sequence number `4959` is not of shard `shardId-1` of stream `s`"),
            "{foreign}"
        );
        assert_eq!(foreign.exit_code(), 1);
        let unasked = CliError::Kinesis {
            stream: "s".into(),
            shard: "shardId-1".into(),
            source: Box::new(ReaderError::Throttled {
                operation: "GetShardIterator",
                resource: "s/shardId-1".into(),
            }),
        };
        assert_eq!(unasked.exit_code(), 1);
    }
}
