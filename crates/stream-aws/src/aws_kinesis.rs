//! `AwsKinesis`: [`KinesisApi`] over `aws-sdk-kinesis`.
//!
//! The client comes from an `aws_config::SdkConfig`, so region, credentials and
//! `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_KINESIS` work as in any AWS SDK program. The SDK's
//! own retries are off: readers back off themselves and need to see throttling as such.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_sdk_kinesis::config::timeout::TimeoutConfig;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::primitives::{Blob, DateTime};
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};
use aws_sdk_kinesis::Client;
use kinesis_lease_core::{BoxFuture, SequenceNumber};
use kinesis_stream_core::{
    KinesisApi, PutEntry, PutOutcome, ReaderError, Record, RecordsPage, Shard, ShardSubscription,
    StartAt, StreamConsumer,
};

/// [`KinesisApi`] over the AWS SDK.
#[derive(Debug, Clone)]
pub struct AwsKinesis {
    pub(crate) client: Client,
    endpoint: std::sync::Arc<str>,
}

/// The endpoint a client built from `config` for `service_id` calls, as the SDK resolves it:
/// the service's own `AWS_ENDPOINT_URL_<SERVICE>` (or profile `endpoint_url`), else
/// `AWS_ENDPOINT_URL`, else the public endpoint of the region.
pub(crate) fn endpoint_of(config: &SdkConfig, service_id: &str, host: &str) -> String {
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id(service_id)
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build();
    // As the SDK does: an endpoint set on the config in code wins over the environment's.
    let explicit = config
        .get_origin("endpoint_url")
        .is_client_config()
        .then(|| config.endpoint_url().map(str::to_owned))
        .flatten();
    let service = key
        .ok()
        .and_then(|key| config.service_config().and_then(|c| c.load_config(key)));
    explicit
        .or(service)
        .or_else(|| config.endpoint_url().map(str::to_owned))
        .unwrap_or_else(|| match config.region() {
            Some(region) => format!("https://{host}.{region}.amazonaws.com"),
            None => format!("https://{host}.<no region>.amazonaws.com"),
        })
}

impl AwsKinesis {
    /// A client from `config`, with SDK retries off and a 10 s limit per attempt.
    pub fn new(config: &SdkConfig) -> Self {
        let conf = aws_sdk_kinesis::config::Builder::from(config)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(10))
                    .build(),
            )
            .build();
        Self {
            client: Client::from_conf(conf),
            endpoint: endpoint_of(config, "Kinesis", "kinesis").into(),
        }
    }

    /// Wraps a client of your own (its retry settings add to the readers' backoff).
    pub fn from_client(client: Client) -> Self {
        Self {
            client,
            endpoint: "the client's own endpoint".into(),
        }
    }

    /// The endpoint this client calls (`http://127.0.0.1:4567`,
    /// `https://kinesis.eu-west-1.amazonaws.com`), for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The region this client signs for, if one is configured.
    pub fn region(&self) -> Option<&str> {
        self.client.config().region().map(|r| r.as_ref())
    }
}

pub(crate) fn classify<E, R>(
    err: SdkError<E, R>,
    operation: &'static str,
    stream: &str,
    resource: String,
) -> ReaderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ReaderError::Transient {
                operation,
                resource,
                source: Box::new(err),
            }
        }
        SdkError::ServiceError(ctx) => match ctx.err().code().unwrap_or_default() {
            // For a shard read, Kinesis answers this for a shard past retention too: the
            // reader asks ListShards whether the stream itself is gone.
            "ResourceNotFoundException"
                if matches!(
                    operation,
                    "GetShardIterator" | "GetRecords" | "SubscribeToShard"
                ) =>
            {
                ReaderError::ShardNotFound {
                    stream: stream.to_owned(),
                    shard: resource
                        .split_once('/')
                        .map_or(String::new(), |(_, s)| s.to_owned()),
                    operation,
                }
            }
            // For a consumer call the consumer is what is missing (the stream was found when
            // its ARN was looked up).
            "ResourceNotFoundException"
                if matches!(
                    operation,
                    "DescribeStreamConsumer" | "DeregisterStreamConsumer"
                ) =>
            {
                ReaderError::ConsumerNotFound {
                    stream: stream.to_owned(),
                    consumer: resource
                        .rsplit_once("/consumer/")
                        .map_or(String::new(), |(_, c)| c.to_owned()),
                    operation,
                }
            }
            "ResourceNotFoundException" => ReaderError::StreamNotFound {
                stream: stream.to_owned(),
                operation,
            },
            // A fan-out consumer not ACTIVE yet, one already registered, or another live
            // subscription to the shard.
            "ResourceInUseException" => ReaderError::InUse {
                operation,
                resource,
            },
            "ExpiredIteratorException" => ReaderError::ExpiredIterator {
                stream: stream.to_owned(),
                shard: resource
                    .split_once('/')
                    .map_or(String::new(), |(_, s)| s.to_owned()),
            },
            "ProvisionedThroughputExceededException"
            | "LimitExceededException"
            | "KMSThrottlingException"
            | "ThrottlingException" => ReaderError::Throttled {
                operation,
                resource,
            },
            "InternalFailure" | "InternalFailureException" | "ServiceUnavailable" | "" => {
                ReaderError::Transient {
                    operation,
                    resource,
                    source: Box::new(err),
                }
            }
            _ => ReaderError::Refused {
                operation,
                resource,
                source: Box::new(err),
            },
        },
        _ => ReaderError::Refused {
            operation,
            resource,
            source: Box::new(err),
        },
    }
}

