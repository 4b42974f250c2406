//! Shutdown under the service's control: a cloneable [`ShutdownHandle`], the signals
//! `run_until_signal` listens for, and what a shutdown reports.
//!
//! A service often decides when to stop by itself (an admin endpoint, a supervisor, a test),
//! and needs the decision to reach the broker from any task, as axum's
//! `with_graceful_shutdown` does for a server: [`RunningBroker::run_until`](crate::RunningBroker::run_until)
//! shuts down cleanly when a future resolves, or when any clone of the broker's handle asks.

use std::sync::Arc;

use tokio::sync::watch;

use crate::BrokerError;

/// Asks a broker to shut down cleanly; cheap to clone, usable from any task or thread.
///
/// A request ends [`RunningBroker::run_until`](crate::RunningBroker::run_until) and
/// [`run_until_signal`](crate::RunningBroker::run_until_signal), which then shut down as
/// [`RunningBroker::shutdown`](crate::RunningBroker::shutdown) does. A request made before
/// either is called is kept, not missed.
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
/// let handle = broker.shutdown_handle();
/// broker.subscribe("orders").handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })?;
/// let running = broker.start().await?;
/// handle.shutdown(); // from an admin endpoint, say
/// running.run_until(std::future::pending::<()>()).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    requested: Arc<watch::Sender<bool>>,
}

impl ShutdownHandle {
    pub(crate) fn new() -> Self {
        Self {
            requested: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Asks the broker to shut down; idempotent.
    pub fn shutdown(&self) {
        self.requested.send_replace(true);
    }

    /// True once a shutdown was asked for.
    pub fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Resolves once a shutdown is asked for (at once if it already was).
    pub async fn requested(&self) {
        let mut seen = self.requested.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = seen.wait_for(|asked| *asked).await;
    }
}

/// What a clean shutdown did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// True when every handler in flight finished before the deadline.
    pub handlers_finished: bool,
    /// The records that had failed and were still unsettled when the shutdown ended (a record
    /// failing at its deadline, or whose dead-letter callback still failed): stream,
    /// shard, sequence number, partition key, attempts. Each shard's final checkpoint stops
    /// before the first of its own, so the next owner handles them again.
    pub abandoned: Vec<kinesis_dispatch::Stuck>,
}

/// Ctrl-C or SIGTERM.
pub(crate) async fn signal() -> Result<(), BrokerError> {
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
