//! [`Outage`]: a lease store decorator that fails every call while it is switched off,
//! answers late while it is slowed, and loses the answers of takes that landed while told to,
//! for tests that stage lost leases and lost answers and benchmarks that model a table's
//! latency (feature `testkit`).
//!
//! A store that answers instantly and never fails hides every lease-loss path; an outage
//! longer than `lease - renew` makes a broker lose its leases exactly as a real table outage
//! would, with nothing written meanwhile. A store that answers instantly also hides what a
//! round trip costs the paths that wait on it (a take before its reader starts).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{
    BoxFuture, Checkpoint, Holder, Lease, LeaseError, LeaseKey, LeaseResult, LeaseStore, Load,
    Outcome, Take,
};

/// Wraps a store; while [`OutageSwitch::cut`] is in force every call fails with
/// [`LeaseError::Unavailable`] without reaching the inner store.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use kinesis_lease_core::testkit::Outage;
/// use kinesis_lease_core::LeaseStore;
///
/// /// Gives a broker `store` behind a switch the test keeps.
/// fn behind_a_switch(store: Arc<dyn LeaseStore>) -> (Outage, kinesis_lease_core::testkit::OutageSwitch) {
///     let (store, switch) = Outage::wrap(store);
///     switch.cut(); // every call fails from now on
///     switch.restore(); // and reaches the store again
///     (store, switch)
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Outage {
    inner: Arc<dyn LeaseStore>,
    down: Arc<AtomicBool>,
    latency_us: Arc<AtomicU64>,
    renewal_latency_us: Arc<AtomicU64>,
    lose_takes: Arc<AtomicBool>,
}

/// Switches an [`Outage`] on and off, and sets its latency; clones switch the same store.
#[derive(Debug, Clone)]
pub struct OutageSwitch {
    down: Arc<AtomicBool>,
    latency_us: Arc<AtomicU64>,
    renewal_latency_us: Arc<AtomicU64>,
    lose_takes: Arc<AtomicBool>,
}

impl OutageSwitch {
    /// From now on, every call fails.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
    }

    /// From now on, calls reach the inner store again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// From now on, every call waits `latency` (on tokio's clock) before it reaches the store
    /// (or fails, during an outage): a table's round trip. `Duration::ZERO` answers at once.
    pub fn slow(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.store(micros, Ordering::SeqCst);
    }

    /// From now on, a renewal (of a shard row or a member row) lands at once and its answer
    /// comes `latency` later (on tokio's clock), the other calls as before: an instance learns
    /// what a renewal found between its take ticks, not on them. `Duration::ZERO` answers at
    /// once.
    pub fn slow_renewals(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.renewal_latency_us.store(micros, Ordering::SeqCst);
    }

    /// While `lose` is true, a take reaches the store and lands (or not) as usual, but its
    /// answer is lost on the way back: the caller gets [`LeaseError::Unavailable`].
    pub fn lose_take_answers(&self, lose: bool) {
        self.lose_takes.store(lose, Ordering::SeqCst);
    }
}

impl Outage {
    /// `inner` behind a switch, on (answering) to begin with.
    pub fn wrap(inner: Arc<dyn LeaseStore>) -> (Self, OutageSwitch) {
        let down = Arc::new(AtomicBool::new(false));
        let latency_us = Arc::new(AtomicU64::new(0));
        let renewal_latency_us = Arc::new(AtomicU64::new(0));
        let lose_takes = Arc::new(AtomicBool::new(false));
        (
            Self {
                inner,
                down: down.clone(),
                latency_us: latency_us.clone(),
                renewal_latency_us: renewal_latency_us.clone(),
                lose_takes: lose_takes.clone(),
            },
            OutageSwitch {
                down,
                latency_us,
                renewal_latency_us,
                lose_takes,
            },
        )
    }

    /// A renewal's answer, `renewal_latency_us` after it landed.
    async fn renewal_answered(
        &self,
        renewed: impl std::future::Future<Output = LeaseResult<Outcome>>,
    ) -> LeaseResult<Outcome> {
        let outcome = renewed.await;
        let micros = self.renewal_latency_us.load(Ordering::SeqCst);
        if micros > 0 {
            tokio::time::sleep(Duration::from_micros(micros)).await;
        }
        outcome
    }

    async fn answer_late(&self) {
        let micros = self.latency_us.load(Ordering::SeqCst);
        if micros > 0 {
            tokio::time::sleep(Duration::from_micros(micros)).await;
        }
    }

    fn check(&self, operation: &'static str) -> LeaseResult<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable {
                operation,
                resource: "lease table".into(),
                source: "outage staged by the test".into(),
            });
        }
        Ok(())
    }
}

macro_rules! forward {
    ($self:ident, $op:literal, $call:expr) => {
        Box::pin(async move {
            $self.answer_late().await;
            $self.check($op)?;
            $call.await
        })
    };
}

impl LeaseStore for Outage {
    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(
            self,
            "evict",
            self.inner.evict(key, observed, checkpoint, poke)
        )
    }

    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        forward!(self, "poke", self.inner.poke(member, about))
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        forward!(self, "delete", self.inner.delete(key, observed))
    }

    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        forward!(self, "create", self.inner.create(row))
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            self.answer_late().await;
            self.check("take")?;
            let outcome = self.inner.take(key, holder, take).await;
            if self.lose_takes.load(Ordering::SeqCst) {
                return Err(LeaseError::Unavailable {
                    operation: "take",
                    resource: key.to_string(),
                    source: "the take's answer was lost (staged by the test)".into(),
                });
            }
            outcome
        })
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(
            self,
            "renew",
            self.renewal_answered(self.inner.renew(key, holder, ttl, checkpoint))
        )
    }
    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(
            self,
            "renew",
            self.renewal_answered(
                self.inner
                    .renew_with_load(key, holder, ttl, checkpoint, load)
            )
        )
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(
            self,
            "checkpoint",
            self.inner.checkpoint(key, holder, checkpoint)
        )
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(self, "release", self.inner.release(key, holder, checkpoint))
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(self, "request", self.inner.request(key, asker, holder))
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        forward!(
            self,
            "hand_over",
            self.inner.hand_over(key, holder, to, ttl, checkpoint)
        )
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        forward!(self, "bump_epoch", self.inner.bump_epoch(stream))
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        forward!(self, "epoch", self.inner.epoch(stream))
    }
    fn epochs<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<crate::Epochs>> {
        forward!(self, "epoch", self.inner.epochs(stream))
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        forward!(self, "read", self.inner.read(key))
    }
    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        forward!(self, "read", self.inner.read_eventually(key))
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        forward!(self, "list", self.inner.list(stream))
    }
}
