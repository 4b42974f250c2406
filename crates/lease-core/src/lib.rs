//! The lease contract of kinesis-broker: which broker reads which shard, until when, and how
//! far it got.
//!
//! Instances of a service share a stream's shards through a lease table with one row per
//! shard, keyed `stream:shard` ([`LeaseKey`]). A row ([`Lease`]) holds its owner, an expiry,
//! a counter bumped by every write, a [`Checkpoint`] and the shard's parents. A
//! [`LeaseStore`] takes, renews, checkpoints, reads, lists and releases rows, and every write
//! is conditional: takes on the counter the taker observed, everything else on the holder's
//! owner id and per-take token ([`Holder`]); its documentation states the rules and the [`rules`] module states them as
//! code. Losing a condition is an [`Outcome`], not an error.
//!
//! This crate is the small, stable core: it has no AWS dependency and changes rarely.
//! Applications depend on the `kinesis-broker` facade; someone writing a custom store depends
//! on this crate alone and runs the conformance kit (feature `testkit`) in its tests.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod backoff;
mod checkpoint;
mod clock;
mod digits;
mod epochs;
mod error;
mod holder;
mod key;
mod lease;
mod load;
#[cfg(feature = "testkit")]
mod outage;
pub mod rules;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use backoff::Backoff;
pub use checkpoint::{Checkpoint, SequenceNumber};
pub use clock::{duration_ms, Clock, ManualClock, SystemClock};
pub use epochs::Epochs;
pub use error::{BoxError, ErrorChain, LeaseError};
pub use holder::Holder;
pub use key::LeaseKey;
pub use lease::Lease;
pub use load::Load;
pub use store::{BoxFuture, LeaseResult, LeaseStore, Lost, Outcome, Take};
