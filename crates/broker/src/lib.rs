//! kinesis-broker: consume Amazon Kinesis Data Streams correctly at scale.
//!
//! This is the crate a service depends on; it re-exports what users need from the layers
//! below (`kinesis-lease-core`, the lease stores, dispatch and the shard readers).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

#[doc(inline)]
pub use kinesis_lease_core::{
    Checkpoint, Clock, Lease, LeaseError, LeaseKey, LeaseStore, Lost, ManualClock, Outcome,
    SequenceNumber, SystemClock, Take,
};
#[cfg(feature = "dynamodb-lease")]
#[doc(inline)]
pub use kinesis_lease_dynamo::{DynamoCalls, DynamoLeaseError, DynamoLeaseStore};
#[doc(inline)]
pub use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
