//! Settlement: how far each shard may checkpoint, whatever order acks arrive in.
//!
//! A shard's reader numbers its deliveries in the order it produced them (ordinals). An ack
//! marks one settled. The shard's checkpoint offer is the sequence number of the last record
//! of the *settled prefix*: the longest run of settled ordinals from the first one still
//! outstanding. It never passes a record that has not settled, and it only moves forward.
//!
//! # A bounded window
//!
//! Entries from the first unsettled delivery on stay in the window, settled or not, until the
//! prefix reaches them. A record that never settles (retried forever beside other workers, or
//! a dead-letter callback that keeps failing) would make the window grow with every later
//! record; readers therefore stop reading a shard whose window is full
//! ([`ShardSettlement::wait_for_room`]) and report the record at its head
//! ([`ShardSettlement::stuck`]), so memory per shard stays bounded.
//!
//! [`CheckpointCursor`] is the writer's side: it remembers what was written and offers a
//! checkpoint only when the settled prefix moved past it, so writes are monotonic and coalesced
//! (one write per interval carries whatever settled since the last one).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::{Duration, SystemTime};

use kinesis_lease_core::{Checkpoint, SequenceNumber};
use tokio::sync::Notify;

/// A shard's delivery counts and checkpoint offer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The last record of the settled prefix: the checkpoint the shard may write.
    pub checkpoint: Option<SequenceNumber>,
    /// Deliveries produced so far.
    pub delivered: u64,
    /// Deliveries settled so far (in any order).
    pub settled: u64,
    /// Entries held in the settlement window: the first unsettled delivery and every delivery
    /// after it, settled or not.
    pub window: u64,
}

impl Progress {
    /// Deliveries produced and not yet settled.
    pub fn in_flight(&self) -> u64 {
        self.delivered.saturating_sub(self.settled)
    }
}

#[derive(Debug)]
struct Entry {
    sequence: SequenceNumber,
    settled: bool,
    /// Failed handler attempts so far.
    attempts: u32,
    /// When Kinesis received the record, if the source said.
    arrival: Option<SystemTime>,
    /// Set at its first failed attempt.
    failing: Option<Box<Failing>>,
}

/// What is kept of a record once it failed: its key and since when it fails.
#[derive(Debug)]
struct Failing {
    partition_key: Box<str>,
    since: SystemTime,
    since_instant: tokio::time::Instant,
}

/// The delivery at the head of a shard's settlement window, which holds the checkpoint back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stuck {
    /// The stream.
    pub stream: String,
    /// The shard.
    pub shard: String,
    /// The record's sequence number.
    pub sequence: SequenceNumber,
    /// Failed handler attempts so far.
    pub attempts: u32,
    /// Entries held behind it (itself included).
    pub window: u64,
    /// Its partition key, once it failed.
    pub partition_key: Option<String>,
    /// When its first attempt failed (this host's wall clock).
    pub since: Option<SystemTime>,
    /// How long it has been failing, from its first failed attempt.
    pub failing_for: Option<Duration>,
}

#[derive(Debug, Default)]
struct Window {
    /// Ordinal of `entries[0]`.
    base: u64,
    /// Deliveries from `base` on, settled or not; the front is never settled.
    entries: VecDeque<Entry>,
    /// Counts and offer, kept under the same lock so one settle is one lock.
    progress: Progress,
    /// Payload bytes of the deliveries settled so far.
    bytes: u64,
}

