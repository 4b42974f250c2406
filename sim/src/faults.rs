//! The fault layers: a lease store and a Kinesis that delay, fail, lose responses and cut
//! instances off, as the seed says. Policy (what to inject) lives in `plan`; these only obey.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    kinesis::KinesisApi,
    lease::{Lease, LeaseError, LeaseKey, LeaseStore, Outcome},
    testing::MemoryStream,
    Checkpoint, MemoryLeaseStore, ReaderError, StartAt,
};
use kinesis_lease_core::{BoxFuture, Epochs, Holder, LeaseResult, Take};
use tokio::time::Instant;

/// An instance frozen until a time (a GC pause, a stopped container): its store and Kinesis
/// calls, and its handlers, wait for the freeze to end, in both directions (a response that
/// arrived during the freeze is seen after it). Tokio's timers of the instance still fire: one
/// runtime runs the whole fleet, so the freeze stops the instance's I/O and handlers, not its
/// timers (its keepers' own stop timers go on, as a kernel's would for a process that resumes).
#[derive(Debug, Default)]
pub struct Freeze {
    until: Mutex<Option<Instant>>,
}

impl Freeze {
    /// Freezes the instance until `until`.
    pub fn until(&self, until: Instant) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
    }

    /// True while frozen.
    pub fn is_frozen(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|u| u > Instant::now())
    }

    /// Waits for the freeze to end (at once when not frozen).
    pub async fn wait(&self) {
        loop {
            let until = *self.until.lock().unwrap_or_else(|p| p.into_inner());
            match until {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }
}

/// What one instance's lease-store connection does wrong, switched by the scenario.
#[derive(Debug, Default)]
pub struct StoreFaults {
    state: Mutex<FaultState>,
    /// Epoch reads fail (3 in 10) or answer up to 2 s late, for the whole run
    /// (`Fault::EpochFaults`); healing leaves them.
    epoch_faults: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default, Clone)]
struct FaultState {
    /// Each call waits up to this long before it reaches the table, and up to half of it
    /// before its response returns.
    max_delay_ms: u64,
    /// Chance (per mille) that a call fails before it reaches the table.
    fail_per_mille: u32,
    /// Chance (per mille) that a write that landed reports a failure (its response is lost).
    lose_per_mille: u32,
    /// Cut off from the table until then: calls fail (or hang until then, and fail).
    cut_until: Option<Instant>,
    hang: bool,
    /// Delays, failures and lost responses stop then.
    faults_until: Option<Instant>,
    /// Until then, every bump of a roster's epoch (`stream@members`) fails.
    roster_bumps_fail_until: Option<Instant>,
}

impl StoreFaults {
    /// Delays, failures and lost responses from now until `until` (zeros switch them off).
    pub fn set(&self, max_delay_ms: u64, fail_per_mille: u32, lose_per_mille: u32, until: Instant) {
        let mut s = self.lock();
        s.max_delay_ms = max_delay_ms;
        s.fail_per_mille = fail_per_mille;
        s.lose_per_mille = lose_per_mille;
        s.faults_until = Some(until);
    }

    /// Cuts the instance off the table until `until`; `hang`: calls wait for the cut to end
    /// instead of failing at once.
    pub fn cut(&self, until: Instant, hang: bool) {
        let mut s = self.lock();
        s.cut_until = Some(until);
        s.hang = hang;
    }

    /// Every bump of a roster's epoch fails until `until` (the member's join is never
    /// announced meanwhile).
    pub fn fail_roster_bumps(&self, until: Instant) {
        self.lock().roster_bumps_fail_until = Some(until);
    }

    /// Epoch reads fail or answer late from now on (see `Fault::EpochFaults`).
    pub fn fail_epoch_reads(&self) {
        self.epoch_faults.store(true, Ordering::Relaxed);
    }

    /// True while roster bumps fail.
    pub fn roster_bumps_fail(&self) -> bool {
        self.lock()
            .roster_bumps_fail_until
            .is_some_and(|u| u > Instant::now())
    }

