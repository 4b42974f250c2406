//! `Broker` and its builder: configuration without I/O, subscriptions, then `start()`.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use kinesis_lease_core::{Clock, LeaseStore, SystemClock};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_aws::AwsKinesis;
use kinesis_stream_core::{validate_stream_name, KinesisApi};

use crate::error::stream_error;
use crate::mount::Mount;
use crate::owner::default_owner_id;
use crate::registered::Subscription;
use crate::shutdown::ShutdownHandle;
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

/// The Kinesis a broker starts with.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedKinesis {
    pub(crate) api: Arc<dyn KinesisApi>,
    /// Where its calls go, for messages.
    pub(crate) endpoint: String,
    /// True for the AWS SDK client (`AwsKinesis`), false for any other implementation.
    pub(crate) is_aws: bool,
}

impl KinesisSource {
    /// The client, loading `aws-config`'s defaults for [`KinesisSource::Env`].
    ///
    /// # Errors
    ///
    /// [`BrokerError::AwsSetting`] when the loaded configuration has no region or credentials
    /// provider.
    pub(crate) async fn resolve(&self) -> Result<ResolvedKinesis, BrokerError> {
        let aws = |config: &SdkConfig| -> Result<ResolvedKinesis, BrokerError> {
            check_sdk_config(config, "Kinesis")?;
            let kinesis = AwsKinesis::new(config);
            Ok(ResolvedKinesis {
                endpoint: kinesis.endpoint().to_owned(),
                api: Arc::new(kinesis),
                is_aws: true,
            })
        };
        match self {
            KinesisSource::Env => {
                let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
                aws(&config)
            }
            KinesisSource::Config(config) => aws(config),
            KinesisSource::Api(api) => Ok(ResolvedKinesis {
                api: api.clone(),
                endpoint: "the given KinesisApi".to_owned(),
                is_aws: false,
            }),
        }
    }
}

/// How to configure a region, for [`BrokerError::AwsSetting`].
const REGION_HINT: &str =
    "set AWS_REGION (or a region in the AWS profile), or give the SdkConfig a region";

/// Refuses an SDK config without a region or a credentials provider, naming `client`.
pub(crate) fn check_sdk_config(config: &SdkConfig, client: &str) -> Result<(), BrokerError> {
    if config.region().is_none() {
        return Err(BrokerError::AwsSetting {
            setting: "region",
            client: client.to_owned(),
            hint: REGION_HINT,
        });
    }
    if config.credentials_provider().is_none() {
        return Err(BrokerError::AwsSetting {
            setting: "credentials provider",
            client: client.to_owned(),
            hint: "load the SdkConfig with aws_config (the default chain), or give it credentials",
        });
    }
    Ok(())
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
    /// True when no lease store was configured: the broker's own `MemoryLeaseStore`.
    pub(crate) default_store: bool,
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
    /// [`RunningBroker::run_until`](crate::RunningBroker::run_until)); clone it into handlers or other tasks. A request made
    /// before `start()` is kept.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
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

    /// How often the stream's epoch item is read to notice released and handed-over rows, and
    /// joins and leaves (1 s).
    pub fn take_interval(mut self, every: Duration) -> Self {
        self.timings.take = every;
        self
    }

    /// How often the member row this instance watches is read (2 s), to notice a crashed
    /// instance (found dead once its member row stood still for a lease). Lease rows are not read each interval: they are listed
    /// only when something changed (the stream's epoch moved, a shard ended, a keeper ended),
    /// at start, and while this instance is below its fair share.
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

    /// How long `start()` retries its checks (the streams listed, the lease table described
    /// and read) while they fail transiently: connection refused, throttling, 5xx (30 s).
    /// Each retry is logged at `warn`; past the deadline `start()` fails with
    /// [`BrokerError::Unreachable`] naming the operation and the endpoint.
    pub fn startup_deadline(mut self, deadline: Duration) -> Self {
        self.timings.startup_deadline = deadline;
        self
    }

    /// Builds the broker (no I/O).
    ///
    /// # Errors
    ///
    /// [`BrokerError::InvalidConfig`] for a zero interval or duration, a renew interval not
    /// shorter than the lease, or an empty owner id or one starting with `*`;
    /// [`BrokerError::AwsSetting`] when the `sdk_config(..)` or the DynamoDB lease table's
    /// client has no region (or no credentials provider); [`BrokerError::StoreAlreadyMounted`]
    /// when the store instance belongs to another broker.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_broker::{Broker, BrokerError};
    ///
    /// let no_region = aws_config::SdkConfig::builder()
    ///     .behavior_version(aws_config::BehaviorVersion::latest())
    ///     .build();
    /// let err = Broker::builder().sdk_config(&no_region).build().unwrap_err();
    /// assert!(matches!(err, BrokerError::AwsSetting { setting: "region", .. }));
    /// ```
    pub fn build(self) -> Result<Broker, BrokerError> {
        self.timings.validate()?;
        if let Some(KinesisSource::Config(config)) = &self.kinesis {
            check_sdk_config(config, "Kinesis")?;
        }
        #[cfg(feature = "dynamodb-lease")]
        if let Some(dynamo) = &self.dynamo {
            let client = format!("the DynamoDB lease table `{}`", dynamo.store.table());
            if dynamo.store.region().is_none() {
                return Err(BrokerError::AwsSetting {
                    setting: "region",
                    client,
                    hint: REGION_HINT,
                });
            }
            if !dynamo.store.has_credentials_provider() {
                return Err(BrokerError::AwsSetting {
                    setting: "credentials provider",
                    client,
                    hint: "build the DynamoLeaseStore from an SdkConfig loaded by aws_config",
                });
            }
        }
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
        let default_store = self.store.is_none();
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
            default_store,
            #[cfg(feature = "dynamodb-lease")]
            dynamo: self.dynamo,
        })
    }
}
