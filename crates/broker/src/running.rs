//! `RunningBroker`: started subscriptions, their stats, and the clean way out.
//!
//! # Clean shutdown
//!
//! [`RunningBroker::shutdown`] stops taking leases and reading at once, lets handlers in flight
//! finish within the deadline (records still queued are dropped unsettled), writes each shard's
//! final checkpoint of settled records together with its release, and returns. Released rows
//! are free: another instance takes them at its next take round (1 s), without waiting for a
//! lease to expire. A handler still running at the deadline is abandoned and its record is not
//! checkpointed, so the next owner handles it again. The deadline is one for the whole broker:
//! its subscriptions drain side by side, not one after another.
//!
//! # Drop
//!
//! Dropping a `RunningBroker` without `shutdown()` stops everything at once, as a crash would:
//! handlers, readers, lease keepers and coordinators. Nothing keeps renewing leases nobody
//! reads, and the other instances take the shards once the leases lapse.

use std::sync::Arc;

use kinesis_dispatch::{DispatchHandle, Dispatcher};
use kinesis_lease_core::{LeaseError, LeaseStore};
use kinesis_shard_reader::{Coordinator, CoordinatorHandle, ReaderConfig, ReaderError};

use crate::broker::{stream_error, Timings};
use crate::mount::Mount;
use crate::stats::{BrokerStats, StreamStats};
use crate::{Broker, BrokerError};

/// A started broker. Dropping it without [`shutdown`](Self::shutdown) stops every task at
/// once and writes nothing (the leases then lapse instead of being handed over).
#[derive(Debug)]
#[must_use = "dropping a RunningBroker stops it at once; call `shutdown()` or `run_until_signal()`"]
pub struct RunningBroker {
    owner: String,
    timings: Timings,
    subscriptions: Vec<Running>,
    _store: Arc<dyn LeaseStore>,
    _mount: Mount,
}

#[derive(Debug)]
struct Running {
    coordinator: CoordinatorHandle,
    dispatch: Option<DispatchHandle>,
}

/// What `shutdown()` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// True when every handler in flight finished before the deadline.
    pub handlers_finished: bool,
}