pub(crate) fn to_system_time(t: &DateTime) -> Option<SystemTime> {
    SystemTime::try_from(*t).ok()
}

fn parse_hash(s: &str) -> u128 {
    s.parse().unwrap_or(0)
}

impl KinesisApi for AwsKinesis {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        Box::pin(async move {
            let mut shards = Vec::new();
            let mut token: Option<String> = None;
            loop {
                // With a token, ListShards takes no stream name.
                let req = match &token {
                    Some(t) => self.client.list_shards().next_token(t),
                    None => self.client.list_shards().stream_name(stream),
                };
                let out = req
                    .send()
                    .await
                    .map_err(|e| classify(e, "ListShards", stream, stream.to_owned()))?;
                for s in out.shards() {
                    let range = s.hash_key_range();
                    let hash_range = range.map_or((0, u128::MAX), |r| {
                        (
                            parse_hash(r.starting_hash_key()),
                            parse_hash(r.ending_hash_key()),
                        )
                    });
                    let mut shard = Shard::new(s.shard_id(), hash_range);
                    shard.parent = s.parent_shard_id().map(str::to_owned);
                    shard.adjacent_parent = s.adjacent_parent_shard_id().map(str::to_owned);
                    shard.ending_sequence = s
                        .sequence_number_range()
                        .and_then(|r| r.ending_sequence_number())
                        .map(str::to_owned);
                    shards.push(shard);
                }
                match out.next_token() {
                    Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                    _ => return Ok(shards),
                }
            }
        })
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        Box::pin(async move {
            let mut req = self
                .client
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(shard);
            req = match position {
                StartAt::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
                StartAt::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
                StartAt::AtTimestamp(time) => req
                    .shard_iterator_type(ShardIteratorType::AtTimestamp)
                    .timestamp(aws_sdk_kinesis::primitives::DateTime::from(*time)),
                StartAt::AtSequence(seq) => req
                    .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                    .starting_sequence_number(seq.number()),
                StartAt::AfterSequence(seq) => req
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .starting_sequence_number(seq.number()),
            };
            let resource = format!("{stream}/{shard}");
            let out = req
                .send()
                .await
                .map_err(|e| classify(e, "GetShardIterator", stream, resource.clone()))?;
            out.shard_iterator.ok_or_else(|| ReaderError::Transient {
                operation: "GetShardIterator",
                resource,
                source: "no iterator in the response".into(),
            })
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
        Box::pin(async move {
            let resource = format!("{stream}/{shard}");
            let out = self
                .client
                .get_records()
                .shard_iterator(iterator)
                .limit(limit.clamp(1, 10_000) as i32)
                .send()
                .await
                .map_err(|e| classify(e, "GetRecords", stream, resource.clone()))?;
            // Taken apart by value: each record's data and partition key move into ours,
            // copied nowhere (a page is up to 10 MB).
            let mut records = Vec::with_capacity(out.records.len());
            for r in out.records {
                let sequence = SequenceNumber::new(&r.sequence_number, None).map_err(|e| {
                    ReaderError::Transient {
                        operation: "GetRecords",
                        resource: resource.clone(),
                        source: Box::new(e),
                    }
                })?;
                records.push(Record {
                    payload: r.data.into_bytes(),
                    partition_key: r.partition_key.unwrap_or_default(),
                    sequence,
                    arrival: r
                        .approximate_arrival_timestamp
                        .as_ref()
                        .and_then(to_system_time),
                    explicit_hash_key: None,
                });
            }
            let mut page = RecordsPage::new(records, out.next_shard_iterator);
            page.millis_behind = out.millis_behind_latest.map(|m| m.max(0) as u64);
            page.child_shards = out
                .child_shards
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.shard_id)
                .collect();
            Ok(page)
        })
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
        Box::pin(async move {
            let mut req = self.client.put_records().stream_name(stream);
            for e in entries {
                let mut entry = PutRecordsRequestEntry::builder()
                    .data(Blob::new(e.payload.to_vec()))
                    .partition_key(&e.partition_key);
                if let Some(h) = e.explicit_hash_key {
                    entry = entry.explicit_hash_key(h.to_string());
                }
                req = req.records(entry.build().map_err(|err| ReaderError::Invalid {
                    what: "PutRecords entry",
                    value: e.partition_key.clone(),
                    reason: err.to_string(),
                })?);
            }
            let out = req
                .send()
                .await
                .map_err(|e| classify(e, "PutRecords", stream, stream.to_owned()))?;
            Ok(out
                .records()
                .iter()
                .map(|r| match (r.shard_id(), r.sequence_number()) {
                    (Some(shard), Some(seq)) if r.error_code().is_none() => PutOutcome::Stored {
                        shard: shard.to_owned(),
                        sequence: seq.to_owned(),
                    },
                    _ => PutOutcome::Failed {
                        code: r.error_code().unwrap_or("Unknown").to_owned(),
                        message: r.error_message().unwrap_or_default().to_owned(),
                    },
                })
                .collect())
        })
    }

    fn register_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        Box::pin(self.register_consumer_now(stream, name))
    }

    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<StreamConsumer, ReaderError>> {
        Box::pin(self.describe_consumer_now(stream, name))
    }

    fn deregister_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ReaderError>> {
        Box::pin(self.deregister_consumer_now(stream, name))
    }

    fn subscribe_to_shard<'a>(
        &'a self,
        stream: &'a str,
        consumer_arn: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<Box<dyn ShardSubscription>, ReaderError>> {
        Box::pin(self.subscribe_now(stream, consumer_arn, shard, position))
    }
}
