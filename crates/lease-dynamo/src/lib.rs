//! `DynamoLeaseStore`: the kinesis-broker lease table on Amazon DynamoDB, shared by every
//! instance of a service.
//!
//! # The table
//!
//! One string hash key, `lease_key`. A shard's row is keyed `stream:shard` and holds:
//!
//! | attribute | type | for |
//! | --- | --- | --- |
//! | `lease_owner` | S | the owner id holding the row; absent when free |
//! | `lease_token` | S | the token of the current holding, chosen by the take that wrote it; renew, checkpoint, release and hand-over require it, so another process with the same owner id cannot write this holding; absent when free and after a hand-over |
//! | `lease_expiry` | N | ms since the epoch by the writer's clock, when the lease lapses unless renewed: for operators only, no condition reads it |
//! | `lease_counter` | N | bumped by every write (`ADD lease_counter :one`); takes are fenced on it |
//! | `checkpoint` | S | sequence number, `SHARD_END` or a start position (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<ms>`) |
//! | `checkpoint_subsequence` | N | optional, for de-aggregated KPL records |
//! | `parent_shards` | SS | the parents of a split or merge child |
//! | `lease_wanted_by` | S | another owner that asked for the row |
//! | `repositioned` | S | the marker of the reposition applied to the row, written by the take that applied it (or when the row was created under it), so a reposition applies once per subscription |
//! | `write_id` | S | a random id stamped by every conditional write, so a retried write whose first attempt landed recognises itself |
//!
//! Each stream also has an *index*, so [`list`](kinesis_lease_core::LeaseStore::list) reads one
//! stream's rows without scanning the others: a header keyed `stream:*` whose `pages` (SS)
//! names its pages, and pages keyed `stream:*p<page>` whose `shards` (SS) name its rows, at
//! most 128 Kinesis shard ids (about 3 KB) each, so no item grows with the stream (see
//! [`migrate_index`](DynamoLeaseStore::migrate_index) for headers written by earlier releases,
//! which listed every shard in one `shards` set). Listing reads the header, its pages, then its
//! rows, all consistently. And one *epoch row*, keyed `stream:*epoch`, whose `epoch` (N) counts
//! writes that freed rows, and whose `roster_epoch` (N) counts the bumps of the stream's roster
//! (the epoch of `stream@members`, whose own epoch row is bumped first, for earlier releases),
//! so that one read tells an instance both ([`epochs`](kinesis_lease_core::LeaseStore::epochs)).
//! The epoch has an item of its own because DynamoDB bills a read by the whole item: an epoch
//! read costs half a read unit (eventually consistent) whatever the stream's size. `*` is never
//! a shard id, so none of these rows collides with a lease.
//!
//! # Writes
//!
//! [`create`](kinesis_lease_core::LeaseStore::create) adds the shard to the index, then
//! writes the row with one `PutItem` conditioned on `attribute_not_exists(lease_key)` (counter
//! 1, no owner). Every other write of a shard row is one conditional `UpdateItem` that also
//! bumps `lease_counter` and sets `write_id`, with `ReturnValues = ALL_NEW` and
//! `ReturnValuesOnConditionCheckFailure = ALL_OLD`. Each condition below is joined with
//! `attribute_not_exists(write_id) OR write_id <> :write_id`, so a retried call never lands
//! twice. The conditions:
//!
//! - take: `attribute_not_exists(lease_key)` for fence 0 (the take creates the row), otherwise
//!   `lease_counter = :fence`, the counter the taker saw;
//! - renew, checkpoint, release: `lease_owner = :owner AND lease_token = :token`;
//! - hand-over: `lease_owner = :owner AND lease_token = :token AND lease_wanted_by = :to`;
//! - request: `lease_owner = :holder AND lease_owner <> :asker AND
//!   attribute_not_exists(lease_wanted_by)`;
//! - evict (an operator's release or reset): `lease_counter = :observed`, whoever holds it.
//!
//! # IAM
//!
//! The calls above need, on the table's ARN, `dynamodb:GetItem`, `dynamodb:BatchGetItem`,
//! `dynamodb:PutItem`, `dynamodb:UpdateItem`, `dynamodb:DeleteItem` (the delete's transaction
//! needs the actions of its parts) and `dynamodb:DescribeTable`, plus `dynamodb:CreateTable`
//! for [`ensure_table`](DynamoLeaseStore::ensure_table).
//!
//! [`delete`](kinesis_lease_core::LeaseStore::delete) is one `TransactWriteItems`: a
//! `Delete` of the row conditioned on `lease_counter = :observed` and an `Update` that takes
//! the shard out of its index page (`DELETE shards :shard`), so no create can land between them
//! and leave a row the index does not name. `create` adds the shard to the index again after
//! its put, for a delete of an earlier row that landed between its first add and the put.
//!
//! No condition reads a clock. A lost condition comes back with the row's old image, so
//! [`Outcome::Lost`](kinesis_lease_core::Outcome::Lost) needs no second read, except when that
//! image carries this call's own `write_id`: an earlier attempt of the same call landed and
//! only its response was lost, so the write is reported as
//! [`Outcome::Written`](kinesis_lease_core::Outcome::Written) with that image.
//!
//! # Failures
//!
//! Throttling, 5xx and timeouts are retried with capped exponential backoff and jitter
//! within a budget (2.5 s by default, well under a 10 s lease), then reported as
//! [`LeaseError::Unavailable`](kinesis_lease_core::LeaseError::Unavailable). A missing table
//! is [`LeaseError::TableNotFound`](kinesis_lease_core::LeaseError::TableNotFound); access
//! denied and validation errors are
//! [`LeaseError::Refused`](kinesis_lease_core::LeaseError::Refused); each names the table and
//! the operation.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod billing;
mod condition;
mod error;
mod index;
mod item;
mod pages;
mod retry;
mod store;
mod table;
mod update;

pub use billing::{Bill, Billed, BilledStore};
pub use error::DynamoLeaseError;
pub use index::IndexMigration;
pub use retry::is_transient_sdk_error;
pub use store::{DynamoCalls, DynamoLeaseStore};
