//! `KinesisApi`: the few Kinesis calls readers and publishers need, over any backend.
//!
//! Two implementations: [`AwsKinesis`](crate::AwsKinesis) over `aws-sdk-kinesis`, and
//! `MemoryStream` (feature `testing`), in process, for tests and the quickstart.
//!
//! Two ways to read: polling (`shard_iterator`, then `get_records`), and enhanced fan-out
//! (`register_consumer`, then `subscribe_to_shard`, whose events are pulled one at a time).
//! The fan-out calls have default bodies that refuse, so an implementation written for
//! polling alone keeps compiling.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kinesis_dispatch::Record;
use kinesis_lease_core::{BoxFuture, SequenceNumber};

use crate::ReaderError;

/// One shard as ListShards describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shard {
    /// `shardId-000000000000`.
    pub id: String,
    /// The shard it was split from, or the first of the two merged into it.
    pub parent: Option<String>,
    /// The second parent of a merge.
    pub adjacent_parent: Option<String>,
    /// Its hash key range, inclusive.
    pub hash_range: (u128, u128),
    /// Set once the shard is closed (split or merged); never comparable with real sequence
    /// numbers on some emulators, so readers detect the end by a missing next iterator.
    pub ending_sequence: Option<String>,
}

impl Shard {
    /// An open shard without parents over `hash_range` (inclusive); set the other fields on
    /// the value.
    pub fn new(id: impl Into<String>, hash_range: (u128, u128)) -> Self {
        Self {
            id: id.into(),
            parent: None,
            adjacent_parent: None,
            hash_range,
            ending_sequence: None,
        }
    }

    /// The parents (zero, one or two).
    pub fn parents(&self) -> Vec<String> {
        self.parent
            .iter()
            .chain(self.adjacent_parent.iter())
            .cloned()
            .collect()
    }
}

/// Where a shard iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still in the shard.
    TrimHorizon,
    /// After the newest record: only records put from now on.
    Latest,
    /// The first record that arrived at or after this time (Kinesis keeps milliseconds).
    AtTimestamp(SystemTime),
    /// At this record.
    AtSequence(SequenceNumber),
    /// Just after this record.
    AfterSequence(SequenceNumber),
}

impl StartAt {
    /// At a time given in milliseconds since the Unix epoch, as checkpoints store it.
    pub fn at_millis(millis: u64) -> Self {
        StartAt::AtTimestamp(time_of_millis(millis))
    }
}

/// Milliseconds since the Unix epoch (0 for a time before it).
pub(crate) fn millis_of(time: &SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `millis` milliseconds after the Unix epoch.
pub(crate) fn time_of_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

/// What one GetRecords call returned.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecordsPage {
    /// The records, in sequence order.
    pub records: Vec<Record>,
    /// The iterator for the next call; `None` once a closed shard has been read to its end.
    pub next_iterator: Option<String>,
    /// How far the page is behind the tip of the shard.
    pub millis_behind: Option<u64>,
    /// The shards that replaced this one, reported with its end.
    pub child_shards: Vec<String>,
}

impl RecordsPage {
    /// A page of `records` read with the iterator `next_iterator` to go on (`None` once a
    /// closed shard has been read to its end); set the other fields on the value.
    pub fn new(records: Vec<Record>, next_iterator: Option<String>) -> Self {
        Self {
            records,
            next_iterator,
            millis_behind: None,
            child_shards: Vec::new(),
        }
    }
}

/// One record to put.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutEntry {
    /// The data.
    pub payload: Bytes,
    /// The partition key (1 to 256 characters); its MD5 picks the shard.
    pub partition_key: String,
    /// A hash key that picks the shard instead of the partition key's MD5.
    pub explicit_hash_key: Option<u128>,
}

impl PutEntry {
    /// An entry routed by its partition key.
    pub fn new(payload: impl Into<Bytes>, partition_key: impl Into<String>) -> Self {
        Self {
            payload: payload.into(),
            partition_key: partition_key.into(),
            explicit_hash_key: None,
        }
    }

