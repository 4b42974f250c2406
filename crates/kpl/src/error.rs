//! `KplError`: why bytes are not a well-formed aggregated record, or an entry cannot be
//! aggregated.

/// What went wrong de-aggregating or aggregating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KplError {
    /// The record starts with the magic bytes but its MD5 trailer does not match its body.
    #[error("aggregated record's MD5 trailer does not match its body ({bytes} bytes)")]
    Digest {
        /// The record's size.
        bytes: usize,
    },
    /// The body is not a valid `AggregatedRecord` protobuf.
    #[error("aggregated record's body is not a valid AggregatedRecord protobuf")]
    Protobuf(#[source] prost::DecodeError),
    /// A sub-record names a table entry that does not exist.
    #[error("sub-record {sub_record} names {table} table entry {index}, but the table has {len}")]
    TableIndex {
        /// Which table: `partition key` or `explicit hash key`.
        table: &'static str,
        /// The sub-record's position in the aggregate.
        sub_record: usize,
        /// The index it names.
        index: u64,
        /// The table's length.
        len: usize,
    },
    /// A well-formed aggregate with no sub-record: the KPL never writes one.
    #[error("aggregated record holds no sub-record")]
    Empty,
    /// An explicit hash key that is not a decimal number below 2^128.
    #[error("explicit hash key `{value}` is not a decimal number below 2^128")]
    HashKey {
        /// The key as given.
        value: String,
    },
    /// A partition key outside Kinesis' 1 to 256 characters.
    #[error("partition key of {chars} characters: Kinesis takes 1 to 256")]
    PartitionKey {
        /// Its length in characters.
        chars: usize,
    },
    /// An entry too large for one Kinesis record, even alone in an aggregate.
    #[error("entry with partition key `{partition_key}` needs {bytes} bytes, over the {limit}-byte record limit")]
    TooLarge {
        /// The entry's partition key.
        partition_key: String,
        /// The bytes it would take.
        bytes: usize,
        /// Kinesis' limit for one record (data and partition key).
        limit: usize,
    },
}
