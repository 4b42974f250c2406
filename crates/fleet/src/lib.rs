//! The fleet protocol: turns a lease table into reading. Finds a stream's shards, creates
//! their lease rows, takes leases (parents before children, fair share, skew-safe expiry),
//! watches the roster of live instances, hands shards over gracefully, and runs one reader
//! (`kinesis-shard-reader`) and one lease keeper per held shard.
//!
//! Its own crate because it is the one part that knows both contracts: the lease store
//! (`kinesis-lease-core`) and Kinesis (`kinesis-stream-core`). Readers below it know Kinesis
//! only; the facade above it (`kinesis-broker`) wires a subscription to a [`Coordinator`].
//!
//! - [`Coordinator`]: one per subscription (see `coordinator` for its jobs, one file each:
//!   discovery, the take round, burials, the ring watch, spawning shard tasks).
//! - The keeper renews the lease every 3 s with the due checkpoint, and writes `SHARD_END` or
//!   the final checkpoint with the release. A lost renewal stops the reader at once, with no
//!   checkpoint.
//! - [`Hooks`]: code run when a shard is taken, before its final checkpoint, when its lease
//!   is lost and when it has ended.
//! - [`CoordinatorHandle`]: shutdown, failure and live [`ShardStats`].
//!
//! Every shard task runs in a `shard_reader` span with `stream`, `shard` and `owner` fields.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod abort_on_drop;
mod cleanup;
mod config;
mod coordinator;
mod handle;
mod hooks;
mod keeper;
mod keeper_quiet;
mod keeper_rows;
mod lag;
mod load_meter;
mod load_plan;
mod member;
mod member_state;
mod metrics;
mod quiet;
mod roster;
mod shard_load;
mod shared;
mod take_plan;
mod twin;

pub use config::ReaderConfig;
pub use coordinator::Coordinator;
pub use handle::{CoordinatorHandle, ShardStats, StatsSource};
pub use hooks::{Hooks, Release, ShardInfo, DEFAULT_HOOK_BOUND};
