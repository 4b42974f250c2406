//! Enhanced fan-out over `aws-sdk-kinesis`: stream consumers and SubscribeToShard event
//! streams, for [`AwsKinesis`].
//!
//! Consumers are registered by stream ARN (found once with DescribeStreamSummary). The SDK's
//! event receiver is pulled one event at a time; nothing more is read off the connection
//! until the reader asks for the next event.

use aws_sdk_kinesis::types::{
    ConsumerStatus, ShardIteratorType, StartingPosition, SubscribeToShardEventStream,
};
use kinesis_lease_core::{BoxFuture, SequenceNumber};
use kinesis_stream_core::{
    ConsumerStatus as Status, ReaderError, Record, ShardEvent, ShardSubscription, StartAt,
    StreamConsumer,
};

use crate::aws_kinesis::{classify, to_system_time, AwsKinesis};

/// The SDK's consumer status as ours; a status this crate does not know counts as `CREATING`
/// (not usable, and not a reason to register again).
fn status_of(status: &ConsumerStatus) -> Status {
    match status {
        ConsumerStatus::Active => Status::Active,
        ConsumerStatus::Deleting => Status::Deleting,
        _ => Status::Creating,
    }
}

impl AwsKinesis {
    async fn stream_arn(&self, stream: &str) -> Result<String, ReaderError> {
        let out = self
            .client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|e| classify(e, "DescribeStreamSummary", stream, stream.to_owned()))?;
        Ok(out
            .stream_description_summary()
            .map(|s| s.stream_arn().to_owned())
            .unwrap_or_default())
    }

    pub(crate) async fn register_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<StreamConsumer, ReaderError> {
        let arn = self.stream_arn(stream).await?;
        let registered = self
            .client
            .register_stream_consumer()
            .stream_arn(&arn)
            .consumer_name(name)
            .send()
            .await;
        match registered {
            Ok(out) => {
                let c = out.consumer();
                Ok(StreamConsumer::with_status(
                    c.map_or(name, |c| c.consumer_name()),
                    c.map_or("", |c| c.consumer_arn()),
                    c.map_or(Status::Creating, |c| status_of(c.consumer_status())),
                ))
            }
            Err(error) => match classify(
                error,
                "RegisterStreamConsumer",
                stream,
                format!("{stream}/consumer/{name}"),
            ) {
                // Registered already (by another instance, or an earlier run): reuse it.
                ReaderError::InUse { .. } => self.describe_on(&arn, stream, name).await,
                other => Err(other),
            },
        }
    }

    pub(crate) async fn describe_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<StreamConsumer, ReaderError> {
        let arn = self.stream_arn(stream).await?;
        self.describe_on(&arn, stream, name).await
    }

    /// DescribeStreamConsumer on the stream of ARN `arn` (`stream` names it in errors).
    async fn describe_on(
        &self,
        arn: &str,
        stream: &str,
        name: &str,
    ) -> Result<StreamConsumer, ReaderError> {
        let out = self
            .client
            .describe_stream_consumer()
            .stream_arn(arn)
            .consumer_name(name)
            .send()
            .await
            .map_err(|e| {
                classify(
                    e,
                    "DescribeStreamConsumer",
                    stream,
                    format!("{stream}/consumer/{name}"),
                )
            })?;
        let c = out
            .consumer_description()
            .ok_or_else(|| ReaderError::Transient {
                operation: "DescribeStreamConsumer",
                resource: format!("{stream}/consumer/{name}"),
                source: "no consumer in the response".into(),
            })?;
        Ok(StreamConsumer::with_status(
            c.consumer_name(),
            c.consumer_arn(),
            status_of(c.consumer_status()),
        ))
    }

    pub(crate) async fn deregister_consumer_now(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<(), ReaderError> {
        let arn = self.stream_arn(stream).await?;
        self.client
            .deregister_stream_consumer()
            .stream_arn(arn)
            .consumer_name(name)
            .send()
            .await
            .map_err(|e| {
                classify(
                    e,
                    "DeregisterStreamConsumer",
                    stream,
                    format!("{stream}/consumer/{name}"),
                )
            })?;
        Ok(())
    }

    pub(crate) async fn subscribe_now(
        &self,
        stream: &str,
        consumer_arn: &str,
        shard: &str,
        position: &StartAt,
    ) -> Result<Box<dyn ShardSubscription>, ReaderError> {
        let resource = format!("{stream}/{shard}");
        let start = StartingPosition::builder();
        let start = match position {
            StartAt::TrimHorizon => start.r#type(ShardIteratorType::TrimHorizon),
            StartAt::Latest => start.r#type(ShardIteratorType::Latest),
            StartAt::AtTimestamp(time) => start
                .r#type(ShardIteratorType::AtTimestamp)
                .timestamp(aws_sdk_kinesis::primitives::DateTime::from(*time)),
            StartAt::AtSequence(seq) => start
                .r#type(ShardIteratorType::AtSequenceNumber)
                .sequence_number(seq.number()),
            StartAt::AfterSequence(seq) => start
                .r#type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq.number()),
        };
        let start = start.build().map_err(|e| ReaderError::Invalid {
            what: "starting position",
            value: format!("{position:?}"),
            reason: e.to_string(),
        })?;
        let out = self
            .client
            .subscribe_to_shard()
            .consumer_arn(consumer_arn)
            .shard_id(shard)
            .starting_position(start)
            .send()
            .await
            .map_err(|e| classify(e, "SubscribeToShard", stream, resource.clone()))?;
        Ok(Box::new(AwsSubscription {
            stream: stream.to_owned(),
            resource,
            events: out.event_stream,
        }))
    }
}