/// The settlement of one shard's deliveries; shared by its reader and its deliveries.
#[derive(Debug)]
pub struct ShardSettlement {
    stream: Arc<str>,
    shard: Arc<str>,
    window: Mutex<Window>,
    /// Tasks waiting in [`wait_until`](Self::wait_until); settles notify only when some wait.
    waiters: AtomicUsize,
    changed: Notify,
    revoked: AtomicBool,
    /// The lease was lost (not handed over or released): running attempts are cancelled.
    lost: AtomicBool,
    /// Handler attempts running now on this shard's deliveries.
    running: AtomicUsize,
    /// Tasks waiting in [`idle`](Self::idle): an attempt's end notifies only when some wait.
    idle_waiters: AtomicUsize,
    /// Handler time spent on this shard's records, in nanoseconds (estimated: see
    /// [`busy`](Self::busy)).
    busy_nanos: AtomicU64,
    /// The shard's metric handles (nothing without the `metrics` feature).
    metrics: crate::metrics::ShardMetrics,
    /// The shard's last turn in each lane of the channel it is fed into (see `fair_lane`),
    /// shared by every feed of this settlement so that its records keep their order.
    turns: std::sync::OnceLock<Arc<[std::sync::atomic::AtomicU64]>>,
}

/// Counts one handler attempt as running on its shard while it lives.
#[derive(Debug)]
pub(crate) struct Running(Arc<ShardSettlement>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.attempt_ended();
    }
}

/// Counts one waiter (of `wait_until` or `idle`) while it lives, so that the wakers are only
/// notified when someone waits, and a dropped wait stops counting.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// As [`Running`], borrowing the settlement: for an attempt that lives within its delivery's
/// borrow (no reference count touched per record).
#[derive(Debug)]
pub(crate) struct RunningRef<'a>(&'a ShardSettlement);

impl Drop for RunningRef<'_> {
    fn drop(&mut self) {
        self.0.attempt_ended();
    }
}

impl ShardSettlement {
    /// A shard with nothing delivered yet.
    pub fn new(stream: impl Into<Arc<str>>, shard: impl Into<Arc<str>>) -> Arc<Self> {
        let (stream, shard): (Arc<str>, Arc<str>) = (stream.into(), shard.into());
        Arc::new(Self {
            metrics: crate::metrics::ShardMetrics::new(&stream, &shard),
            stream,
            shard,
            window: Mutex::default(),
            waiters: AtomicUsize::new(0),
            changed: Notify::new(),
            revoked: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            idle_waiters: AtomicUsize::new(0),
            busy_nanos: AtomicU64::new(0),
            turns: std::sync::OnceLock::new(),
        })
    }

