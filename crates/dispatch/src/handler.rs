//! `Handler`: the user's code, for one record at a time or for batches.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use kinesis_lease_core::BoxFuture;

use crate::Delivery;

/// The error a handler returns (or a panic turned into one).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A one-record handler, boxed so [`Handler`] is one type whatever the closure.
pub(crate) type OneFn =
    Arc<dyn Fn(Delivery) -> BoxFuture<'static, Result<(), HandlerError>> + Send + Sync>;
/// A batch handler, boxed the same way.
pub(crate) type BatchFn =
    Arc<dyn Fn(Vec<Delivery>) -> BoxFuture<'static, Result<(), BatchFailure>> + Send + Sync>;

/// What runs on the deliveries: a function of one delivery, or of a batch.
#[derive(Clone)]
pub enum Handler {
    /// One delivery at a time.
    One(OneHandler),
    /// Batches of up to `max` deliveries.
    Batch(BatchHandler),
}

/// A handler of one delivery; build it with [`Handler::one`].
#[derive(Clone)]
pub struct OneHandler(pub(crate) OneFn);

/// A handler of batches; build it with [`Handler::batch`].
#[derive(Clone)]
pub struct BatchHandler {
    pub(crate) f: BatchFn,
    pub(crate) max: usize,
}

impl Handler {
    /// A handler of one delivery: `Ok` settles it, `Err` or a panic retries it (see
    /// [`RetryPolicy`](crate::RetryPolicy)).
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_dispatch::{Delivery, Handler};
    ///
    /// let handler = Handler::one(|delivery: Delivery| async move {
    ///     println!("{} bytes from {}", delivery.payload().len(), delivery.shard());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// # let _ = handler;
    /// ```
    pub fn one<F, Fut, E>(f: F) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        Handler::One(OneHandler(Arc::new(move |d| {
            // A closure that panics before it returns its future panics in the future instead,
            // where the dispatcher catches it like any other handler panic.
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(d))) {
                Ok(fut) => Box::pin(async move { fut.await.map_err(Into::into) }),
                Err(panic) => Box::pin(async move { std::panic::resume_unwind(panic) }),
            }
        })))
    }

    /// A handler of batches of up to `max` deliveries (at least 1), or what arrived within the
    /// batch window of the batch's first record. A batch may mix shards. `Ok` settles the whole
    /// batch; [`BatchFailure`] names the ones that failed, and the others settle.
    ///
    /// # Examples
    ///
    /// ```
    /// use kinesis_dispatch::{BatchFailure, Delivery, Handler};
    ///
    /// let handler = Handler::batch(500, |batch: Vec<Delivery>| async move {
    ///     let failed: Vec<usize> = batch
    ///         .iter()
    ///         .enumerate()
    ///         .filter(|(_, d)| d.payload().is_empty())
    ///         .map(|(i, _)| i)
    ///         .collect();
    ///     if failed.is_empty() { Ok(()) } else { Err(BatchFailure::items(failed, "empty payload")) }
    /// });
    /// # let _ = handler;
    /// ```
    pub fn batch<F, Fut>(max: usize, f: F) -> Self
    where
        F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BatchFailure>> + Send + 'static,
    {
        Handler::Batch(BatchHandler {
            f: Arc::new(move |batch| {
                match std::panic::catch_unwind(AssertUnwindSafe(|| f(batch))) {
                    Ok(fut) => Box::pin(fut),
                    Err(panic) => Box::pin(async move { std::panic::resume_unwind(panic) }),
                }
            }),
            max: max.max(1),
        })
    }

    /// The largest number of records one call takes (1 for a handler of one delivery).
    pub fn batch_size(&self) -> usize {
        match self {
            Handler::One(_) => 1,
            Handler::Batch(b) => b.max,
        }
    }
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Handler::One(_) => f.write_str("Handler::One"),
            Handler::Batch(b) => write!(f, "Handler::Batch(max = {})", b.max),
        }
    }
}

impl fmt::Debug for OneHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneHandler")
    }
}

impl fmt::Debug for BatchHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BatchHandler(max = {})", self.max)
    }
}

/// A batch handler's failure: which records of the batch failed, and why.
///
/// Records not named settle. A named record is retried, and so is every later record of the
/// batch with the same partition key, so each key keeps its order across retries (those later
/// records are handled again: delivery is at least once).
#[derive(Debug)]
pub struct BatchFailure {
    pub(crate) failed: Option<Vec<usize>>,
    pub(crate) error: HandlerError,
}

impl BatchFailure {
    /// Every record of the batch failed.
    pub fn all(error: impl Into<HandlerError>) -> Self {
        Self {
            failed: None,
            error: error.into(),
        }
    }

    /// The records at these indices of the batch failed.
    pub fn items(indices: impl IntoIterator<Item = usize>, error: impl Into<HandlerError>) -> Self {
        Self {
            failed: Some(indices.into_iter().collect()),
            error: error.into(),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for BatchFailure {
    /// `?` on any error fails the whole batch.
    fn from(error: E) -> Self {
        Self::all(error)
    }
}

/// A handler error that fails the same way on every attempt (a record that can never be
/// handled as it is: a payload of the wrong shape, a reference to something that will never
/// exist).
///
/// With a dead-letter callback set ([`RetryPolicy::then_dead_letter`](crate::RetryPolicy::then_dead_letter))
/// the record goes there at once, without the retries; without one it is retried like any
/// failure, so nothing is dropped silently. A payload that [`Delivery::json`] cannot parse is
/// treated the same way. A batch handler names the records that failed for good with
/// [`BatchFailure::items`] and a `Permanent` error: only those go to the dead letter. A
/// [`BatchFailure::all`] names no record (a `?` in a batch handler), so its error is retried
/// like any failure, unless the batch holds one record.
///
/// # Examples
///
/// ```
/// use kinesis_dispatch::{Delivery, HandlerError, Permanent};
///
/// async fn handle(delivery: Delivery) -> Result<(), HandlerError> {
///     if delivery.payload().is_empty() {
///         return Err(Permanent::new("an empty order can never be handled").into());
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Permanent(HandlerError);

impl Permanent {
    /// Marks `error` as failing the same way on every attempt.
    pub fn new(error: impl Into<HandlerError>) -> Self {
        Self(error.into())
    }

    /// The error it wraps.
    pub fn into_inner(self) -> HandlerError {
        self.0
    }
}

impl fmt::Display for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "permanent failure: {}", self.0)
    }
}

impl std::error::Error for Permanent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}
