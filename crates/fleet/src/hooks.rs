//! Lifecycle hooks: a subscription's code runs when a shard is taken, before its final
//! checkpoint is written, when its lease is lost and when it has ended.
//!
//! KCL users have `initialize`, `shutdownRequested`, `leaseLost` and `shardEnded`; rdkafka
//! users have rebalance callbacks. The same moments matter here: open a per-shard resource
//! when a shard is taken, flush what a handler buffered before the checkpoint that ends this
//! instance's holding is written, and drop per-shard state once the shard is someone else's.
//!
//! Every hook is async and bounded ([`Hooks::bound`], 5 s by default). Each call runs in a task
//! of its own: one that runs longer than its bound is cancelled with a warning, and one that
//! panics is logged, so a hook delays a shard's lifecycle by at most its bound and cannot kill
//! it. Hooks must not block their thread (run synchronous work with
//! `tokio::task::spawn_blocking`): on a runtime with one thread, a blocked thread stops the
//! lease renewals too.
//!
//! `on_taken` runs before the first read, with the lease renewed meanwhile; the keeper acts on
//! nothing else (a hand-over request, a shutdown) until it has returned, so the
//! final-checkpoint hook of a holding always runs after its `on_taken`. While the
//! final-checkpoint hook runs the lease keeps being renewed, and what the hook lets settle (a
//! stream consumer's acks, say) is in the checkpoint written after it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::{BoxFuture, Checkpoint};
use tracing::Instrument;

/// The default bound of one hook call.
pub const DEFAULT_HOOK_BOUND: Duration = Duration::from_secs(5);

/// A shard, as a hook is told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardInfo {
    /// The stream.
    pub stream: String,
    /// The shard id.
    pub shard: String,
    /// The shard's checkpoint: where reading resumes (taken), the one about to be written
    /// (before the final checkpoint), the last one written (lost), `SHARD_END` (ended).
    pub checkpoint: Option<Checkpoint>,
}

/// Why this instance is about to write a shard's final checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// Another instance asked for the shard (balancing or a deploy); it is handed over.
    HandOver {
        /// The owner id of the instance taking it.
        to: String,
    },
    /// The subscription stops: a shutdown, or a failure that ends it (stream deleted,
    /// owner id in use elsewhere).
    Stopping,
    /// The shard was read and settled to its end; `SHARD_END` is written next.
    ShardEnd,
    /// Another instance asked for the shard, but its member row shows it taking nothing now
    /// (capacity 0): it began its shutdown before the hand-over (or, for a few milliseconds
    /// after it joined, its member row did not yet show its join announced). The shard is
    /// released for any instance to take, not handed to it.
    AskerLeaving {
        /// The owner id of the instance that asked.
        asker: String,
    },
}

type Hook<T> = Arc<dyn Fn(T) -> BoxFuture<'static, ()> + Send + Sync>;

/// The lifecycle hooks of a subscription; each is optional.
///
/// # Examples
///
/// ```
/// use kinesis_fleet::{Hooks, Release};
///
/// let hooks = Hooks::new()
///     .on_taken(|shard| async move { println!("reading {} from {:?}", shard.shard, shard.checkpoint) })
///     .before_final_checkpoint(|shard, why| async move {
///         if let Release::HandOver { to } = why {
///             println!("flushing {} before handing it to {to}", shard.shard);
///         }
///     })
///     .bound(std::time::Duration::from_secs(2));
/// # let _ = hooks;
/// ```
#[derive(Clone)]
pub struct Hooks {
    taken: Option<Hook<ShardInfo>>,
    releasing: Option<Hook<(ShardInfo, Release)>>,
    lost: Option<Hook<ShardInfo>>,
    ended: Option<Hook<ShardInfo>>,
    bound: Duration,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            taken: None,
            releasing: None,
            lost: None,
            ended: None,
            bound: DEFAULT_HOOK_BOUND,
        }
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("on_taken", &self.taken.is_some())
            .field("before_final_checkpoint", &self.releasing.is_some())
            .field("on_lost", &self.lost.is_some())
            .field("on_ended", &self.ended.is_some())
            .field("bound", &self.bound)
            .finish()
    }
}

