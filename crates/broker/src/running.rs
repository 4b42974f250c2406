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
//! A subscription with a `before_final_checkpoint` hook runs it after the handlers' deadline,
//! once per shard and side by side, before that shard's final write: a shutdown then takes at
//! most the deadline plus one hook bound (10 s + 5 s by default) plus the writes. Give the
//! process's grace period (Kubernetes' `terminationGracePeriodSeconds`) that much.
//!
//! # Drop
//!
//! Dropping a `RunningBroker` without `shutdown()` stops everything at once, as a crash would:
//! handlers, readers, lease keepers and coordinators. Nothing keeps renewing leases nobody
//! reads, and the other instances take the shards once the leases lapse.

use std::future::Future;
use std::sync::Arc;

use kinesis_dispatch::DispatchHandle;
use kinesis_fleet::CoordinatorHandle;
use kinesis_lease_core::LeaseStore;

use crate::mount::Mount;
use crate::shutdown::{ShutdownHandle, ShutdownReport};
use crate::stats::{BrokerStats, StatsHandle, StreamStats};
use crate::timings::Timings;
use crate::BrokerError;

/// A started broker. Dropping it without [`shutdown`](Self::shutdown) stops every task at
/// once and writes nothing (the leases then lapse instead of being handed over).
#[derive(Debug)]
#[must_use = "dropping a RunningBroker stops it at once; call `shutdown()`, `run_until(..)` or `run_until_signal()`"]
pub struct RunningBroker {
    pub(crate) owner: String,
    pub(crate) timings: Timings,
    pub(crate) subscriptions: Vec<Running>,
    pub(crate) handle: ShutdownHandle,
    pub(crate) _store: Arc<dyn LeaseStore>,
    pub(crate) _mount: Mount,
}

/// One started subscription.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) coordinator: CoordinatorHandle,
    pub(crate) dispatch: Option<DispatchHandle>,
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
                    load: s.coordinator.load(),
                })
                .collect(),
        }
    }

    /// A cloneable handle on [`stats`](Self::stats), readable from any task while
    /// [`run_until`](Self::run_until) or [`run_until_signal`](Self::run_until_signal) holds
    /// the broker (an HTTP status endpoint, a metrics loop).
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_broker::testing::MemoryStream;
    /// use kinesis_broker::{Broker, Delivery};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let kinesis = MemoryStream::new();
    /// kinesis.create_stream("orders", 1)?;
    /// let mut broker = Broker::builder().kinesis(kinesis).build()?;
    /// let stop = broker.shutdown_handle();
    /// broker.subscribe("orders").handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })?;
    /// let running = broker.start().await?;
    /// let stats = running.stats_handle();
    /// let status = tokio::spawn(async move {
    ///     let lagging = stats.stats().shards("orders").iter().filter(|s| s.in_flight > 0).count();
    ///     stop.shutdown();
    ///     lagging
    /// });
    /// running.run_until(std::future::pending::<()>()).await?;
    /// assert_eq!(status.await?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            sources: self
                .subscriptions
                .iter()
                .map(|s| s.coordinator.stats_source())
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
        // What still fails is abandoned: named here, and each shard's final checkpoint below
        // stops before the first of its own.
        let abandoned: Vec<kinesis_dispatch::Stuck> = self
            .subscriptions
            .iter()
            .flat_map(|sub| sub.coordinator.failing())
            .collect();
        for record in &abandoned {
            tracing::warn!(
                stream = %record.stream,
                shard = %record.shard,
                sequence = %record.sequence,
                partition_key = record.partition_key.as_deref().unwrap_or(""),
                attempts = record.attempts,
                "shutdown abandons a record that still fails; the next owner handles it again"
            );
        }
        let releases = self
            .subscriptions
            .drain(..)
            .map(|sub| sub.coordinator.release_all());
        futures_util::future::join_all(releases).await;
        tracing::info!(owner = %self.owner, handlers_finished = finished, "broker shut down");
        ShutdownReport {
            handlers_finished: finished,
            abandoned,
        }
    }

    /// A handle that asks this broker to shut down (the one
    /// [`Broker::shutdown_handle`](crate::Broker::shutdown_handle) gave, if any).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Runs until `signal` resolves, the broker's [`ShutdownHandle`] asks, or a subscription
    /// fails; then shuts down cleanly (see the module docs), within the shutdown deadline.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Subscription`] when a subscription failed (after the clean shutdown).
    pub async fn run_until<F>(self, signal: F) -> Result<ShutdownReport, BrokerError>
    where
        F: Future<Output = ()>,
    {
        self.run_until_result(async {
            signal.await;
            Ok(())
        })
        .await
    }

    /// Runs until Ctrl-C, SIGTERM, the broker's [`ShutdownHandle`] or a failed subscription,
    /// then shuts down cleanly.
    ///
    /// # Errors
    ///
    /// [`BrokerError::Subscription`] when a subscription failed (after the clean shutdown);
    /// [`BrokerError::Signal`] when signals cannot be listened for (after the clean
    /// shutdown, too: a broker is never left running unwatched).
    pub async fn run_until_signal(self) -> Result<ShutdownReport, BrokerError> {
        self.run_until_result(crate::shutdown::signal()).await
    }

    async fn run_until_result(
        self,
        signal: impl Future<Output = Result<(), BrokerError>>,
    ) -> Result<ShutdownReport, BrokerError> {
        let handle = self.handle.clone();
        let failure = tokio::select! {
            // A failure already there is reported, not lost to a shutdown asked at once.
            biased;
            error = self.failed() => Some(error),
            signal = signal => signal.err(),
            () = handle.requested() => None,
        };
        let report = self.shutdown().await;
        match failure {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }
}