    /// Back to a healthy connection.
    pub fn heal(&self) {
        *self.lock() = FaultState::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A lease store behind a faulty connection; the rows are a shared `MemoryLeaseTable`.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: MemoryLeaseStore,
    faults: Arc<StoreFaults>,
    freeze: Arc<Freeze>,
    rng: Arc<Mutex<fastrand::Rng>>,
    /// Calls that failed or lost their response, for the report.
    pub injected: Arc<AtomicU64>,
    /// The versions of rows seen lately, by every instance: what a replica behind may answer.
    replicas: Arc<Replicas>,
}

/// How old a version an eventually consistent read may answer with: longer than DynamoDB's
/// usual lag of well under a second, so that two watches 2 s apart can see the same old row.
const REPLICA_LAG: Duration = Duration::from_millis(2_500);

/// The versions of each row that some call of any instance saw current in the last
/// [`REPLICA_LAG`] (a read's answer, a write's resulting row, a delete's absence), each with
/// the moment it was current. An eventually consistent read answers 3 times in 10 with one of
/// them, drawn at random: a version a replica behind could still hold, possibly older than one
/// the same caller saw before, and possibly for a row the caller never read. Versions no call
/// saw (an operator's writes, pokes) are never answered: every answer was current once.
#[derive(Debug, Default)]
pub struct Replicas {
    versions: Mutex<HashMap<String, VecDeque<Version>>>,
}

/// A row (or its absence) and when it was current.
type Version = (Instant, Option<Lease>);

impl Replicas {
    /// `row` (or its absence) was current for `key` now.
    fn saw(&self, key: &LeaseKey, row: Option<&Lease>) {
        let now = Instant::now();
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        let kept = versions.entry(key.to_string()).or_default();
        while kept
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > REPLICA_LAG)
        {
            kept.pop_front();
        }
        kept.push_back((now, row.cloned()));
    }