    /// The stream name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The shard id.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        // Every critical section leaves the window consistent before it can panic.
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.changed.notify_waiters();
        }
    }

    /// Numbers the next delivery of this shard and returns its ordinal.
    #[cfg(test)]
    pub(crate) fn register(&self, sequence: SequenceNumber) -> u64 {
        self.register_with(sequence, None)
    }

    /// Numbers the next delivery of this shard, which arrived in Kinesis at `arrival`, and
    /// returns its ordinal.
    pub(crate) fn register_with(
        &self,
        sequence: SequenceNumber,
        arrival: Option<SystemTime>,
    ) -> u64 {
        let mut window = self.window();
        let ordinal = window.base + window.entries.len() as u64;
        window.entries.push_back(Entry {
            sequence,
            settled: false,
            attempts: 0,
            arrival,
            failing: None,
        });
        window.progress.delivered += 1;
        window.progress.window = window.entries.len() as u64;
        drop(window);
        self.changed();
        ordinal
    }

    /// Takes back the number of a record that never reached the channel. Only the last number
    /// given can be taken back (a shard has one sender); any other stays in the window,
    /// holding the checkpoint back rather than letting it pass a record never delivered.
    pub(crate) fn unregister(&self, ordinal: u64) {
        let mut window = self.window();
        if window.entries.is_empty() || window.base + window.entries.len() as u64 != ordinal + 1 {
            return;
        }
        window.entries.pop_back();
        window.progress.delivered -= 1;
        window.progress.window = window.entries.len() as u64;
        drop(window);
        self.changed();
    }

    /// The shard's metric handles.
    pub(crate) fn metrics(&self) -> &crate::metrics::ShardMetrics {
        &self.metrics
    }

    /// Marks `ordinal` settled (idempotent) and advances the prefix. True when it was not
    /// settled before.
    #[cfg(test)]
    pub(crate) fn settle(&self, ordinal: u64) -> bool {
        self.settle_with(ordinal, 0)
    }

    /// Marks `ordinal` settled (idempotent), counting `bytes` of payload as settled, and
    /// advances the prefix. True when it was not settled before.
    pub(crate) fn settle_with(&self, ordinal: u64, bytes: usize) -> bool {
        let mut window = self.window();
        let Some(index) = ordinal.checked_sub(window.base) else {
            return false; // settled and already behind the prefix
        };
        let Some(entry) = window.entries.get_mut(index as usize) else {
            return false; // not an ordinal of this shard
        };
        if entry.settled {
            return false;
        }
        entry.settled = true;
        window.progress.settled += 1;
        window.bytes += bytes as u64;
        let mut advanced = None;
        while window.entries.front().is_some_and(|e| e.settled) {
            advanced = window.entries.pop_front().map(|e| e.sequence);
            window.base += 1;
        }
        if advanced.is_some() {
            window.progress.checkpoint = advanced;
        }
        window.progress.window = window.entries.len() as u64;
        drop(window);
        self.changed();
        true
    }

    /// Payload bytes of the deliveries settled so far (the `DataBytesProcessed` metric).
    pub fn settled_bytes(&self) -> u64 {
        self.window().bytes
    }

    /// Counts a failed handler attempt of `ordinal`, whose partition key is `partition_key`.
    pub(crate) fn attempted(&self, ordinal: u64, partition_key: &str) {
        let mut window = self.window();
        let Some(index) = ordinal.checked_sub(window.base) else {
            return;
        };
        if let Some(entry) = window.entries.get_mut(index as usize) {
            entry.attempts = entry.attempts.saturating_add(1);
            entry.failing.get_or_insert_with(|| {
                Box::new(Failing {
                    partition_key: partition_key.into(),
                    since: SystemTime::now(),
                    since_instant: tokio::time::Instant::now(),
                })
            });
        }
    }

    fn stuck_of(&self, entry: &Entry, window: u64) -> Stuck {
        let failing = entry.failing.as_deref();
        Stuck {
            stream: self.stream.to_string(),
            shard: self.shard.to_string(),
            sequence: entry.sequence.clone(),
            attempts: entry.attempts,
            window,
            partition_key: failing.map(|f| f.partition_key.to_string()),
            since: failing.map(|f| f.since),
            failing_for: failing.map(|f| f.since_instant.elapsed()),
        }
    }

    /// The unsettled delivery at the head of the window, if any.
    pub fn stuck(&self) -> Option<Stuck> {
        let window = self.window();
        let head = window.entries.front()?;
        Some(self.stuck_of(head, window.entries.len() as u64))
    }

    /// Every unsettled delivery that failed at least once, in the shard's order (a scan of the
    /// window: for reports, not for every record).
    pub fn failing(&self) -> Vec<Stuck> {
        self.failing_up_to(usize::MAX)
    }

    /// The oldest unsettled delivery that failed at least once, if any (a scan of the window
    /// up to it: for stats, not for every record).
    pub fn first_failing(&self) -> Option<Stuck> {
        self.failing_up_to(1).pop()
    }

    /// Up to `most` unsettled deliveries that failed at least once, oldest first; each one's
    /// `window` counts the entries from it on.
    fn failing_up_to(&self, most: usize) -> Vec<Stuck> {
        let window = self.window();
        let len = window.entries.len() as u64;
        window
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.settled && e.attempts > 0)
            .take(most)
            .map(|(i, e)| self.stuck_of(e, len - i as u64))
            .collect()
    }

    /// When the oldest record read and not settled arrived in Kinesis (the head of the
    /// window), if any is unsettled and its source gave an arrival time.
    pub fn oldest_unsettled_arrival(&self) -> Option<SystemTime> {
        self.window().entries.front().and_then(|e| e.arrival)
    }

    /// Waits until the window holds fewer than `limit` entries.
    pub async fn wait_for_room(&self, limit: usize) {
        let limit = limit.max(1) as u64;
        self.wait_until(|p| p.window < limit).await;
    }

    /// The current counts and checkpoint offer.
    pub fn progress(&self) -> Progress {
        self.window().progress.clone()
    }

    /// Entries held in the settlement window now ([`Progress::window`], without copying the
    /// rest of the progress).
    pub fn window_len(&self) -> u64 {
        self.window().progress.window
    }

    /// The shard's turn cells for a channel of `lanes` lanes: the same cells for every feed
    /// of this settlement into it (a settlement fed into channels of two lane counts gets
    /// fresh cells for the second, which only loses the turn order across those channels).
    pub(crate) fn turns(&self, lanes: usize) -> Arc<[std::sync::atomic::AtomicU64]> {
        let fresh = || {
            (0..lanes)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect::<Arc<[_]>>()
        };
        let cells = self.turns.get_or_init(fresh);
        if cells.len() == lanes {
            cells.clone()
        } else {
            fresh()
        }
    }

    /// Waits until `condition` holds for the shard's progress.
    pub async fn wait_until(&self, condition: impl Fn(&Progress) -> bool) {
        loop {
            // Counted while waiting, also when the wait is dropped (a timeout).
            let _waiting = Waiting::on(&self.waiters);
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if condition(&self.window().progress) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until every delivery produced so far has settled.
    pub async fn all_settled(&self) {
        self.wait_until(|p| p.in_flight() == 0).await;
    }

    /// Counts a handler attempt as running until the guard drops.
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }

    /// As [`running`](Self::running), with a guard that borrows the settlement.
    pub(crate) fn running_ref(&self) -> RunningRef<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        RunningRef(self)
    }

    fn attempt_ended(&self) {
        // SeqCst on both sides: either `idle` sees no attempt running, or this sees it waiting.
        if self.running.fetch_sub(1, Ordering::SeqCst) == 1
            && self.idle_waiters.load(Ordering::SeqCst) > 0
        {
            self.changed.notify_waiters();
        }
    }

    /// Handler time spent on this shard's records so far: the shard's load as the service
    /// feels it (the `kinesis-fleet` keeper smooths it into the load its row publishes).
    ///
    /// An estimate without bias, cheap enough for every record: the first poll of one handler
    /// call in [`BUSY_SAMPLE_EVERY`](crate::BUSY_SAMPLE_EVERY) is timed and counts that many
    /// times over, and a call that waits (its first poll is pending) is timed from then on to
    /// its end. A batch handler's call is timed whole and shared evenly among its records. A
    /// stream consumer's time with a delivery is not known and counts nothing.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed))
    }

    /// Adds `took` of handler time to this shard's.
    pub(crate) fn add_busy(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.busy_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Waits until no handler attempt runs on this shard's deliveries. After
    /// [`revoke`](Self::revoke) no new attempt starts, so a shard handed over or released
    /// after this never has handlers running in two instances at once.
    pub async fn idle(&self) {
        loop {
            let _waiting = Waiting::on(&self.idle_waiters);
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Marks the shard's lease lost (or released): its deliveries not yet handled are dropped.
    ///
    /// SeqCst, as the attempt counter: a handler counts itself running and then checks this,
    /// the keeper sets this and then checks the counter; one of the two sees the other.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Marks the shard's lease lost: as [`revoke`](Self::revoke), and handler attempts running
    /// on its deliveries are cancelled (their futures dropped, the records left unsettled), so
    /// they never run beside the next owner's.
    pub fn abandon(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.revoke();
    }

    /// True once [`abandon`](Self::abandon) was called.
    pub fn is_abandoned(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Resolves once the shard is [`abandon`](Self::abandon)ed.
    pub async fn abandoned(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_abandoned() {
                return;
            }
            notified.await;
        }
    }

    /// True once [`revoke`](Self::revoke) was called.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }
}

/// The checkpoint writer's memory: what was written, so only newer offers are written.
#[derive(Debug, Clone, Default)]
pub struct CheckpointCursor {
    written: Option<SequenceNumber>,
}

impl CheckpointCursor {
    /// A cursor that starts from the checkpoint stored when the lease was taken, if it was a
    /// sequence number.
    pub fn new(stored: Option<&Checkpoint>) -> Self {
        let written = match stored {
            Some(Checkpoint::Sequence(seq)) => Some(seq.clone()),
            _ => None,
        };
        Self { written }
    }

    /// The checkpoint to write now, if the settled prefix moved past what was written.
    pub fn due(&self, settlement: &ShardSettlement) -> Option<Checkpoint> {
        let offered = settlement.progress().checkpoint?;
        match &self.written {
            Some(written) if offered <= *written => None,
            _ => Some(Checkpoint::Sequence(offered)),
        }
    }

    /// Records that `checkpoint` was stored; an older one than already recorded is ignored,
    /// so the cursor never goes back.
    pub fn mark_written(&mut self, checkpoint: &Checkpoint) {
        if let Checkpoint::Sequence(seq) = checkpoint {
            if self.written.as_ref().is_none_or(|w| seq > w) {
                self.written = Some(seq.clone());
            }
        }
    }

    /// The last sequence number written.
    pub fn written(&self) -> Option<&SequenceNumber> {
        self.written.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seq(n: u64) -> SequenceNumber {
        // Zero-padded like Kinesis' fixed-width numbers, so string order is numeric order too.
        SequenceNumber::new(format!("{:020}", 1_000 + n * 7), None).expect("valid")
    }

    /// One step of a scenario: ack the next record of an ack order, or write a checkpoint.
    #[derive(Debug, Clone)]
    enum Step {
        Ack(usize),
        Write(usize),
    }

    fn scenario() -> impl Strategy<Value = (Vec<usize>, Vec<Step>)> {
        prop::collection::vec(1usize..25, 1..4).prop_flat_map(|sizes| {
            let total: usize = sizes.iter().sum();
            let shards = sizes.len();
            let acks = Just((0..total).collect::<Vec<_>>()).prop_shuffle();
            let writes = prop::collection::vec((0..=total, 0..shards), 0..12);
            (Just(sizes), acks, writes).prop_map(|(sizes, acks, writes)| {
                let mut steps: Vec<Step> = acks.into_iter().map(Step::Ack).collect();
                for (at, shard) in writes {
                    steps.insert(at.min(steps.len()), Step::Write(shard));
                }
                (sizes, steps)
            })
        })
    }

    /// Each failing record's `window` counts the entries from it on (itself included), not the
    /// whole window; the first failing one is found behind a head still on its first attempt.
    #[test]
    fn a_failing_record_counts_what_is_held_behind_it() {
        let s = ShardSettlement::new("s", "shard-0");
        let ordinals: Vec<u64> = (0..6).map(|n| s.register(seq(n))).collect();
        s.attempted(ordinals[2], "k");
        s.attempted(ordinals[4], "j");
        let failing = s.failing();
        let seen: Vec<(u64, Option<&str>)> = failing
            .iter()
            .map(|f| (f.window, f.partition_key.as_deref()))
            .collect();
        assert_eq!(seen, vec![(4, Some("k")), (2, Some("j"))]);
        let head = s.stuck().expect("a head");
        assert_eq!((head.attempts, head.window), (0, 6));
        let first = s.first_failing().expect("a failing record");
        assert_eq!((first.sequence, first.window), (seq(2), 4));
        for &ordinal in &ordinals[..3] {
            s.settle(ordinal);
        }
        assert_eq!(s.first_failing().map(|f| f.sequence), Some(seq(4)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        /// Whatever the ack order, each shard offers exactly its largest settled prefix, and
        /// the checkpoints written through a cursor never go backwards.
        #[test]
        fn offer_is_the_settled_prefix((sizes, steps) in scenario()) {
            let shards: Vec<_> = (0..sizes.len())
                .map(|i| ShardSettlement::new("s", format!("shard-{i}")))
                .collect();
            // Global record index -> (shard, ordinal); production interleaves shards.
            let mut records = Vec::new();
            let mut produced = vec![0usize; sizes.len()];
            let mut left: usize = sizes.iter().sum();
            let mut turn = 0;
            while left > 0 {
                let shard = turn % sizes.len();
                turn += 1;
                if produced[shard] < sizes[shard] {
                    let ordinal = shards[shard].register(seq(produced[shard] as u64));
                    prop_assert_eq!(ordinal, produced[shard] as u64);
                    records.push((shard, produced[shard]));
                    produced[shard] += 1;
                    left -= 1;
                }
            }
            let mut settled: Vec<Vec<bool>> = sizes.iter().map(|&n| vec![false; n]).collect();
            let mut cursors = vec![CheckpointCursor::new(None); sizes.len()];
            let mut stored: Vec<Option<SequenceNumber>> = vec![None; sizes.len()];
            for step in steps {
                match step {
                    Step::Ack(i) => {
                        let (shard, ordinal) = records[i];
                        shards[shard].settle(ordinal as u64);
                        shards[shard].settle(ordinal as u64); // idempotent
                        settled[shard][ordinal] = true;
                        let prefix = settled[shard].iter().take_while(|s| **s).count();
                        let expected = prefix.checked_sub(1).map(|last| seq(last as u64));
                        let progress = shards[shard].progress();
                        prop_assert_eq!(progress.checkpoint, expected);
                        let acked = settled[shard].iter().filter(|s| **s).count() as u64;
                        prop_assert_eq!(progress.settled, acked);
                    }
                    Step::Write(shard) => {
                        if let Some(cp) = cursors[shard].due(&shards[shard]) {
                            let Checkpoint::Sequence(new) = &cp else { unreachable!() };
                            if let Some(old) = &stored[shard] {
                                prop_assert!(new > old, "stored checkpoint went back: {old} -> {new}");
                            }
                            stored[shard] = Some(new.clone());
                            cursors[shard].mark_written(&cp);
                        }
                    }
                }
            }
            for (shard, settlement) in shards.iter().enumerate() {
                prop_assert_eq!(settlement.progress().in_flight(), 0);
                prop_assert_eq!(settlement.progress().checkpoint, Some(seq(sizes[shard] as u64 - 1)));
            }
        }
    }

    #[test]
    fn window_reports_its_stuck_head_and_shrinks_when_it_settles() {
        let s = ShardSettlement::new("s", "a");
        let head = s.register(seq(0));
        for i in 1..5 {
            let o = s.register(seq(i));
            s.settle(o);
        }
        s.attempted(head, "k");
        s.attempted(head, "k");
        let stuck = s.stuck().expect("a stuck head");
        assert_eq!(
            (stuck.sequence, stuck.attempts, stuck.window),
            (seq(0), 2, 5)
        );
        assert_eq!(s.progress().window, 5);
        s.settle(head);
        assert_eq!(s.progress().window, 0);
        assert!(s.stuck().is_none());
    }

    #[tokio::test]
    async fn wait_for_room_blocks_while_the_window_is_full() {
        let s = ShardSettlement::new("s", "a");
        let head = s.register(seq(0));
        let o = s.register(seq(1));
        s.settle(o);
        let waiting = {
            let s = s.clone();
            tokio::spawn(async move { s.wait_for_room(2).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "two entries held, limit two");
        s.settle(head);
        waiting.await.unwrap();
    }

    #[test]
    fn cursor_ignores_older_marks() {
        let mut cursor = CheckpointCursor::new(Some(&Checkpoint::Sequence(seq(5))));
        cursor.mark_written(&Checkpoint::Sequence(seq(3)));
        assert_eq!(cursor.written(), Some(&seq(5)));
        let s = ShardSettlement::new("s", "a");
        for i in 0..=5 {
            let o = s.register(seq(i));
            s.settle(o);
        }
        assert_eq!(
            cursor.due(&s),
            None,
            "offer equal to the written checkpoint is not due"
        );
        let o = s.register(seq(6));
        s.settle(o);
        assert_eq!(cursor.due(&s), Some(Checkpoint::Sequence(seq(6))));
    }
}
