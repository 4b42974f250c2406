//! `Broker` and its builder: configuration without I/O, subscriptions, then `start()`.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use kinesis_lease_core::{Clock, LeaseStore, SystemClock};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_shard_reader::{validate_stream_name, AwsKinesis, KinesisApi, ReaderError};

use crate::mount::Mount;
use crate::owner::default_owner_id;
use crate::running::{start, RunningBroker};
use crate::subscription::{Subscription, SubscriptionBuilder};
use crate::BrokerError;

/// Where the broker's Kinesis comes from.
#[derive(Debug, Clone)]
pub(crate) enum KinesisSource {
    /// `aws-config` defaults, loaded at `start()`.
    Env,
    /// A given SDK config.
    Config(Box<SdkConfig>),
    /// Any implementation, such as a `MemoryStream`.
    Api(Arc<dyn KinesisApi>),
}

impl KinesisSource {
    pub(crate) async fn resolve(&self) -> Arc<dyn KinesisApi> {
        match self {
            KinesisSource::Env => {
                let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
                Arc::new(AwsKinesis::new(&config))
            }
            KinesisSource::Config(config) => Arc::new(AwsKinesis::new(config)),
            KinesisSource::Api(api) => api.clone(),
        }
    }
}

/// Timings shared by the broker's subscriptions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    pub(crate) lease: Duration,
    pub(crate) renew: Duration,
    pub(crate) take: Duration,
    pub(crate) list: Duration,
    pub(crate) shard_sync: Duration,
    pub(crate) poll: Duration,
    pub(crate) shutdown_deadline: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            renew: Duration::from_secs(3),
            take: Duration::from_secs(1),
            list: Duration::from_secs(2),
            shard_sync: Duration::from_secs(10),
            poll: Duration::from_secs(1),
            shutdown_deadline: Duration::from_secs(10),
        }
    }
}

impl Timings {
    /// Refuses timings that cannot work.
    pub(crate) fn validate(&self) -> Result<(), BrokerError> {
        let invalid = |setting, reason: String| Err(BrokerError::InvalidConfig { setting, reason });
        for (setting, value) in [
            ("lease_timing (lease)", self.lease),
            ("lease_timing (renew)", self.renew),
            ("take_interval", self.take),
            ("list_interval", self.list),
            ("shard_sync_interval", self.shard_sync),
            ("poll_interval", self.poll),
        ] {
            if value.is_zero() {
                return invalid(setting, "must be more than zero".into());
            }
        }
        if self.renew >= self.lease {
            return invalid(
                "lease_timing (renew)",
                format!(
                    "the renew interval ({:?}) must be shorter than the lease ({:?}); the reader stops at lease - renew after its last renewal",
                    self.renew, self.lease
                ),
            );
        }
        Ok(())
    }
}

/// How the broker checks its DynamoDB lease table at `start()`.
#[cfg(feature = "dynamodb-lease")]
#[derive(Debug, Clone)]
pub(crate) struct DynamoTable {
    pub(crate) store: kinesis_lease_dynamo::DynamoLeaseStore,
    pub(crate) create_if_missing: bool,
}

/// A configured broker: one per service instance, reading each of its streams through one
/// subscription. Build it with [`Broker::builder`], add subscriptions with
/// [`subscribe`](Broker::subscribe), then [`start`](Broker::start) it.
///
/// # Examples
///
/// ```
/// use kinesis_broker::{Broker, Delivery, MemoryStream, StartAt};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let kinesis = MemoryStream::new();
/// kinesis.create_stream("orders", 2)?;
/// let mut broker = Broker::builder().kinesis(kinesis.clone()).build()?;
/// broker
///     .subscribe("orders")
///     .start_at(StartAt::TrimHorizon)
///     .workers(4)
///     .by_key()
///     .handle(|delivery: Delivery| async move {
///         println!("{}: {:?}", delivery.partition_key(), delivery.payload());
///         Ok::<(), std::io::Error>(())
///     })?;
/// let running = broker.start().await?;
/// running.shutdown().await;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Broker {
    pub(crate) kinesis: KinesisSource,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) mount: Mount,
    pub(crate) owner: String,
    pub(crate) timings: Timings,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) subscriptions: Vec<Subscription>,
    #[cfg(feature = "dynamodb-lease")]
    pub(crate) dynamo: Option<DynamoTable>,
}

/// Configures a [`Broker`]; nothing here does I/O.
#[derive(Debug, Default)]
pub struct BrokerBuilder {
    kinesis: Option<KinesisSource>,
    store: Option<Arc<dyn LeaseStore>>,
    owner: Option<String>,
    timings: Timings,
    clock: Option<Arc<dyn Clock>>,
    #[cfg(feature = "dynamodb-lease")]
    dynamo: Option<DynamoTable>,
}

impl Broker {
    /// A builder with the defaults: Kinesis from `aws-config`'s environment, a
    /// `MemoryLeaseStore`, a unique lease-owner id, 10 s leases renewed every 3 s.
    pub fn builder() -> BrokerBuilder {
        BrokerBuilder::default()
    }