    /// The versions of `key` current at some moment of the last [`REPLICA_LAG`].
    fn recent(&self, key: &LeaseKey) -> Vec<Option<Lease>> {
        let now = Instant::now();
        self.versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key.to_string())
            .map(|kept| {
                kept.iter()
                    .filter(|(at, _)| now.duration_since(*at) <= REPLICA_LAG)
                    .map(|(_, row)| row.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn injected(operation: &'static str, what: &str) -> LeaseError {
    LeaseError::Unavailable {
        operation,
        resource: "sim".to_owned(),
        source: what.to_owned().into(),
    }
}

impl FaultyStore {
    /// `inner` (a memory store over the shared table, on this instance's skewed clock) behind
    /// `faults` and `freeze`, drawing from a generator seeded with `seed`; eventually
    /// consistent reads answer from `replicas` at times.
    pub fn new(
        inner: MemoryLeaseStore,
        faults: Arc<StoreFaults>,
        freeze: Arc<Freeze>,
        seed: u64,
        replicas: Arc<Replicas>,
    ) -> Self {
        Self {
            inner,
            faults,
            freeze,
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))),
            injected: Arc::default(),
            replicas,
        }
    }

    fn draw(&self, below: u64) -> u64 {
        if below == 0 {
            return 0;
        }
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .u64(..below)
    }

    /// `read`'s answer, noted as a version of the row.
    async fn remembered(
        &self,
        key: &LeaseKey,
        read: impl std::future::Future<Output = LeaseResult<Option<Lease>>>,
    ) -> LeaseResult<Option<Lease>> {
        let row = read.await?;
        self.replicas.saw(key, row.as_ref());
        Ok(row)
    }

    /// A write's outcome; the row it left, when it landed, noted as a version of the row.
    async fn written(
        &self,
        key: &LeaseKey,
        write: impl std::future::Future<Output = LeaseResult<Outcome>>,
    ) -> LeaseResult<Outcome> {
        let outcome = write.await?;
        if let Outcome::Written(row) = &outcome {
            self.replicas.saw(key, Some(row));
        }
        Ok(outcome)
    }

    /// Before the call reaches the table: the cut, a delay, a failure.
    async fn before(&self, operation: &'static str) -> LeaseResult<FaultState> {
        self.freeze.wait().await;
        let mut state = self.faults.lock().clone();
        if state.faults_until.is_some_and(|u| u <= Instant::now()) {
            (
                state.max_delay_ms,
                state.fail_per_mille,
                state.lose_per_mille,
            ) = (0, 0, 0);
        }
        if let Some(until) = state.cut_until.filter(|u| *u > Instant::now()) {
            if state.hang {
                tokio::time::sleep_until(until).await;
            }
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(injected(operation, "cut off from the lease table"));
        }
        let delay = self.draw(state.max_delay_ms + 1);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.draw(1000) < u64::from(state.fail_per_mille) {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(injected(operation, "injected failure"));
        }
        Ok(state)
    }

    /// After a call landed: a slow response, or a lost one (for writes).
    async fn after<T>(
        &self,
        state: &FaultState,
        operation: &'static str,
        write: bool,
        result: LeaseResult<T>,
    ) -> LeaseResult<T> {
        let delay = self.draw(state.max_delay_ms / 2 + 1);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.freeze.wait().await;
        if write && result.is_ok() && self.draw(1000) < u64::from(state.lose_per_mille) {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(injected(operation, "response lost (the write landed)"));
        }
        result
    }
}

macro_rules! faulty {
    ($self:ident, $op:literal, $write:expr, $call:expr) => {
        Box::pin(async move {
            let state = $self.before($op).await?;
            let result = $call.await;
            $self.after(&state, $op, $write, result).await
        })
    };
}

impl LeaseStore for FaultyStore {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        faulty!(self, "create", true, self.inner.create(row))
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "take",
            true,
            self.written(key, self.inner.take(key, holder, take))
        )
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "renew",
            true,
            self.written(key, self.inner.renew(key, holder, ttl, checkpoint))
        )
    }
    // Forwarded, not left to the trait's default (which renews without the load): without it
    // no load reached the table, and the seeds balanced by load shared by count (found when
    // two bugs planted in the planner's hand-overs failed no seed).
    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a kinesis_broker::Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "renew",
            true,
            self.written(
                key,
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
        faulty!(
            self,
            "checkpoint",
            true,
            self.written(key, self.inner.checkpoint(key, holder, checkpoint))
        )
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "release",
            true,
            self.written(key, self.inner.release(key, holder, checkpoint))
        )
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "request",
            true,
            self.written(key, self.inner.request(key, asker, holder))
        )
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        faulty!(
            self,
            "hand_over",
            true,
            self.written(key, self.inner.hand_over(key, holder, to, ttl, checkpoint))
        )
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        faulty!(self, "delete", true, async move {
            let deleted = self.inner.delete(key, observed).await?;
            if deleted {
                self.replicas.saw(key, None);
            }
            Ok(deleted)
        })
    }
    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        faulty!(self, "poke", true, self.inner.poke(member, about))
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        if stream.ends_with("@members") && self.faults.roster_bumps_fail() {
            return Box::pin(async move {
                self.injected.fetch_add(1, Ordering::SeqCst);
                Err(injected("bump_epoch", "the roster's bump fails"))
            });
        }
        faulty!(self, "bump_epoch", true, self.inner.bump_epoch(stream))
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        if self.faults.epoch_faults.load(Ordering::Relaxed) {
            return Box::pin(async move {
                if self.draw(10) < 3 {
                    self.injected.fetch_add(1, Ordering::Relaxed);
                    return Err(injected("epoch", "an epoch read failed"));
                }
                let read = self.inner.epoch(stream).await;
                tokio::time::sleep(Duration::from_millis(self.draw(2_001))).await;
                self.freeze.wait().await;
                read
            });
        }
        faulty!(self, "epoch", false, self.inner.epoch(stream))
    }
    fn epochs<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Epochs>> {
        if self.faults.epoch_faults.load(Ordering::Relaxed) {
            return Box::pin(async move {
                if self.draw(10) < 3 {
                    self.injected.fetch_add(1, Ordering::Relaxed);
                    return Err(injected("epoch", "an epoch read failed"));
                }
                let read = self.inner.epochs(stream).await;
                tokio::time::sleep(Duration::from_millis(self.draw(2_001))).await;
                self.freeze.wait().await;
                read
            });
        }
        faulty!(self, "epoch", false, self.inner.epochs(stream))
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        faulty!(
            self,
            "read",
            false,
            self.remembered(key, self.inner.read(key))
        )
    }
    /// Three in ten times, a version of the row current at some moment of the last
    /// [`REPLICA_LAG`] (see [`Replicas`]), when there is one: what a replica behind may answer.
    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        faulty!(self, "read", false, async move {
            let recent = self.replicas.recent(key);
            if !recent.is_empty() && self.draw(10) < 3 {
                let pick = self.draw(recent.len() as u64) as usize;
                return Ok(recent[pick].clone());
            }
            self.remembered(key, self.inner.read(key)).await
        })
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        faulty!(self, "list", false, async move {
            let rows = self.inner.list(stream).await?;
            for row in &rows {
                self.replicas.saw(&row.key, Some(row));
            }
            Ok(rows)
        })
    }
}

