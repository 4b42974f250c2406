//! `RetryPolicy`: what happens when a handler fails.
//!
//! A skipped record is a lost record, so by default a failing record (an `Err` or a caught
//! panic) is retried forever, with capped exponential backoff, logged at `warn` once per
//! backoff step. Between attempts it is parked (see `parking`): only its key (lanes by key) or
//! its shard (the serial loop) waits behind it, which keeps per-key order. A failure marked
//! [`Permanent`](crate::Permanent) (or a payload that does not parse) goes to the dead-letter
//! callback at once when there is one. A subscription may cap the attempts, and must then say
//! what happens: skip (logged at `error`) or hand the record to a dead-letter callback.
//! Nothing is skipped silently. A dead-letter callback that fails leaves the record unsettled
//! and parked, holding back what it held: its shard's checkpoint stays before it, and it is
//! tried again (the handler, then the callback) at its next backoff step.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::BoxFuture;

use crate::{Delivery, HandlerError};

/// The dead-letter callback of [`Exhausted::DeadLetter`], boxed.
pub(crate) type DeadLetterFn = Arc<
    dyn Fn(Delivery, HandlerError) -> BoxFuture<'static, Result<(), HandlerError>> + Send + Sync,
>;

/// What to do with a record whose attempts are used up.
#[derive(Clone)]
pub enum Exhausted {
    /// Settle it without handling (logged at `error`).
    Skip,
    /// Hand it to a callback; it settles when the callback returns `Ok`.
    DeadLetter(DeadLetterFn),
}

impl fmt::Debug for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exhausted::Skip => f.write_str("Skip"),
            Exhausted::DeadLetter(_) => f.write_str("DeadLetter"),
        }
    }
}

/// How failing handlers are retried.
///
/// # Examples
///
/// ```
/// use kinesis_dispatch::RetryPolicy;
/// use std::time::Duration;
///
/// let forever = RetryPolicy::default();
/// let five_then_skip = RetryPolicy::default().max_attempts(5).then_skip();
/// let to_dlq = RetryPolicy::default()
///     .max_attempts(3)
///     .then_dead_letter(|delivery, error| async move {
///         eprintln!("dead letter {:?}: {error}", delivery.sequence());
///         Ok::<(), std::io::Error>(())
///     });
/// # let _ = (forever, five_then_skip, to_dlq);
/// ```
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) max_attempts: Option<NonZeroU32>,
    pub(crate) exhausted: Exhausted,
}

impl Default for RetryPolicy {
    /// Retry forever, backing off from 100 ms up to 30 s.
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            max_attempts: None,
            exhausted: Exhausted::Skip,
        }
    }
}

impl RetryPolicy {
    /// Sets the first backoff and its cap (the backoff doubles between them).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Caps the attempts (the first call counts as one; 0 is taken as 1). Follow with
    /// [`then_skip`](Self::then_skip) or [`then_dead_letter`](Self::then_dead_letter); until
    /// then the final action is skip.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = NonZeroU32::new(attempts.max(1));
        self
    }

    /// Skips a record whose attempts are used up, logging it at `error`.
    pub fn then_skip(mut self) -> Self {
        self.exhausted = Exhausted::Skip;
        self
    }

    /// Hands a record whose attempts are used up to `callback` with the last error.
    pub fn then_dead_letter<F, Fut, E>(mut self, callback: F) -> Self
    where
        F: Fn(Delivery, HandlerError) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.exhausted = Exhausted::DeadLetter(Arc::new(move |d, e| {
            // A callback that panics before it returns its future panics in the future
            // instead, where the dispatcher catches it.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(d, e))) {
                Ok(fut) => Box::pin(async move { fut.await.map_err(Into::into) }),
                Err(panic) => Box::pin(async move { std::panic::resume_unwind(panic) }),
            }
        }));
        self
    }

    /// The wait before attempt `attempt + 1` (attempt counts from 1).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        kinesis_lease_core::Backoff::new(self.initial_backoff, self.max_backoff)
            .ceiling(attempt.saturating_sub(1))
    }

    /// True when `attempt` attempts use up the budget.
    pub(crate) fn exhausted_after(&self, attempt: u32) -> bool {
        self.max_attempts.is_some_and(|max| attempt >= max.get())
    }
}
