//! `Broker::start`: every check that needs I/O (streams exist, the lease table is usable, the
//! owner id is not live elsewhere), then one coordinator and one dispatcher per subscription.
//!
//! It lives apart from `broker.rs` (configuration, no I/O) and `running.rs` (what runs), so
//! that neither of those depends on the other.

use std::future::Future;
use std::time::Duration;

use kinesis_dispatch::Dispatcher;
use kinesis_fleet::{Coordinator, ReaderConfig};
use kinesis_lease_core::{ErrorChain, LeaseError};
use kinesis_stream_core::ReaderError;
use tokio::time::Instant;

use crate::error::stream_error;
use crate::running::{Running, RunningBroker};
use crate::startup_retry::StartupRetry;
use crate::{Broker, BrokerError};

/// The start-up deadline of one `start()`, and the retries under it.
struct Until {
    started: Instant,
    retry: StartupRetry,
}

impl Until {
    fn new(deadline: Duration) -> Self {
        Self {
            started: Instant::now(),
            retry: StartupRetry::new(deadline),
        }
    }

    /// What is left of the deadline.
    #[cfg(feature = "kcl-import")]
    fn left(&self) -> Duration {
        self.retry.deadline().saturating_sub(self.started.elapsed())
    }

    /// Moves the deadline by `by`: time spent waiting on purpose (the import's watch of the
    /// KCL) is not time spent retrying.
    #[cfg(feature = "kcl-import")]
    fn shift(&mut self, by: Duration) {
        self.started += by;
    }

    /// Runs `call` until it succeeds or fails for good (`Ok`), retrying while `transient`
    /// names the operation that failed, until the deadline ([`BrokerError::Unreachable`]).
    async fn retry<T, E, F, Fut>(
        &mut self,
        stream: &str,
        endpoint: &str,
        mut call: F,
        transient: impl Fn(&E) -> Option<&'static str>,
    ) -> Result<Result<T, E>, BrokerError>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            let error = match call().await {
                Ok(value) => {
                    self.retry.succeeded();
                    return Ok(Ok(value));
                }
                Err(error) => error,
            };
            let Some(operation) = transient(&error) else {
                return Ok(Err(error));
            };
            let elapsed = self.started.elapsed();
            match self.retry.after_failure(elapsed) {
                Some(wait) => {
                    tracing::warn!(
                        %stream,
                        operation,
                        %endpoint,
                        attempt = self.retry.attempts(),
                        ?wait,
                        error = %ErrorChain(&error),
                        "start-up call failed; retrying until the start-up deadline"
                    );
                    tokio::time::sleep(wait).await;
                }
                None => {
                    return Err(BrokerError::Unreachable {
                        stream: stream.to_owned(),
                        operation,
                        endpoint: endpoint.to_owned(),
                        waited: elapsed,
                        attempts: self.retry.attempts(),
                        source: Box::new(error),
                    })
                }
            }
        }
    }
}

/// The operation of a lease-store failure worth retrying at start.
fn lease_transient(error: &LeaseError) -> Option<&'static str> {
    match error {
        LeaseError::Unavailable { operation, .. } => Some(operation),
        _ => None,
    }
}

/// The operation of a Kinesis (or, through it, lease-store) failure worth retrying at start.
fn reader_transient(error: &ReaderError) -> Option<&'static str> {
    match error {
        ReaderError::Transient { operation, .. } | ReaderError::Throttled { operation, .. } => {
            Some(operation)
        }
        ReaderError::Lease { source, .. } => lease_transient(source),
        _ => None,
    }
}

impl Broker {
    /// Where the lease store's calls go, for messages.
    /// The lease table's name for messages (a DynamoDB table's name, or what the store is).
    #[cfg(feature = "kcl-import")]
    fn lease_table_name(&self) -> String {
        match &self.dynamo {
            Some(dynamo) => dynamo.store.table().to_owned(),
            None => self.lease_endpoint(),
        }
    }

