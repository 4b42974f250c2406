//! Turns leases into reading: finds a stream's shards, takes their leases, reads each owned
//! shard into the subscription's channel, renews, checkpoints and lets go.
//!
//! - [`KinesisApi`]: the Kinesis calls needed, over the AWS SDK ([`AwsKinesis`]) or in process
//!   (`MemoryStream`, with fault injection, for tests and the quickstart; feature `testing`).
//! - [`Coordinator`]: one per subscription; lists shards, creates lease rows, takes leases
//!   (parents before children, fair share, skew-safe expiry) and runs one reader and one lease
//!   keeper per held shard.
//! - The reader reads with GetRecords into the subscription's channel, unpacking KPL
//!   aggregated records into one delivery per sub-record; the keeper renews the
//!   lease every 3 s with the due checkpoint, and writes `SHARD_END` or the final checkpoint
//!   with the release. A lost renewal stops the reader at once, with no checkpoint.
//!
//! Every shard task runs in a `shard_reader` span with `stream`, `shard` and `owner` fields.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod aws;
mod aws_fan_out;
mod cleanup;
mod config;
mod coordinator;
mod deaggregation;
mod error;
mod fan_out;
mod handle;
mod hooks;
mod keeper;
mod kinesis;
mod member;
#[cfg(feature = "testing")]
mod memory_fan_out;
#[cfg(feature = "testing")]
mod memory_stream;
mod metrics;
mod reader;
mod roster;
mod shared;
mod start;
mod take_plan;
mod twin;

pub use aws::AwsKinesis;
pub use config::ReaderConfig;
pub use coordinator::Coordinator;
pub use deaggregation::KplStats;
pub use error::{validate_stream_name, ReaderError};
pub use handle::{CoordinatorHandle, ShardStats, StatsSource};
pub use hooks::{Hooks, Release, ShardInfo, DEFAULT_HOOK_BOUND};
pub use kinesis::{
    ConsumerStatus, KinesisApi, PutEntry, PutOutcome, RecordsPage, Shard, ShardEvent,
    ShardSubscription, StartAt, StreamConsumer,
};
#[cfg(feature = "testing")]
pub use memory_fan_out::ConsumerDeletion;
#[cfg(feature = "testing")]
pub use memory_stream::{hash_key, MemoryStream, Op, StoredRecord};