pub(crate) async fn start(broker: Broker) -> Result<RunningBroker, BrokerError> {
    if broker.subscriptions.is_empty() {
        return Err(BrokerError::NoSubscriptions);
    }
    let kinesis = broker.kinesis.resolve().await;
    #[cfg(feature = "dynamodb-lease")]
    if let Some(dynamo) = &broker.dynamo {
        let stream = broker.subscriptions[0].stream.clone();
        if dynamo.create_if_missing {
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
    let t = broker.timings;
    let mut configs = Vec::with_capacity(broker.subscriptions.len());
    for sub in &broker.subscriptions {
        let mut config = ReaderConfig::new(sub.stream.clone(), broker.owner.clone());
        config.lease_duration = t.lease;
        config.renew_interval = t.renew;
        config.take_interval = t.take;
        config.list_interval = t.list;
        config.shard_sync_interval = t.shard_sync;
        config.poll_interval = t.poll;
        config.records_per_call = sub.records_per_call;
        config.start_at = sub.start_at.clone();
        config.reposition = sub.reposition.clone();
        config.reposition_marker = sub.reposition_marker.clone();
        config.fan_out = sub.fan_out.clone();
        config.clock = broker.clock.clone();
        config
            .validate()
            .map_err(|source| stream_error(&sub.stream, source))?;
        configs.push(config);
    }
    for sub in &broker.subscriptions {
        match kinesis.list_shards(&sub.stream).await {
            Ok(_) => {}
            Err(error) => return Err(stream_error(&sub.stream, error)),
        }
        broker
            .store
            .list(&sub.stream)
            .await
            .map_err(|source: LeaseError| BrokerError::LeaseTable {
                stream: sub.stream.clone(),
                source: Box::new(source),
            })?;
        // Refuse to start with an owner id another live process renews rows with.
        Coordinator::probe_owner(&*broker.store, &sub.stream, &broker.owner, t.renew + t.take)
            .await
            .map_err(|source| match source {
                source @ ReaderError::OwnerInUse { .. } => BrokerError::OwnerInUse {
                    owner: broker.owner.clone(),
                    stream: sub.stream.clone(),
                    source: Box::new(source),
                },
                source => stream_error(&sub.stream, source),
            })?;
    }
    let mut running = Vec::new();
    for (sub, config) in broker.subscriptions.into_iter().zip(configs) {
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
            Coordinator::spawn(config, kinesis.clone(), broker.store.clone(), sub.sender);
        tracing::info!(stream = %sub.stream, owner = %broker.owner, "subscription started");
        running.push(Running {
            coordinator,
            dispatch,
        });
    }
    Ok(RunningBroker {
        owner: broker.owner,
        timings: broker.timings,
        subscriptions: running,
        _store: broker.store,
        _mount: broker.mount,
    })
}

impl RunningBroker {
    /// This broker's lease-owner id.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Per stream and held shard: owner, checkpoint, MillisBehindLatest, records delivered,
    /// settled and in flight.
    pub fn stats(&self) -> BrokerStats {
        BrokerStats {
            streams: self
                .subscriptions
                .iter()
                .map(|s| StreamStats {
                    stream: s.coordinator.stream().to_owned(),
                    shards: s.coordinator.stats(),
                })
                .collect(),
        }
    }

    /// Resolves when a subscription fails (its stream was deleted), naming the stream.
    pub async fn failed(&self) -> BrokerError {
        let waits = self.subscriptions.iter().map(|s| {
            Box::pin(async move {
                let source = s.coordinator.failed().await;
                (s.coordinator.stream().to_owned(), source)
            })
        });
        let ((stream, source), _, _) = futures_util::future::select_all(waits).await;
        BrokerError::Subscription { stream, source }
    }

    /// Shuts down cleanly (see the module docs) within the broker's shutdown deadline, one
    /// deadline for every subscription together.
    pub async fn shutdown(mut self) -> ShutdownReport {
        let until = tokio::time::Instant::now() + self.timings.shutdown_deadline;
        for sub in &self.subscriptions {
            sub.coordinator.stop_reading();
        }
        let drains = self.subscriptions.iter_mut().map(|sub| {
            let dispatch = sub.dispatch.take();
            let coordinator = &sub.coordinator;
            async move {
                match dispatch {
                    Some(dispatch) => {
                        let left = until.saturating_duration_since(tokio::time::Instant::now());
                        dispatch.shutdown(left).await
                    }
                    // A stream subscription: give its consumer the deadline to ack.
                    None => tokio::time::timeout_at(until, coordinator.settled())
                        .await
                        .is_ok(),
                }
            }
        });
        let finished = futures_util::future::join_all(drains)
            .await
            .into_iter()
            .all(|done| done);
        let releases = self
            .subscriptions
            .drain(..)
            .map(|sub| sub.coordinator.release_all());
        futures_util::future::join_all(releases).await;
        tracing::info!(owner = %self.owner, handlers_finished = finished, "broker shut down");
        ShutdownReport {
            handlers_finished: finished,
        }
    }

    /// Runs until Ctrl-C, SIGTERM or a failed subscription, then shuts down cleanly.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Subscription`] when a subscription failed (after the clean shutdown);
    /// [`BrokerError::Signal`] when signals cannot be listened for.
    pub async fn run_until_signal(self) -> Result<ShutdownReport, BrokerError> {
        let failure = tokio::select! {
            signal = shutdown_signal() => { signal?; None }
            error = self.failed() => Some(error),
        };
        let report = self.shutdown().await;
        match failure {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }
}

async fn shutdown_signal() -> Result<(), BrokerError> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(BrokerError::Signal)?;
        tokio::select! {
            ctrl_c = tokio::signal::ctrl_c() => ctrl_c.map_err(BrokerError::Signal),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map_err(BrokerError::Signal)
    }
}
