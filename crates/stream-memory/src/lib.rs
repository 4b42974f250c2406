//! `MemoryStream`: an in-process Kinesis for users' tests and the quickstart, on the Kinesis
//! contract (`kinesis-stream-core`) alone. The facade re-exports it behind its `testing`
//! feature.
//!
//! It behaves like Kinesis where readers can tell: partition keys are hashed with MD5 onto the
//! shards' hash key ranges; sequence numbers increase within a shard; every iterator type
//! works, and one at a sequence number the shard does not hold (another shard's, one never
//! assigned) is refused as Kinesis refuses it (InvalidArgumentException, `ReaderError::Refused`),
//! for GetShardIterator and SubscribeToShard alike; GetRecords honours its limit and reports MillisBehindLatest; split and merge close
//! their parents (with an ending sequence number) and open children that name them; a closed
//! shard read to its end returns no next iterator and lists its children; iterators expire
//! after 5 minutes; PutRecords refuses a request past Kinesis' limits (500 records, 1 MiB a
//! record and 5 MiB a request, partition keys and data counted). Enhanced fan-out works too
//! (stream consumers and pushed shard subscriptions; see `fan_out`). Faults can be
//! injected: throttle or fail the next N calls of an operation, expire every outstanding
//! iterator, cut every live subscription, deregister the fan-out consumer (left `DELETING` for
//! a while, as AWS does). Time comes from an injectable [`Clock`](kinesis_lease_core::Clock).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod admin;
mod api;
mod consumers;
mod fan_out;
mod faults;
mod memory_stream;
mod op;
mod state;

pub use consumers::ConsumerDeletion;
pub use memory_stream::{hash_key, MemoryStream, StoredRecord};
pub use op::Op;
