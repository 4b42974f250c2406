//! `Broker::start`: every check that needs I/O (streams exist, the lease table is usable, the
//! owner id is not live elsewhere), then one coordinator and one dispatcher per subscription.
//!
//! It lives apart from `broker.rs` (configuration, no I/O) and `running.rs` (what runs), so
//! that neither of those depends on the other.

use kinesis_dispatch::Dispatcher;
use kinesis_lease_core::LeaseError;
use kinesis_shard_reader::{Coordinator, ReaderConfig, ReaderError};

use crate::error::stream_error;
use crate::running::{Running, RunningBroker};
use crate::{Broker, BrokerError};

impl Broker {
    /// Checks everything (stream names, that each stream exists, the lease table) and starts
    /// reading.
    ///
    /// # Errors
    ///
    /// [`BrokerError::NoSubscriptions`]; [`BrokerError::Stream`] naming a stream that is
    /// invalid or missing; [`BrokerError::LeaseTable`] when the lease table is missing (and
    /// not to be created), has the wrong key, or cannot be reached; [`BrokerError::Dispatch`]
    /// for invalid worker settings; [`BrokerError::OwnerInUse`] when rows of a stream (its
    /// shard rows or this id's member row) name this owner id and another live process
    /// renews them (checked by reading them twice, a renew interval and a take interval
    /// apart, only when such rows exist; another instance asking for one of them is no
    /// renewal).
    pub async fn start(self) -> Result<RunningBroker, BrokerError> {
        if self.subscriptions.is_empty() {
            return Err(BrokerError::NoSubscriptions);
        }
        let kinesis = self.kinesis.resolve().await;
        #[cfg(feature = "dynamodb-lease")]
        if let Some(dynamo) = &self.dynamo {
            let stream = self.subscriptions[0].stream.clone();
            if dynamo.setup == crate::TableSetup::CreateIfMissing {
                dynamo
                    .store
                    .ensure_table()
                    .await
                    .map_err(|e| BrokerError::LeaseTable {
                        stream,
                        source: Box::new(LeaseError::Refused {
                            operation: "CreateTable",
                            resource: dynamo.store.table().to_owned(),
                            source: Box::new(e),
                        }),
                    })?;
            } else {
                dynamo
                    .store
                    .check_table()
                    .await
                    .map_err(|source| BrokerError::LeaseTable {
                        stream,
                        source: Box::new(source),
                    })?;
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
            config
                .validate()
                .map_err(|source| stream_error(&sub.stream, source))?;
            configs.push(config);
        }
        for sub in &self.subscriptions {
            match kinesis.list_shards(&sub.stream).await {
                Ok(_) => {}
                Err(error) => return Err(stream_error(&sub.stream, error)),
            }
            self.store
                .list(&sub.stream)
                .await
                .map_err(|source: LeaseError| BrokerError::LeaseTable {
                    stream: sub.stream.clone(),
                    source: Box::new(source),
                })?;
            // Refuse to start with an owner id another live process renews rows with.
            Coordinator::probe_owner(&*self.store, &sub.stream, &self.owner, t.renew + t.take)
                .await
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
