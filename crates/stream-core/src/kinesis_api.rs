//! `KinesisApi`: the few Kinesis calls readers and publishers need, over any backend.
//!
//! Two implementations ship: `AwsKinesis` (crate `kinesis-stream-aws`) over `aws-sdk-kinesis`,
//! and `MemoryStream` (crate `kinesis-stream-memory`), in process, for tests and the
//! quickstart. A source of your own implements this trait and depends on this crate alone.
//!
//! Two ways to read: polling (`shard_iterator`, then `get_records`), and enhanced fan-out
//! (`register_consumer`, then `subscribe_to_shard`, whose events are pulled one at a time).
//! The fan-out calls have default bodies that refuse, so an implementation written for
//! polling alone keeps compiling.

use std::fmt;

use kinesis_lease_core::BoxFuture;

use crate::{
    PutEntry, PutOutcome, ReaderError, RecordsPage, Shard, ShardSubscription, StartAt,
    StreamConsumer,
};

fn unsupported<T>(operation: &'static str, resource: &str) -> Result<T, ReaderError> {
    Err(ReaderError::Refused {
        operation,
        resource: resource.to_owned(),
        source: "this KinesisApi does not implement enhanced fan-out".into(),
    })
}

/// The Kinesis calls of readers and publishers. Object safe: readers hold
/// `Arc<dyn KinesisApi>`.
pub trait KinesisApi: Send + Sync + fmt::Debug {
    /// Every shard of `stream`, open and closed, following pages to the end.
    fn list_shards<'a>(&'a self, stream: &'a str)
        -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>>;

    /// A shard iterator at `position`.
    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>>;

    /// Up to `limit` records (1 to 10,000) from `iterator`. `stream` and `shard` name the
    /// resource in errors.
    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>>;

    /// Puts up to 500 records; the result has one outcome per entry, in order.
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>>;

    /// Registers the enhanced fan-out consumer `name` on `stream`, or returns the one already
    /// registered under that name (other instances share it).
    fn register_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        let _ = name;
        Box::pin(async move { unsupported("RegisterStreamConsumer", stream) })
    }

    /// The consumer `name` of `stream`, with its status.
    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        let _ = name;
        Box::pin(async move { unsupported("DescribeStreamConsumer", stream) })
    }

    /// Deregisters the consumer `name` of `stream`: every subscription through it ends.
    fn deregister_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ReaderError>> {
        let _ = name;
        Box::pin(async move { unsupported("DeregisterStreamConsumer", stream) })
    }

    /// Subscribes `consumer_arn` to `shard` from `position`. `stream` names the resource in
    /// errors. Kinesis allows one subscribe per second per consumer and shard, and one live
    /// subscription per consumer and shard (`ResourceInUse` otherwise).
    fn subscribe_to_shard<'a>(
        &'a self,
        stream: &'a str,
        consumer_arn: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<Box<dyn ShardSubscription>, ReaderError>> {
        let _ = (consumer_arn, position);
        Box::pin(async move { unsupported("SubscribeToShard", &format!("{stream}/{shard}")) })
    }
}