/// The stream as every broker sees it: the shared `MemoryStream`, with latency, and a record
/// of when each shard was first opened (by a global event number), which decides which
/// records a `LATEST` subscription must handle.
#[derive(Debug, Clone)]
pub struct SimKinesis {
    inner: MemoryStream,
    events: Arc<AtomicU64>,
    first_open: Arc<Mutex<BTreeMap<String, u64>>>,
    latency_ms: Arc<AtomicU64>,
    rng: Arc<Mutex<fastrand::Rng>>,
    /// The instance this view belongs to is frozen (none: the producer's and monitor's view).
    freeze: Option<Arc<Freeze>>,
}

impl SimKinesis {
    /// Wraps `inner`; `events` numbers puts and opens in one sequence.
    pub fn new(inner: MemoryStream, events: Arc<AtomicU64>, seed: u64) -> Self {
        Self {
            inner,
            events,
            first_open: Arc::default(),
            latency_ms: Arc::default(),
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))),
            freeze: None,
        }
    }

    /// The same stream as one instance sees it: its calls wait while `freeze` holds.
    pub fn for_instance(&self, freeze: Arc<Freeze>) -> Self {
        Self {
            freeze: Some(freeze),
            ..self.clone()
        }
    }

    /// Each call takes up to `ms` from now on.
    pub fn set_latency(&self, ms: u64) {
        self.latency_ms.store(ms, Ordering::Relaxed);
    }

    /// The event number of each shard's first opened iterator.
    pub fn first_open(&self) -> BTreeMap<String, u64> {
        self.first_open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn latency(&self) {
        if let Some(freeze) = &self.freeze {
            freeze.wait().await;
        }
        let max = self.latency_ms.load(Ordering::Relaxed);
        if max > 0 {
            let ms = self
                .rng
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .u64(..=max);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
}

impl KinesisApi for SimKinesis {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<kinesis_broker::kinesis::Shard>, ReaderError>> {
        Box::pin(async move {
            self.latency().await;
            self.inner.list_shards(stream).await
        })
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        Box::pin(async move {
            self.latency().await;
            let it = self.inner.shard_iterator(stream, shard, position).await?;
            let event = self.events.fetch_add(1, Ordering::SeqCst);
            self.first_open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(shard.to_owned())
                .or_insert(event);
            Ok(it)
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<kinesis_broker::kinesis::RecordsPage, ReaderError>> {
        Box::pin(async move {
            self.latency().await;
            self.inner.get_records(stream, shard, iterator, limit).await
        })
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [kinesis_broker::PutEntry],
    ) -> BoxFuture<'a, Result<Vec<kinesis_broker::kinesis::PutOutcome>, ReaderError>> {
        Box::pin(async move { self.inner.put_records(stream, entries).await })
    }

    fn register_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<kinesis_broker::kinesis::StreamConsumer, ReaderError>> {
        Box::pin(async move {
            self.latency().await;
            self.inner.register_consumer(stream, name).await
        })
    }

    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<kinesis_broker::kinesis::StreamConsumer, ReaderError>> {
        Box::pin(async move {
            self.latency().await;
            self.inner.describe_consumer(stream, name).await
        })
    }

    fn subscribe_to_shard<'a>(
        &'a self,
        stream: &'a str,
        consumer_arn: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<Box<dyn kinesis_broker::kinesis::ShardSubscription>, ReaderError>>
    {
        Box::pin(async move {
            self.latency().await;
            let subscription = self
                .inner
                .subscribe_to_shard(stream, consumer_arn, shard, position)
                .await?;
            // A subscription opens the shard as an iterator does.
            let event = self.events.fetch_add(1, Ordering::SeqCst);
            self.first_open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(shard.to_owned())
                .or_insert(event);
            Ok(subscription)
        })
    }
}