/// A live SubscribeToShard event stream.
struct AwsSubscription {
    stream: String,
    resource: String,
    events: aws_sdk_kinesis::primitives::event_stream::EventReceiver<
        SubscribeToShardEventStream,
        aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
    >,
}

impl std::fmt::Debug for AwsSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSubscription")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl ShardSubscription for AwsSubscription {
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<ShardEvent>, ReaderError>> {
        Box::pin(async move {
            loop {
                let received = self.events.recv().await.map_err(|e| {
                    classify(e, "SubscribeToShard", &self.stream, self.resource.clone())
                })?;
                let event = match received {
                    None => return Ok(None),
                    Some(SubscribeToShardEventStream::SubscribeToShardEvent(event)) => event,
                    // An event kind this SDK version does not know: skip it.
                    Some(_) => continue,
                };
                let mut records = Vec::with_capacity(event.records().len());
                for r in event.records() {
                    let sequence = SequenceNumber::new(r.sequence_number(), None).map_err(|e| {
                        ReaderError::Transient {
                            operation: "SubscribeToShard",
                            resource: self.resource.clone(),
                            source: Box::new(e),
                        }
                    })?;
                    records.push(Record {
                        payload: bytes::Bytes::copy_from_slice(r.data().as_ref()),
                        partition_key: r.partition_key().unwrap_or_default().to_owned(),
                        sequence,
                        arrival: r.approximate_arrival_timestamp().and_then(to_system_time),
                        explicit_hash_key: None,
                    });
                }
                let continuation = event.continuation_sequence_number();
                let behind = event.millis_behind_latest().max(0) as u64;
                // No continuation: the shard has ended, and this is its last event.
                if continuation.is_empty() {
                    let children = event
                        .child_shards()
                        .iter()
                        .map(|c| c.shard_id().to_owned())
                        .collect();
                    return Ok(Some(
                        ShardEvent::new(records, None)
                            .behind(behind)
                            .ending(children),
                    ));
                }
                return Ok(Some(
                    ShardEvent::new(records, Some(continuation.to_owned())).behind(behind),
                ));
            }
        })
    }
}
