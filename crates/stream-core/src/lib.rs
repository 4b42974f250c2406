//! The Kinesis contract of kinesis-broker: the [`KinesisApi`] trait and every type its methods
//! take and return, with no AWS dependency.
//!
//! It mirrors `kinesis-lease-core` on the lease side: readers, the fleet and the publisher are
//! written against this trait alone, `kinesis-stream-aws` implements it over the AWS SDK and
//! `kinesis-stream-memory` in process. A source of your own (a proxy, a recorder, another
//! emulator) depends on this crate alone, and builds without compiling the AWS SDK.
//!
//! - [`KinesisApi`]: ListShards, GetShardIterator, GetRecords, PutRecords and the enhanced
//!   fan-out calls (with default bodies that refuse, for a polling-only source).
//! - [`Shard`], [`StartAt`], [`Record`], [`RecordsPage`], [`PutEntry`], [`PutOutcome`],
//!   [`StreamConsumer`], [`ConsumerStatus`], [`ShardEvent`], [`ShardSubscription`]: what
//!   goes in and out.
//! - [`ReaderError`]: what the calls (and the readers above them) run into, each naming the
//!   stream and shard.
//!
//! # A source of your own
//!
//! A fixed, one-shard stream that serves two records and then ends, implemented with this
//! crate alone:
//!
//! ```
//! use kinesis_lease_core::{BoxFuture, SequenceNumber};
//! use kinesis_stream_core::{
//!     KinesisApi, PutEntry, PutOutcome, ReaderError, Record, RecordsPage, Shard, StartAt,
//! };
//!
//! #[derive(Debug)]
//! struct Fixed;
//!
//! impl KinesisApi for Fixed {
//!     fn list_shards<'a>(&'a self, _stream: &'a str) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
//!         Box::pin(async { Ok(vec![Shard::new("shardId-000000000000", (0, u128::MAX))]) })
//!     }
//!
//!     fn shard_iterator<'a>(
//!         &'a self,
//!         _stream: &'a str,
//!         _shard: &'a str,
//!         _position: &'a StartAt,
//!     ) -> BoxFuture<'a, Result<String, ReaderError>> {
//!         Box::pin(async { Ok("start".to_owned()) })
//!     }
//!
//!     fn get_records<'a>(
//!         &'a self,
//!         stream: &'a str,
//!         shard: &'a str,
//!         iterator: &'a str,
//!         _limit: usize,
//!     ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
//!         Box::pin(async move {
//!             if iterator != "start" {
//!                 return Err(ReaderError::ExpiredIterator {
//!                     stream: stream.to_owned(),
//!                     shard: shard.to_owned(),
//!                 });
//!             }
//!             let record = |n: &str, data: &'static str| {
//!                 Record::new(data, "key", SequenceNumber::new(n, None).expect("a sequence number"))
//!             };
//!             // No next iterator: the shard was read to its end.
//!             Ok(RecordsPage::new(vec![record("1", "one"), record("2", "two")], None))
//!         })
//!     }
//!
//!     fn put_records<'a>(
//!         &'a self,
//!         stream: &'a str,
//!         _entries: &'a [PutEntry],
//!     ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
//!         Box::pin(async move {
//!             Err(ReaderError::Refused {
//!                 operation: "PutRecords",
//!                 resource: stream.to_owned(),
//!                 source: "a read-only source".into(),
//!             })
//!         })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let source = Fixed;
//! let shards = source.list_shards("orders").await?;
//! let iterator = source.shard_iterator("orders", &shards[0].id, &StartAt::TrimHorizon).await?;
//! let page = source.get_records("orders", &shards[0].id, &iterator, 100).await?;
//! assert_eq!(page.records.len(), 2);
//! assert!(page.next_iterator.is_none());
//! // The fan-out calls refuse by default.
//! assert!(source.register_consumer("orders", "app").await.is_err());
//! # Ok::<(), ReaderError>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod consumer;
mod error;
mod kinesis_api;
mod put;
mod records;
mod shard;
mod start_at;
mod subscription;

pub use consumer::{ConsumerStatus, StreamConsumer};
pub use error::{validate_stream_name, ReaderError};
pub use kinesis_api::KinesisApi;
pub use put::{PutEntry, PutOutcome};
pub use records::{Record, RecordsPage};
pub use shard::Shard;
pub use start_at::{millis_of, time_of_millis, StartAt};
pub use subscription::{ShardEvent, ShardSubscription};
