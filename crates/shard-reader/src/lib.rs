//! Reads one Kinesis shard into a subscription's channel: polling (GetRecords) or enhanced
//! fan-out (SubscribeToShard), KPL aggregates unpacked into one delivery per sub-record, and
//! the start-position rules that say where a taken shard opens.
//!
//! What this crate does not do is decide which shards to read: leases, the roster, balancing
//! and the lease keepers are the fleet protocol's (`kinesis-fleet`), which starts one
//! [`Reader`] per held shard and talks to it through the small vocabulary of [`control`]
//! ([`Signal`], [`Phase`], [`KeeperCmd`]). The reader is written against the Kinesis contract
//! (`kinesis-stream-core`) alone, so it reads from AWS, from the in-process `MemoryStream` or
//! from a source of your own alike.
//!
//! - [`Reader`]: one shard's reading, with its recoveries: an expired iterator reopened just
//!   after the last delivered record, throttling and transient failures backed off, a shard
//!   ended only on proof that nothing of it is left to read.
//! - [`register_consumer`]: registers (or finds) the fan-out consumer and waits until it is
//!   `ACTIVE`.
//! - [`start`]: where a taken shard opens (pinned `LATEST`, repositions, children).
//! - [`KplStats`]: what de-aggregation met.
//!
//! A reader runs inside the fleet's `shard_reader` span, with `stream`, `shard` and `owner`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod consumer_arn;
pub mod control;
mod deaggregation;
mod fan_out;
mod first_read;
mod metrics;
mod read_context;
mod reader;
mod refusal;
pub mod start;

pub use consumer_arn::ConsumerArn;
pub use control::{KeeperCmd, Phase, Signal};
pub use deaggregation::{KplCounters, KplStats};
pub use fan_out::register_consumer;
pub use metrics::ShardMetrics;
pub use read_context::{ReadContext, ReadSettings};
pub use reader::Reader;
pub use refusal::Refusal;
pub use start::StartPlan;
