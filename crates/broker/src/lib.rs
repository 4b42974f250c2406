//! kinesis-broker: consume Amazon Kinesis Data Streams correctly at scale.
//!
//! Instances of a service share a stream's shards through a lease table; each instance reads
//! the shards it holds into one bounded channel, runs your handler on the records (serially, on
//! n workers, or on n lanes that keep each partition key in order), checkpoints only what has
//! settled, and hands shards over at once when it shuts down. Delivery is at least once.
//!
//! This is the crate a service depends on: it re-exports what users need from the layers
//! below (`kinesis-lease-core`, `kinesis-lease-memory`, `kinesis-lease-dynamo` behind the
//! `dynamodb-lease` feature, `kinesis-dispatch`, `kinesis-shard-reader`).
//!
//! # Examples
//!
//! ```
//! use kinesis_broker::{Broker, Delivery, MemoryStream, Publisher, StartAt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let kinesis = MemoryStream::new();
//! kinesis.create_stream("orders", 4)?;
//! Publisher::new(kinesis.clone(), "orders").put("customer-1", "order #1").await?;
//!
//! let mut broker = Broker::builder().kinesis(kinesis).build()?;
//! let mut deliveries = broker.subscribe("orders").start_at(StartAt::TrimHorizon).stream()?;
//! let running = broker.start().await?;
//!
//! use tokio_stream::StreamExt;
//! let delivery = deliveries.next().await.expect("a delivery");
//! assert_eq!(delivery.payload().as_ref(), b"order #1");
//! delivery.ack();
//! running.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Features
//!
//! - `dynamodb-lease`: [`DynamoLeaseStore`], a lease table on DynamoDB shared by every
//!   instance, and [`BrokerBuilder::dynamo_lease_table`].
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod broker;
mod error;
mod mount;
mod owner;
mod publish_plan;
mod publisher;
mod running;
mod stats;
mod subscription;

pub use broker::{Broker, BrokerBuilder};
pub use error::BrokerError;
pub use publisher::{Published, Publisher};
pub use running::{RunningBroker, ShutdownReport};
pub use stats::{BrokerStats, ShardStats, StreamStats};
pub use subscription::{BatchSubscriptionBuilder, SubscriptionBuilder};

#[doc(inline)]
pub use kinesis_dispatch::{
    BatchFailure, Delivery, DeliveryStream, HandlerError, RetryPolicy, PARTITION_KEY_HEADER,
    SEQUENCE_HEADER, SHARD_HEADER, STREAM_HEADER,
};
#[doc(inline)]
pub use kinesis_lease_core::{
    Checkpoint, Clock, Holder, Lease, LeaseError, LeaseKey, LeaseStore, Lost, ManualClock, Outcome,
    SequenceNumber, SystemClock, Take,
};
#[cfg(feature = "dynamodb-lease")]
#[doc(inline)]
pub use kinesis_lease_dynamo::{DynamoCalls, DynamoLeaseError, DynamoLeaseStore};
#[doc(inline)]
pub use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
#[doc(inline)]
pub use kinesis_shard_reader::{
    AwsKinesis, KinesisApi, KplStats, MemoryStream, Op, Position as StartAt, PutEntry, PutOutcome,
    ReaderError, RecordsPage, Shard, ShardEvent, ShardSubscription, StreamConsumer,
};

/// The README's usage example, compiled as a doctest.
#[cfg(all(doctest, feature = "dynamodb-lease"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
