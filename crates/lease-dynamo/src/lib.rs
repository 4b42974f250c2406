//! `DynamoLeaseStore`: the kinesis-broker lease table on Amazon DynamoDB, shared by every
//! instance of a service.
//!
//! # The table
//!
//! One string hash key, `lease_key`. A shard's row is keyed `stream:shard` and holds
//! `lease_owner` (S), `lease_expiry` (N, ms since the epoch), `lease_counter` (N),
//! `checkpoint` (S), `checkpoint_subsequence` (N, optional) and `parent_shards` (SS). Each
//! stream also has one *index row*, keyed `stream:*`, whose `shards` (SS) names every shard row
//! of that stream, so [`list`](kinesis_lease_core::LeaseStore::list) reads one stream's rows
//! (a consistent GetItem of the index, then consistent BatchGetItem of its rows) without
//! scanning the others. `*` is never a shard id, so the index row never collides with a lease.
//!
//! # Writes
//!
//! Every write is one conditional `UpdateItem` that also bumps `lease_counter`; a lost
//! condition comes back with the row's old image (`ReturnValuesOnConditionCheckFailure =
//! ALL_OLD`), so [`Outcome::Lost`](kinesis_lease_core::Outcome::Lost) needs no second read.
//! Expiry is judged by the writer's clock, passed into the condition.
//!
//! # Failures
//!
//! Throttling, 5xx and timeouts are retried with capped exponential backoff and full jitter
//! within a budget (2.5 s by default, well under a 10 s lease), then reported as
//! [`LeaseError::Unavailable`](kinesis_lease_core::LeaseError::Unavailable). A missing table
//! is [`LeaseError::TableNotFound`](kinesis_lease_core::LeaseError::TableNotFound); access
//! denied and validation errors are
//! [`LeaseError::Refused`](kinesis_lease_core::LeaseError::Refused); each names the table and
//! the operation.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod error;
mod item;
mod retry;
mod store;
mod table;

pub use error::DynamoLeaseError;
pub use store::{DynamoCalls, DynamoLeaseStore};
