//! The publisher of kinesis-broker: puts records into a stream in order per partition key,
//! plain or packed into KPL aggregates, retrying what Kinesis did not store.
//!
//! Its own crate, on the Kinesis contract (`kinesis-stream-core`) and `kinesis-kpl` alone: a
//! service that only produces needs neither leases nor readers, and the publisher works over
//! any [`KinesisApi`](kinesis_stream_core::KinesisApi) (AWS, the in-process `MemoryStream`,
//! a source of your own). The facade (`kinesis-broker`) re-exports it with its errors as
//! `BrokerError`.
//!
//! - [`Publisher`]: the I/O (the calls, the retries, the shard map).
//! - `publish_plan`: the pure planning of each call (which records go in, how they are
//!   packed), unit-tested without Kinesis.
//! - [`PublishError`]: a failed put, naming the stream.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod error;
mod publish_plan;
mod published;
mod publisher;

pub use error::PublishError;
pub use published::Published;
pub use publisher::Publisher;
