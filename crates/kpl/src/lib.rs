//! The Kinesis Producer Library's aggregated record format.
//!
//! Most production streams are written by the KPL or by tools that speak its format
//! (aws-kinesis-agg, Fluent Bit, the Kinesis Agent): many user records packed into one Kinesis
//! record, to get past the per-record limits of a shard. Such a record is:
//!
//! | bytes | what |
//! | --- | --- |
//! | 4 | the magic `F3 89 9A C2` |
//! | n | a protobuf `AggregatedRecord`: a table of partition keys, a table of explicit hash keys, and the sub-records (indexes into the tables, and data) |
//! | 16 | the MD5 of the protobuf body |
//!
//! [`deaggregate`] unpacks one; [`Aggregator`] packs records into one within Kinesis' 1 MiB
//! limit. Both are pure (no I/O), so readers and publishers of any transport use them.
//! Sub-records carry no sequence number of their own: a consumer numbers them by position
//! (the subsequence), and checkpoints at (sequence, subsequence).

mod aggregator;
mod deaggregate;
mod error;
mod hash_key;
mod message;

pub use aggregator::{AggregatedEntry, Aggregator, Pushed};
pub use deaggregate::{deaggregate, is_aggregated, SubRecord};
pub use error::KplError;
pub use hash_key::{effective_hash_key, parse_hash_key, partition_key_hash};

/// The four bytes every aggregated record starts with.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// The length of the MD5 trailer.
pub const DIGEST_LEN: usize = 16;

/// Kinesis' limit for one record: its data and its partition key together (1 MiB).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