    fn lease_endpoint(&self) -> String {
        #[cfg(feature = "dynamodb-lease")]
        if let Some(dynamo) = &self.dynamo {
            return dynamo.store.endpoint().to_owned();
        }
        if self.default_store {
            "the in-process MemoryLeaseStore".to_owned()
        } else {
            "the given lease store".to_owned()
        }
    }

    /// Checks everything (stream names, that each stream exists, the lease table) and starts
    /// reading.
    ///
    /// Checks that fail transiently (connection refused, throttling, 5xx) are retried with
    /// backoff, each retry logged at `warn`, until the start-up deadline
    /// ([`startup_deadline`](crate::BrokerBuilder::startup_deadline), 30 s by default). With the
    /// default `MemoryLeaseStore` and Kinesis from AWS, it logs one warning: such a broker
    /// shares no shard with other instances.
    ///
    /// # Errors
    ///
    /// [`BrokerError::NoSubscriptions`]; [`BrokerError::AwsSetting`] when the environment's
    /// AWS configuration has no region; [`BrokerError::Unreachable`] naming the operation and
    /// endpoint when a check kept failing transiently until the deadline; [`BrokerError::Stream`] naming a stream that is
    /// invalid or missing; [`BrokerError::LeaseTable`] when the lease table is missing (and
    /// not to be created), has the wrong key, or cannot be reached; [`BrokerError::Dispatch`]
    /// for invalid worker settings; [`BrokerError::OwnerInUse`] when rows of a stream (its
    /// shard rows or this id's member row) name this owner id and another live process
    /// renews them (checked by reading them twice, a renew interval and a take interval
    /// apart, only when such rows exist; another instance asking for one of them is no
    /// renewal).
    /// With a subscription's `import_kcl` (feature `kcl-import`), `BrokerError::KclImport`
    /// when the KCL's workers still run or the import cannot be done.
    pub async fn start(self) -> Result<RunningBroker, BrokerError> {
        if self.subscriptions.is_empty() {
            return Err(BrokerError::NoSubscriptions);
        }
        let resolved = self.kinesis.resolve().await?;
        let kinesis = resolved.api.clone();
        if self.default_store && resolved.is_aws {
            tracing::warn!(
                "no lease table configured: this broker keeps its leases in an in-process \
                 MemoryLeaseStore, so it shares no shard with any other instance and every \
                 instance reads every shard; to share shards between instances, give the builder \
                 `.dynamo_lease_table(DynamoLeaseStore::new(&config, \"my-leases\"), \
                 TableSetup::CreateIfMissing)` (feature `dynamodb-lease`)"
            );
        }
        let mut until = Until::new(self.timings.startup_deadline);
        let lease_endpoint = self.lease_endpoint();
        #[cfg(feature = "dynamodb-lease")]
        if let Some(dynamo) = &self.dynamo {
            let stream = &self.subscriptions[0].stream;
            let table_error = |source: LeaseError| BrokerError::LeaseTable {
                stream: stream.clone(),
                source: Box::new(source),
            };
            if dynamo.setup == crate::TableSetup::CreateIfMissing {
                until
                    .retry(
                        stream,
                        &lease_endpoint,
                        || dynamo.store.ensure_table(),
                        |e| e.is_transient().then(|| e.operation()),
                    )
                    .await?
                    .map_err(|e| table_error(LeaseError::from(e)))?;
            } else {
                until
                    .retry(
                        stream,
                        &lease_endpoint,
                        || dynamo.store.check_table(),
                        lease_transient,
                    )
                    .await?
                    .map_err(table_error)?;
            }
        }
        let t = self.timings;
        let mut configs = Vec::with_capacity(self.subscriptions.len());
        for sub in &self.subscriptions {
            let mut config = ReaderConfig::new(sub.stream.clone(), self.owner.clone());
            config.lease_duration = t.lease;
            config.renew_interval = t.renew;
            config.take_interval = t.take;
            config.list_interval = t.list;
            config.shard_sync_interval = t.shard_sync;
            config.poll_interval = t.poll;
            config.records_per_call = sub.records_per_call;
            config.max_unsettled = sub.max_unsettled;
            config.start_at = sub.start_at.clone();
            config.reposition = sub.reposition.clone();
            config.reposition_marker = sub.reposition_marker.clone();
            config.fan_out = sub.fan_out.clone();
            config.clock = self.clock.clone();
            config.hooks = sub.hooks.clone();
            config.quiet_idle = sub.quiet_idle;
            config.capacity_milli = sub.capacity_milli;
            config.balance_by_load = sub.balance_by_load;
            config
                .validate()
                .map_err(|source| stream_error(&sub.stream, source))?;
            configs.push(config);
        }
        for sub in &self.subscriptions {
            let stream = &sub.stream;
            until
                .retry(
                    stream,
                    &resolved.endpoint,
                    || kinesis.list_shards(stream),
                    reader_transient,
                )
                .await?
                .map_err(|error| stream_error(stream, error))?;
            until
                .retry(
                    stream,
                    &lease_endpoint,
                    || self.store.list(stream),
                    lease_transient,
                )
                .await?
                .map_err(|source: LeaseError| BrokerError::LeaseTable {
                    stream: stream.clone(),
                    source: Box::new(source),
                })?;
            #[cfg(feature = "kcl-import")]
            if let Some(import) = &sub.kcl_import {
                let table = self.lease_table_name();
                let target = kinesis_kcl_import::Target {
                    store: &*self.store,
                    table: &table,
                    kinesis: &*kinesis,
                };
                // The import retries its own transient failures within what is left of the
                // deadline (a retry of the whole import would watch the KCL again); one that
                // still fails transiently is `Unreachable`, as any other start-up call.
                let window = import.configured_retry_window().min(until.left());
                let import = import.clone().retry_window(window);
                let endpoints = format!("{} and {lease_endpoint}", resolved.endpoint);
                let report = until
                    .retry(
                        stream,
                        &endpoints,
                        || {
                            import.run(
                                target,
                                stream,
                                |note| tracing::info!(stream = %stream, "{note}"),
                            )
                        },
                        kinesis_kcl_import::ImportError::transient_operation,
                    )
                    .await?
                    .map_err(|source| BrokerError::KclImport {
                        stream: stream.clone(),
                        source: Box::new(source),
                    })?;
                // The watch of the KCL waited on purpose: later checks keep their retries.
                until.shift(report.watched.unwrap_or_default());
                for warning in &report.warnings {
                    tracing::warn!(stream = %stream, "{warning}");
                }
                tracing::info!(
                    stream = %stream,
                    kcl_table = %report.kcl_table,
                    written = report.written(),
                    imported_before = report.imported_before,
                    "imported the KCL's checkpoints"
                );
            }
            // Refuse to start with an owner id another live process renews rows with.
            let probe =
                || Coordinator::probe_owner(&*self.store, stream, &self.owner, t.renew + t.take);
            until
                .retry(stream, &lease_endpoint, probe, reader_transient)
                .await?
                .map_err(|source| match source {
                    source @ ReaderError::OwnerInUse { .. } => BrokerError::OwnerInUse {
                        owner: self.owner.clone(),
                        stream: sub.stream.clone(),
                        source: Box::new(source),
                    },
                    source => stream_error(&sub.stream, source),
                })?;
        }
        let mut running = Vec::new();
        for (sub, config) in self.subscriptions.into_iter().zip(configs) {
            let dispatch = match sub.dispatch {
                Some((receiver, handler, config)) => Some(
                    Dispatcher::spawn(receiver, handler, config).map_err(|source| {
                        BrokerError::Dispatch {
                            stream: sub.stream.clone(),
                            source: Box::new(source),
                        }
                    })?,
                ),
                None => None,
            };
            let coordinator =
                Coordinator::spawn(config, kinesis.clone(), self.store.clone(), sub.sender);
            tracing::info!(stream = %sub.stream, owner = %self.owner, "subscription started");
            running.push(Running {
                coordinator,
                dispatch,
            });
        }
        Ok(RunningBroker {
            owner: self.owner,
            timings: self.timings,
            subscriptions: running,
            handle: self.shutdown,
            _store: self.store,
            _mount: self.mount,
        })
    }
}
