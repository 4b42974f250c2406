//! Where records meet handlers: the subscription's shared channel, its lanes and batches, and
//! the settlement that tells each shard how far it may checkpoint. Knows nothing of AWS.
//!
//! A subscription's shard readers each hold a [`ShardFeed`] into one bounded [`channel`]
//! (see its `# Backpressure`). A [`Dispatcher`] runs the user's [`Handler`] on what arrives:
//! serially, on n unordered workers, or on n lanes by partition key ([`Workers`]). Each
//! delivery belongs to its shard's [`ShardSettlement`]; `Ok` from the handler (or
//! [`Delivery::ack`]) settles it, and the settlement offers the shard's checkpoint: the last
//! record of the settled prefix, never past a record that has not settled.
//!
//! # Lost leases
//!
//! When a shard's lease is lost its settlement is [revoked](ShardSettlement::revoke): its
//! deliveries not yet handled are dropped instead of handled (their settlement could no longer
//! be checkpointed, and the new owner reads them again), and a record being retried stops.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod attempt;
mod batch;
mod channel;
mod config;
mod ctx;
mod delivery;
mod dispatcher;
mod error;
mod fair_lane;
mod handler;
mod lane;
mod metrics;
mod numbered;
mod parking;
mod retry;
mod room;
mod router;
mod rx;
mod settlement;
mod stream;

pub use channel::{
    channel, channel_for, DeliveryReceiver, DeliverySender, QuietFeed, ShardFeed, TrySend,
    DEFAULT_CAPACITY,
};
pub use config::{DispatchConfig, Workers};
pub use delivery::Delivery;
pub use dispatcher::{DispatchHandle, Dispatcher};
pub use error::DispatchError;
pub use handler::{BatchFailure, BatchHandler, Handler, HandlerError, OneHandler, Permanent};
pub use kinesis_stream_core::Record;
pub use lane::{lane_of, LANE_HASH_KEYS};
pub use retry::{Exhausted, RetryPolicy};
pub use settlement::{CheckpointCursor, Progress, ShardSettlement, Stuck};
pub use stream::DeliveryStream;

/// Of the handler calls done at their first poll, one in this many is timed for
/// [`ShardSettlement::busy`] and counts this many times over: two clock reads per record
/// would cost more than the rest of the load's bookkeeping. Calls that wait are all timed.
pub const BUSY_SAMPLE_EVERY: u32 = 8;

// The draw that samples for the load also samples one call in 64 for the metrics' histogram:
// the load's rate must divide it, or it is sampled at another rate than it is weighted.
const _: () = assert!(
    BUSY_SAMPLE_EVERY > 0 && metrics::SAMPLE_EVERY.is_multiple_of(BUSY_SAMPLE_EVERY),
    "BUSY_SAMPLE_EVERY must divide metrics::SAMPLE_EVERY"
);
