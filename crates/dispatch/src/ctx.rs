//! `Ctx`: what every loop of one dispatcher shares (the handler, the retry policy, the batch
//! window and the closing signal).
//!
//! It has a file of its own, below everything that runs on it, so the files that run on it
//! form layers instead of a circle: the router reads it, `attempt` runs the handler with it and
//! parks what fails, and `dispatcher` builds it and runs the loops (each file adds its own
//! `impl Ctx` block).

use std::time::Duration;

use tokio::sync::watch;

use crate::{Handler, RetryPolicy};

/// What the loops and the router of one dispatcher share, behind an `Arc`.
pub(crate) struct Ctx {
    /// The user's handler, run by every loop.
    pub(crate) handler: Handler,
    /// How failed records are retried, and what happens once their attempts are used up.
    pub(crate) retry: RetryPolicy,
    /// How long a batch gathers after its first record.
    pub(crate) window: Duration,
    /// Turns true at `close()`: the loops and the router stop taking.
    pub(crate) closing: watch::Receiver<bool>,
}
