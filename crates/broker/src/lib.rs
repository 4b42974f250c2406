//! kinesis-broker: consume Amazon Kinesis Data Streams correctly at scale.
//!
//! Instances of a service share a stream's shards through a lease table; each instance reads
//! the shards it holds into one bounded channel, runs your handler on the records (serially, on
//! n workers, or on n lanes that keep each partition key in order), checkpoints only what has
//! settled, and hands shards over at once when it shuts down. Delivery is at least once.
//!
//! This is the crate a service depends on: it re-exports what users need from the layers
//! below. Two contracts sit at the bottom, neither with an AWS dependency:
//! `kinesis-lease-core` (lease stores: `kinesis-lease-memory`, and `kinesis-lease-dynamo`
//! behind the `dynamodb-lease` feature) and `kinesis-stream-core` (Kinesis sources:
//! `kinesis-stream-aws`, and `kinesis-stream-memory` behind the `testing` feature). On them:
//! `kinesis-dispatch` (channel, lanes, settlement), `kinesis-shard-reader` (reading one shard),
//! `kinesis-fleet` (leases, roster, balancing, keepers), `kinesis-publisher`. A store or a
//! source of your own depends on its contract crate alone (docs/crates.md).
//!
//! # Examples
//!
//! ```
//! use kinesis_broker::testing::MemoryStream;
//! use kinesis_broker::{Broker, Delivery, Publisher, StartAt};
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
//! # Where things are
//!
//! - The crate root: what a service uses (the broker, subscriptions, deliveries, hooks,
//!   shutdown, stats, the publisher, the lease stores).
//! - [`lease`]: the lease contract, for writing a lease store of your own.
//! - [`kinesis`]: the Kinesis contract, for reading from a source of your own.
//! - `testing` (feature `testing`): `MemoryStream`, an in-process Kinesis with fault
//!   injection, and a manual clock.
//!
//! # Features
//!
//! - `dynamodb-lease`: [`DynamoLeaseStore`], a lease table on DynamoDB shared by every
//!   instance, and [`BrokerBuilder::dynamo_lease_table`].
//! - `metrics`: metrics through the `metrics` facade (MillisBehindLatest, RecordsProcessed,
//!   LeasesHeld, ...; see docs/operations.md).
//! - `kcl-import` (implies `dynamodb-lease`): [`SubscriptionBuilder::import_kcl`], importing a
//!   Java KCL application's checkpoints at start, and [`KclImport`].
//! - `serde`: [`Delivery::json`] and [`SubscriptionBuilder::handle_json`].
//! - `testing`: the `testing` module.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod broker;
mod error;
mod mount;
mod owner;
mod publisher;
mod registered;
mod running;
mod shutdown;
mod startup;
mod startup_retry;
mod stats;
mod subscription;
mod timings;
#[cfg(feature = "testing")]
mod tokio_clock;

#[cfg(feature = "dynamodb-lease")]
pub use broker::TableSetup;
pub use broker::{Broker, BrokerBuilder};
pub use error::BrokerError;
pub use publisher::Publisher;
pub use running::RunningBroker;
pub use shutdown::{ShutdownHandle, ShutdownReport};
pub use stats::{BrokerStats, Load, ShardStats, StatsHandle, StreamStats, Totals};
pub use subscription::{BatchSubscriptionBuilder, SubscriptionBuilder};

#[doc(inline)]
pub use kinesis_dispatch::{
    BatchFailure, Delivery, DeliveryStream, DispatchError, HandlerError, Permanent, RetryPolicy,
    Stuck,
};
#[doc(inline)]
pub use kinesis_fleet::{Hooks, Release, ShardInfo};
#[cfg(feature = "kcl-import")]
#[doc(inline)]
pub use kinesis_kcl_import::{
    DynamoKclTable, ImportError as KclImportError, ImportReport as KclImportReport, KclImport,
};
#[doc(inline)]
pub use kinesis_lease_core::{Checkpoint, SequenceNumber};
#[cfg(feature = "dynamodb-lease")]
#[doc(inline)]
pub use kinesis_lease_dynamo::{DynamoLeaseError, DynamoLeaseStore};
#[doc(inline)]
pub use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
#[doc(inline)]
pub use kinesis_publisher::Published;
#[doc(inline)]
pub use kinesis_shard_reader::KplStats;
#[doc(inline)]
pub use kinesis_stream_aws::AwsKinesis;
#[doc(inline)]
pub use kinesis_stream_core::{PutEntry, ReaderError, StartAt};

/// The lease contract, for writing a lease store of your own: the [`LeaseStore`](lease::LeaseStore)
/// trait, its rows and outcomes, and the clocks. A store depends on `kinesis-lease-core` alone;
/// this module re-exports it for code that already depends on the facade.
pub mod lease {
    #[doc(inline)]
    pub use kinesis_lease_core::{
        rules, BoxError, BoxFuture, Checkpoint, Clock, ErrorChain, Holder, Lease, LeaseError,
        LeaseKey, LeaseResult, LeaseStore, Load, Lost, ManualClock, Outcome, SequenceNumber,
        SystemClock, Take,
    };
    #[cfg(feature = "dynamodb-lease")]
    #[doc(inline)]
    pub use kinesis_lease_dynamo::DynamoCalls;
}

/// The Kinesis contract, for reading from a source of your own: the
/// [`KinesisApi`](kinesis::KinesisApi) trait and every type its methods take and return.
pub mod kinesis {
    #[doc(inline)]
    pub use kinesis_dispatch::Record;
    #[doc(inline)]
    pub use kinesis_lease_core::{BoxFuture, SequenceNumber};
    #[doc(inline)]
    pub use kinesis_stream_aws::AwsKinesis;
    #[doc(inline)]
    pub use kinesis_stream_core::{
        ConsumerStatus, KinesisApi, PutEntry, PutOutcome, ReaderError, RecordsPage, Shard,
        ShardEvent, ShardSubscription, StartAt, StreamConsumer,
    };
}

/// Test doubles (feature `testing`): [`MemoryStream`](testing::MemoryStream), an in-process
/// Kinesis with fault injection ([`Op`](testing::Op)), a manual clock, and a wall clock that
/// follows tokio's paused time ([`TokioClock`](testing::TokioClock)).
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing {
    #[doc(inline)]
    pub use crate::tokio_clock::TokioClock;
    #[doc(inline)]
    pub use kinesis_lease_core::ManualClock;
    #[doc(inline)]
    pub use kinesis_stream_memory::{hash_key, ConsumerDeletion, MemoryStream, Op, StoredRecord};
}

/// The README's usage example, compiled as a doctest.
#[cfg(all(doctest, feature = "dynamodb-lease"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The library option of docs/migrating-from-kcl.md, compiled as a doctest.
#[cfg(all(doctest, feature = "kcl-import"))]
#[doc = include_str!("../../../docs/migrating-from-kcl.md")]
pub struct MigratingFromKclDoctests;