    /// The same entry routed by `hash_key` instead of its partition key's MD5.
    pub fn with_hash_key(mut self, hash_key: u128) -> Self {
        self.explicit_hash_key = Some(hash_key);
        self
    }
}

/// The outcome of one entry of a PutRecords call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored at this shard and sequence number.
    Stored {
        /// The shard.
        shard: String,
        /// The sequence number.
        sequence: String,
    },
    /// Not stored (throttled or failed); put it again.
    Failed {
        /// The error code Kinesis gave.
        code: String,
        /// Its message.
        message: String,
    },
}

/// Where a stream consumer is in its life (DescribeStreamConsumer's `ConsumerStatus`). Only an
/// `Active` consumer can be subscribed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerStatus {
    /// Registered, not usable yet: subscriptions are refused (ResourceInUse).
    Creating,
    /// Usable.
    Active,
    /// Deregistered and being deleted: it is still described, with its ARN, for a while, but
    /// subscriptions through it answer ResourceNotFound; once it is gone, registering the name
    /// again gives a consumer with a new ARN.
    Deleting,
}

/// An enhanced fan-out consumer registered on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamConsumer {
    /// The name it was registered with.
    pub name: String,
    /// Its ARN, which `subscribe_to_shard` takes. Kinesis puts the creation time in it: a
    /// consumer deleted and registered again has a new ARN.
    pub arn: String,
    /// True once it is `ACTIVE` (`status == ConsumerStatus::Active`): subscriptions are
    /// refused while it is `CREATING` or `DELETING`.
    pub active: bool,
    /// Its status.
    pub status: ConsumerStatus,
}

impl StreamConsumer {
    /// A consumer as a [`KinesisApi`] implementation describes it: `ACTIVE` if `active`, else
    /// `CREATING` (use [`with_status`](Self::with_status) for `DELETING`).
    pub fn new(name: impl Into<String>, arn: impl Into<String>, active: bool) -> Self {
        let status = if active {
            ConsumerStatus::Active
        } else {
            ConsumerStatus::Creating
        };
        Self::with_status(name, arn, status)
    }

    /// A consumer in `status`.
    pub fn with_status(
        name: impl Into<String>,
        arn: impl Into<String>,
        status: ConsumerStatus,
    ) -> Self {
        Self {
            name: name.into(),
            arn: arn.into(),
            active: status == ConsumerStatus::Active,
            status,
        }
    }
}

/// One event of a shard subscription.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ShardEvent {
    /// The records, in sequence order (possibly none: Kinesis sends an event every few
    /// seconds even when nothing arrived).
    pub records: Vec<Record>,
    /// Where a later subscription continues (just after this sequence number); `None` when
    /// the event does not move it.
    pub continuation: Option<String>,
    /// How far the event is behind the tip of the shard.
    pub millis_behind: Option<u64>,
    /// Set once the shard has ended (split or merged) and everything in it was sent: the
    /// shards that replaced it.
    pub shard_end: Option<Vec<String>>,
}

impl ShardEvent {
    /// An event carrying `records`, continuing after `continuation`.
    pub fn new(records: Vec<Record>, continuation: Option<String>) -> Self {
        Self {
            records,
            continuation,
            ..Self::default()
        }
    }

    /// The same event, `millis_behind` the tip.
    pub fn behind(mut self, millis_behind: u64) -> Self {
        self.millis_behind = Some(millis_behind);
        self
    }

    /// The same event, the last of an ended shard whose children are `children`.
    pub fn ending(mut self, children: Vec<String>) -> Self {
        self.shard_end = Some(children);
        self
    }
}

/// A live SubscribeToShard subscription. Events are pulled one at a time: nothing more is
/// read from it until the reader asks, so a slow handler never makes it buffer more than one
/// event. Dropping it ends the subscription.
pub trait ShardSubscription: Send + fmt::Debug {
    /// The next event; `Ok(None)` once the subscription has ended (Kinesis ends each after
    /// 5 minutes): subscribe again from the last continuation.
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<ShardEvent>, ReaderError>>;
}

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