fn boxed<T, F, Fut>(f: F) -> Hook<T>
where
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |arg| Box::pin(f(arg)))
}

impl Hooks {
    /// No hooks, with the default bound (5 s).
    pub fn new() -> Self {
        Self::default()
    }

    /// Called once a shard's lease is taken, before its first read. `checkpoint` is the stored
    /// one reading resumes after.
    pub fn on_taken<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ShardInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.taken = Some(boxed(hook));
        self
    }

    /// Called before this instance writes a shard's final checkpoint: on a hand-over, on
    /// shutdown and at shard end, once no handler runs on the shard any more. The last chance
    /// to flush what was buffered; the lease is renewed meanwhile. Not called when the lease
    /// is lost (nothing more is written then) nor when the broker is dropped.
    pub fn before_final_checkpoint<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ShardInfo, Release) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.releasing = Some(boxed(move |(info, why)| hook(info, why)));
        self
    }

    /// Called after a shard's lease was lost (another instance took it, or no renewal landed
    /// in time): the reader has stopped and nothing more was written. Another instance may
    /// already be handling the shard's records after the last checkpoint.
    pub fn on_lost<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ShardInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.lost = Some(boxed(hook));
        self
    }

    /// Called after a shard was read and settled to its end and `SHARD_END` was written: its
    /// children may now be read.
    pub fn on_ended<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ShardInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.ended = Some(boxed(hook));
        self
    }

    /// How long one hook call may run before it is abandoned (5 s; more than zero).
    pub fn bound(mut self, bound: Duration) -> Self {
        self.bound = bound;
        self
    }

    /// The bound of one hook call.
    pub fn bound_of_one(&self) -> Duration {
        self.bound
    }

    pub(crate) fn has_releasing(&self) -> bool {
        self.releasing.is_some()
    }

    pub(crate) fn has_taken(&self) -> bool {
        self.taken.is_some()
    }

    /// The taken hook as a future, for the keeper to run while it renews.
    pub(crate) fn taken(&self, info: ShardInfo) -> impl Future<Output = ()> {
        let hook = self.taken.clone();
        let bound = self.bound;
        async move { run(hook.as_ref(), info, bound, "on_taken").await }
    }

    /// The final-checkpoint hook as a future, for the keeper to run while it renews.
    pub(crate) fn releasing(&self, info: ShardInfo, why: Release) -> impl Future<Output = ()> {
        let hook = self.releasing.clone();
        let bound = self.bound;
        async move { run(hook.as_ref(), (info, why), bound, "before_final_checkpoint").await }
    }

    pub(crate) async fn lost(&self, info: ShardInfo) {
        run(self.lost.as_ref(), info, self.bound, "on_lost").await;
    }

    pub(crate) async fn ended(&self, info: ShardInfo) {
        run(self.ended.as_ref(), info, self.bound, "on_ended").await;
    }
}

/// Runs one hook call in a task of its own, within `bound`; a panic in the call or its future
/// is logged.
async fn run<T: Send + 'static>(
    hook: Option<&Hook<T>>,
    arg: T,
    bound: Duration,
    name: &'static str,
) {
    let Some(hook) = hook.cloned() else { return };
    let span = tracing::Span::current();
    // A hook never outlives the shard task that ran it (a dropped broker leaves no hook
    // behind).
    let mut task = crate::abort_on_drop::AbortOnDrop(tokio::spawn(
        async move { hook(arg).await }.instrument(span),
    ));
    match tokio::time::timeout(bound, &mut task.0).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if error.is_panic() => {
            tracing::error!(hook = name, "lifecycle hook panicked")
        }
        Ok(Err(_)) => {}
        Err(_) => {
            tracing::warn!(
                hook = name,
                ?bound,
                "lifecycle hook still running at its bound; cancelled"
            )
        }
    }
}
