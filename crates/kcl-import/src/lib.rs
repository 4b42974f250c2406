//! Import a Java KCL application's checkpoints into a kinesis-broker lease table.
//!
//! A service that moves from the Kinesis Client Library to this library should neither
//! reprocess the retention window nor skip to the tip: it should resume every shard just
//! after the last record its KCL application processed. The KCL keeps that in its own
//! DynamoDB table, with its own schema; this crate reads it and writes the equivalent rows of
//! this library's table, with the same conditional writes the brokers use:
//!
//! - [`row`](KclRow): a KCL row as the KCL's serializer writes it (attribute names checked
//!   against the KCL's source); rows of other KCL entities (3.5's worker metrics and
//!   coordinator rows) are told apart by `entityType`.
//! - `select`: which rows belong to the stream (single-stream keys are shard ids,
//!   multi-stream keys `account:stream:creationEpoch:shardId`).
//! - `mapping`: the KCL's inclusive checkpoint, with the subsequence inside a KPL aggregate,
//!   as a checkpoint of this library (which is inclusive too), and how far a checkpoint has
//!   reached, so that no row is ever moved back.
//! - `plan`: what the import does with each shard, as a pure function of what it read.
//! - `liveness`: KCL workers that still run move their lease counters within the KCL's
//!   lease-taker interval (twice the failover time); the import refuses to write while they do.
//! - `record`: the import's own row in the lease table, so that later imports leave alone
//!   what the brokers and operators moved since, unless the KCL ran again.
//! - [`KclImport`]: the I/O around them, used by the `kinesis-broker import-kcl` command and
//!   by the broker's `SubscriptionBuilder::import_kcl` at start.
//!
//! The KCL's table is only read, never written: the KCL application can be started again on
//! it (a rollback) as long as this library's brokers are stopped first.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod error;
mod import;
pub mod liveness;
pub mod mapping;
pub mod plan;
pub mod record;
mod row;
pub mod select;
mod table;

pub use error::ImportError;
pub use import::{ImportReport, KclImport, Target, DEFAULT_FAILOVER, DEFAULT_RETRY_WINDOW};
pub use liveness::{Movement, Verdict, Watch};
pub use plan::{Action, Step};
pub use row::{KclRow, LEASE_ENTITY};
pub use select::{KclLease, KclMode};
pub use table::{DynamoKclTable, KclTable};