    /// This broker's lease-owner id.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Starts a subscription to `stream`; finish it with `handle(..)` or `stream()`.
    pub fn subscribe(&mut self, stream: impl Into<String>) -> SubscriptionBuilder<'_> {
        SubscriptionBuilder::new(self, stream.into())
    }

    /// Checks everything (stream names, that each stream exists, the lease table) and starts
    /// reading.
    ///
    /// # Errors
    ///
    /// [`BrokerError::NoSubscriptions`]; [`BrokerError::Stream`] naming a stream that is
    /// invalid or missing; [`BrokerError::LeaseTable`] when the lease table is missing (and
    /// not to be created), has the wrong key, or cannot be reached; [`BrokerError::Dispatch`]
    /// for invalid worker settings; [`BrokerError::OwnerInUse`] when rows of a stream name
    /// this owner id and another live process renews them (checked by reading them twice, a
    /// renew interval and a take interval apart, only when such rows exist).
    pub async fn start(self) -> Result<RunningBroker, BrokerError> {
        start(self).await
    }

    pub(crate) fn add(&mut self, subscription: Subscription) -> Result<(), BrokerError> {
        if self
            .subscriptions
            .iter()
            .any(|s| s.stream == subscription.stream)
        {
            return Err(BrokerError::DuplicateSubscription {
                stream: subscription.stream,
            });
        }
        validate_stream_name(&subscription.stream)
            .map_err(|source| stream_error(&subscription.stream, source))?;
        self.subscriptions.push(subscription);
        Ok(())
    }
}

impl BrokerBuilder {
    /// Kinesis from this SDK config (region, credentials, endpoint).
    pub fn sdk_config(mut self, config: &SdkConfig) -> Self {
        self.kinesis = Some(KinesisSource::Config(Box::new(config.clone())));
        self
    }

    /// Kinesis from any implementation, such as a `MemoryStream` for tests.
    pub fn kinesis(mut self, kinesis: impl KinesisApi + 'static) -> Self {
        self.kinesis = Some(KinesisSource::Api(Arc::new(kinesis)));
        self
    }

    /// The lease store (default: a `MemoryLeaseStore` of its own). A store instance belongs
    /// to one broker; brokers share a table through stores of their own over it.
    pub fn lease_store(self, store: impl LeaseStore + 'static) -> Self {
        self.lease_store_arc(Arc::new(store))
    }

    /// The lease store, shared as an `Arc`.
    pub fn lease_store_arc(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// A DynamoDB lease table, checked at `start()` and created (PAY_PER_REQUEST) when
    /// missing if `create_if_missing`.
    #[cfg(feature = "dynamodb-lease")]
    pub fn dynamo_lease_table(
        mut self,
        store: kinesis_lease_dynamo::DynamoLeaseStore,
        create_if_missing: bool,
    ) -> Self {
        self.store = Some(Arc::new(store.clone()));
        self.dynamo = Some(DynamoTable {
            store,
            create_if_missing,
        });
        self
    }

    /// The lease-owner id (default: host, process id and a random part).
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The wall clock this host reads to pin a `LATEST` start as a time (default: the system
    /// clock). Tests inject a skewed or manual one.
    pub fn wall_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Lease duration (10 s) and renew interval (3 s; shorter than the lease).
    pub fn lease_timing(mut self, lease: Duration, renew: Duration) -> Self {
        self.timings.lease = lease;
        self.timings.renew = renew;
        self
    }

    /// How often the stream's epoch is read to notice released and handed-over rows (1 s).
    pub fn take_interval(mut self, every: Duration) -> Self {
        self.timings.take = every;
        self
    }

    /// How often every lease row is read, to notice crashed owners and balance (2 s).
    pub fn list_interval(mut self, every: Duration) -> Self {
        self.timings.list = every;
        self
    }

    /// How often shards are listed (10 s; also at once when a shard ends).
    pub fn shard_sync_interval(mut self, every: Duration) -> Self {
        self.timings.shard_sync = every;
        self
    }

    /// How long a reader at the tip waits after an empty read (1 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.timings.poll = every;
        self
    }

    /// How long `shutdown()` lets handlers in flight finish (10 s).
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.timings.shutdown_deadline = deadline;
        self
    }

    /// Builds the broker (no I/O).
    ///
    /// # Errors
    ///
    /// [`BrokerError::InvalidConfig`] for a zero interval or duration, a renew interval not
    /// shorter than the lease, or an empty owner id; [`BrokerError::StoreAlreadyMounted`] when
    /// the store instance belongs to another broker.
    pub fn build(self) -> Result<Broker, BrokerError> {
        self.timings.validate()?;
        if self.owner.as_deref().is_some_and(str::is_empty) {
            return Err(BrokerError::InvalidConfig {
                setting: "owner_id",
                reason: "an owner id is not empty".into(),
            });
        }
        let owner = self.owner.unwrap_or_else(default_owner_id);
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemoryLeaseStore::new()));
        let mount = Mount::new(&store, &owner)?;
        Ok(Broker {
            kinesis: self.kinesis.unwrap_or(KinesisSource::Env),
            store,
            mount,
            owner,
            timings: self.timings,
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            subscriptions: Vec::new(),
            #[cfg(feature = "dynamodb-lease")]
            dynamo: self.dynamo,
        })
    }
}

/// Maps a Kinesis failure at start to the broker error naming the stream.
pub(crate) fn stream_error(stream: &str, source: ReaderError) -> BrokerError {
    BrokerError::Stream {
        stream: stream.to_owned(),
        source: Box::new(source),
    }
}
