//! `Broker` and its builder: configuration without I/O, subscriptions, then `start()`.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use kinesis_lease_core::{Clock, LeaseStore, SystemClock};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_shard_reader::{validate_stream_name, AwsKinesis, KinesisApi};

use crate::error::stream_error;
use crate::mount::Mount;
use crate::owner::default_owner_id;
use crate::shutdown::ShutdownHandle;
use crate::subscription::{Subscription, SubscriptionBuilder};
use crate::timings::Timings;
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

/// How the broker checks its DynamoDB lease table at `start()`.
#[cfg(feature = "dynamodb-lease")]
#[derive(Debug, Clone)]
pub(crate) struct DynamoTable {
    pub(crate) store: kinesis_lease_dynamo::DynamoLeaseStore,
    pub(crate) setup: TableSetup,
}

/// What `start()` does about a DynamoDB lease table that does not exist.
#[cfg(feature = "dynamodb-lease")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableSetup {
    /// Refuse to start ([`BrokerError::LeaseTable`]); the table is made by your
    /// infrastructure code.
    MustExist,
    /// Create it (on-demand billing, key `lease_key`) and wait until it is active.
    CreateIfMissing,
}

/// A configured broker: one per service instance, reading each of its streams through one
/// subscription. Build it with [`Broker::builder`], add subscriptions with
/// [`subscribe`](Broker::subscribe), then [`start`](Broker::start) it.
///
/// # Examples
///
/// ```
/// use kinesis_broker::{Broker, Delivery, StartAt, testing::MemoryStream};
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
    pub(crate) shutdown: ShutdownHandle,
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

    /// A handle that shuts the broker down once it runs (see
    /// [`RunningBroker::run_until`]); clone it into handlers or other tasks. A request made
    /// before `start()` is kept.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Starts a subscription to `stream`; finish it with `handle(..)` or `stream()`.
    pub fn subscribe(&mut self, stream: impl Into<String>) -> SubscriptionBuilder<'_> {
        SubscriptionBuilder::new(self, stream.into())
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

    /// A DynamoDB lease table, checked at `start()` (its key must be the string `lease_key`)
    /// and, with [`TableSetup::CreateIfMissing`], created when missing.
    #[cfg(feature = "dynamodb-lease")]
    pub fn dynamo_lease_table(
        mut self,
        store: kinesis_lease_dynamo::DynamoLeaseStore,
        setup: TableSetup,
    ) -> Self {
        self.store = Some(Arc::new(store.clone()));
        self.dynamo = Some(DynamoTable { store, setup });
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

    /// How long a lease lasts without renewal (10 s): another instance takes a crashed
    /// instance's shards about this long after its last renewal.
    pub fn lease_duration(mut self, lease: Duration) -> Self {
        self.timings.lease = lease;
        self
    }

    /// How often each held lease is renewed, with its due checkpoint (3 s; shorter than the
    /// lease duration, checked by [`build`](Self::build)).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.timings.renew = every;
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
    /// shorter than the lease, or an empty owner id or one starting with `*`; [`BrokerError::StoreAlreadyMounted`] when
    /// the store instance belongs to another broker.
    pub fn build(self) -> Result<Broker, BrokerError> {
        self.timings.validate()?;
        if self.owner.as_deref().is_some_and(str::is_empty) {
            return Err(BrokerError::InvalidConfig {
                setting: "owner_id",
                reason: "an owner id is not empty".into(),
            });
        }
        if self.owner.as_deref().is_some_and(|o| o.starts_with('*')) {
            // The member row `stream@members:<owner>` would collide with the roster's own
            // index (`:*`) and epoch (`:*epoch`) rows.
            return Err(BrokerError::InvalidConfig {
                setting: "owner_id",
                reason: "an owner id does not start with `*`, which the lease table keeps for its own rows".into(),
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
            shutdown: ShutdownHandle::new(),
            #[cfg(feature = "dynamodb-lease")]
            dynamo: self.dynamo,
        })
    }
}
