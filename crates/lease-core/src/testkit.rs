//! The conformance kit: the lease rules as executable checks any [`LeaseStore`] runs.
//!
//! A store author builds a [`Harness`] (the store, the [`ManualClock`] the store reads, a
//! namespace for stream names) and runs every check, most simply with
//! [`conformance_tests!`](crate::conformance_tests), which expands to one `#[tokio::test]` per
//! check so a failure names the rule it broke. Checks panic with a message on failure, like
//! `assert!`. The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
//!
//! ```
//! use std::sync::Arc;
//! use kinesis_lease_core::testkit::Harness;
//! use kinesis_lease_core::{LeaseStore, ManualClock};
//!
//! /// Builds the harness for your store, opened on the clock the kit will move.
//! fn harness(open: impl Fn(ManualClock) -> Arc<dyn LeaseStore>) -> Harness {
//!     let clock = ManualClock::new(1_700_000_000_000);
//!     Harness::new(open(clock.clone()), clock, "kit")
//! }
//! ```
//!
//! and then, in a test file: `kinesis_lease_core::conformance_tests!(harness(|clock| ..));`
//! (see `crates/lease-memory/tests/lease_conformance.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Checkpoint, Lease, LeaseKey, LeaseStore, ManualClock, Outcome, SequenceNumber, Take};

/// What the checks run against.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LeaseStore>,
    /// The clock the store reads; checks advance it to cross expiries.
    pub clock: ManualClock,
    /// Prefix of every stream name a check uses, so checks sharing a table do not collide.
    pub namespace: String,
    /// Rounds of the concurrent-takers check (default 1,000).
    pub concurrent_rounds: usize,
    /// Time budget of the concurrent-takers check: it stops after this many seconds even if
    /// rounds remain, having run at least one round (default: no limit).
    pub concurrent_budget: Option<Duration>,
}

/// The lease duration every check uses.
pub const TTL: Duration = Duration::from_secs(10);

impl Harness {
    /// A harness with 1,000 concurrent rounds and no time budget.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        clock: ManualClock,
        namespace: impl Into<String>,
    ) -> Self {
        Self {
            store,
            clock,
            namespace: namespace.into(),
            concurrent_rounds: 1_000,
            concurrent_budget: None,
        }
    }

    /// The key of `shard` in this harness's stream `name`.
    pub fn key(&self, name: &str, shard: &str) -> LeaseKey {
        LeaseKey::new(format!("{}-{name}", self.namespace), shard).expect("valid kit key")
    }

    async fn take(&self, key: &LeaseKey, owner: &str) -> Outcome {
        self.store
            .take(key, owner, Take::new(TTL))
            .await
            .unwrap_or_else(|e| panic!("take {key} by {owner} failed: {e}"))
    }

    async fn read(&self, key: &LeaseKey) -> Lease {
        self.store
            .read(key)
            .await
            .unwrap_or_else(|e| panic!("read {key} failed: {e}"))
            .unwrap_or_else(|| panic!("row {key} missing"))
    }
}

fn written(outcome: Outcome, what: &str) -> Lease {
    match outcome {
        Outcome::Written(lease) => lease,
        Outcome::Lost(lost) => panic!("{what}: expected the write to land, lost to {lost:?}"),
    }
}

fn lost(outcome: Outcome, what: &str) -> crate::Lost {
    match outcome {
        Outcome::Lost(lost) => lost,
        Outcome::Written(lease) => {
            panic!("{what}: expected the write to be refused, wrote {lease:?}")
        }
    }
}

fn seq(n: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, None).expect("valid kit sequence"))
}

/// A free (missing or ownerless) row is taken; the row names the owner and expires at now + TTL.
pub async fn take_free_row(h: &Harness) {
    let key = h.key("free", "shardId-000000000000");
    let lease = written(h.take(&key, "a").await, "take of a missing row");
    assert_eq!(lease.owner.as_deref(), Some("a"));
    assert_eq!(
        lease.expiry_ms,
        h.clock.now_ms_for_kit() + 10_000,
        "expiry is now + ttl"
    );
    let key2 = h.key("free", "shardId-000000000001");
    assert!(h.store.create(&key2, &[]).await.expect("create"));
    written(h.take(&key2, "a").await, "take of a created, ownerless row");
    assert_eq!(h.read(&key2).await.owner.as_deref(), Some("a"));
}

/// An owner may take its own row again (a restart with a stable owner id).
pub async fn retake_own_row(h: &Harness) {
    let key = h.key("retake", "shardId-000000000000");
    written(h.take(&key, "a").await, "first take");
    h.clock.advance(Duration::from_secs(5));
    let lease = written(h.take(&key, "a").await, "retake of an own, live row");
    assert_eq!(lease.expiry_ms, h.clock.now_ms_for_kit() + 10_000);
}

/// A live row held by another owner is not taken, and the refusal names the holder.
pub async fn take_of_live_foreign_row_refused(h: &Harness) {
    let key = h.key("live", "shardId-000000000000");
    let held = written(h.take(&key, "a").await, "take by a");
    h.clock.advance(TTL - Duration::from_millis(1));
    let refused = lost(h.take(&key, "b").await, "take by b of a's live row");
    assert_eq!(refused.holder.as_deref(), Some("a"));
    assert_eq!(refused.counter, held.counter);
    assert_eq!(h.read(&key).await.owner.as_deref(), Some("a"));
}

/// Once a row's expiry has passed by the store's clock, another owner takes it.
pub async fn take_of_expired_row_succeeds(h: &Harness) {
    let key = h.key("expired", "shardId-000000000000");
    written(h.take(&key, "a").await, "take by a");
    h.clock.advance(TTL);
    let lease = written(h.take(&key, "b").await, "take of an expired row");
    assert_eq!(lease.owner.as_deref(), Some("b"));
    lost(
        h.store.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew by the lapsed owner after the take",
    );
}

/// Renew, checkpoint and release by anyone but the holder are refused and change nothing.
pub async fn non_owner_writes_refused(h: &Harness) {
    let key = h.key("foreign", "shardId-000000000000");
    let held = written(h.take(&key, "a").await, "take by a");
    let cp = seq("100");
    let s = &h.store;
    let r = lost(
        s.renew(&key, "b", TTL, None).await.expect("renew"),
        "renew by b",
    );
    assert_eq!((r.holder.as_deref(), r.counter), (Some("a"), held.counter));
    lost(
        s.renew(&key, "b", TTL, Some(&cp)).await.expect("renew"),
        "renew+checkpoint by b",
    );
    lost(
        s.checkpoint(&key, "b", &cp).await.expect("checkpoint"),
        "checkpoint by b",
    );
    lost(
        s.release(&key, "b", None).await.expect("release"),
        "release by b",
    );
    lost(
        s.release(&key, "b", Some(&cp)).await.expect("release"),
        "release+checkpoint by b",
    );
    let missing = h.key("foreign", "shardId-000000000009");
    let r = lost(
        s.renew(&missing, "a", TTL, None).await.expect("renew"),
        "renew of a missing row",
    );
    assert_eq!((r.holder, r.counter), (None, 0));
    lost(
        s.checkpoint(&missing, "a", &cp).await.expect("checkpoint"),
        "checkpoint of a missing row",
    );
    assert!(
        s.read(&missing).await.expect("read").is_none(),
        "a refused write creates no row"
    );
    assert_eq!(
        h.read(&key).await,
        held,
        "refused writes leave the row as it was"
    );
}

/// After a release (with a final checkpoint) another owner takes the row at once and sees it.
pub async fn release_then_take_by_another(h: &Harness) {
    let key = h.key("release", "shardId-000000000000");
    written(h.take(&key, "a").await, "take by a");
    let released = written(
        h.store
            .release(&key, "a", Some(&seq("42")))
            .await
            .expect("release"),
        "release by a",
    );
    assert_eq!(released.owner, None);
    let lease = written(h.take(&key, "b").await, "take by b right after the release");
    assert_eq!(lease.owner.as_deref(), Some("b"));
    assert_eq!(
        lease.checkpoint,
        Some(seq("42")),
        "a take keeps the checkpoint"
    );
}

/// Every write that lands bumps the counter by one; a refused one leaves it.
pub async fn counter_increases_on_every_write(h: &Harness) {
    let key = h.key("counter", "shardId-000000000000");
    let s = &h.store;
    let mut last = written(h.take(&key, "a").await, "take").counter;
    assert!(last >= 1);
    let steps: Vec<Outcome> = vec![
        s.renew(&key, "a", TTL, None).await.expect("renew"),
        s.renew(&key, "a", TTL, Some(&seq("1")))
            .await
            .expect("renew"),
        s.checkpoint(&key, "a", &seq("2"))
            .await
            .expect("checkpoint"),
        s.take(&key, "a", Take::new(TTL)).await.expect("take"),
        s.release(&key, "a", None).await.expect("release"),
        s.take(&key, "b", Take::new(TTL)).await.expect("take"),
        s.release(&key, "b", Some(&Checkpoint::ShardEnd))
            .await
            .expect("release"),
    ];
    for (i, step) in steps.into_iter().enumerate() {
        let counter = written(step, &format!("write #{i}")).counter;
        assert_eq!(counter, last + 1, "write #{i} bumps the counter by one");
        last = counter;
    }
    lost(
        s.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew after release",
    );
    assert_eq!(
        h.read(&key).await.counter,
        last,
        "a refused write does not bump"
    );
}

/// A take fenced on a stale counter is refused; fenced on the current one it lands, even over a
/// live foreign row (the caller judged it expired by observation).
pub async fn fenced_take_with_stale_counter_refused(h: &Harness) {
    let key = h.key("fence", "shardId-000000000000");
    let seen = written(h.take(&key, "a").await, "take by a").counter;
    written(
        h.store.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew",
    );
    let refused = lost(
        h.store
            .take(&key, "b", Take::fenced(TTL, seen))
            .await
            .expect("take"),
        "take fenced on a stale counter",
    );
    assert_eq!(refused.counter, seen + 1);
    h.clock.advance(TTL * 2);
    lost(
        h.store
            .take(&key, "b", Take::fenced(TTL, seen))
            .await
            .expect("take"),
        "a stale fence is refused even when the row has expired",
    );
    let lease = written(
        h.store
            .take(&key, "b", Take::fenced(TTL, seen + 1))
            .await
            .expect("take"),
        "take fenced on the current counter",
    );
    assert_eq!(lease.owner.as_deref(), Some("b"));
    let fresh = h.key("fence", "shardId-000000000001");
    lost(
        h.store
            .take(&fresh, "b", Take::fenced(TTL, 5))
            .await
            .expect("take"),
        "a fence other than 0 on a missing row",
    );
    written(
        h.store
            .take(&fresh, "b", Take::fenced(TTL, 0))
            .await
            .expect("take"),
        "a fence of 0 on a missing row",
    );
}

/// The same shard id in two streams is two rows.
pub async fn streams_are_independent(h: &Harness) {
    let (k1, k2) = (
        h.key("one", "shardId-000000000000"),
        h.key("two", "shardId-000000000000"),
    );
    written(h.take(&k1, "a").await, "take in stream one");
    written(
        h.take(&k2, "b").await,
        "take of the same shard id in stream two",
    );
    written(
        h.store
            .checkpoint(&k1, "a", &seq("7"))
            .await
            .expect("checkpoint"),
        "checkpoint",
    );
    let (r1, r2) = (h.read(&k1).await, h.read(&k2).await);
    assert_eq!(
        (r1.owner.as_deref(), r2.owner.as_deref()),
        (Some("a"), Some("b"))
    );
    assert_eq!((r1.checkpoint, r2.checkpoint), (Some(seq("7")), None));
}

/// `list` returns exactly the rows of one stream.
pub async fn list_returns_one_stream(h: &Harness) {
    let mine = h.key("list", "x").stream().to_owned();
    let others = [h.key("list2", "x"), h.key("lis", "x"), h.key("list-b", "x")];
    for other in &others {
        h.store.create(other, &[]).await.expect("create");
    }
    let mut expected = HashSet::new();
    for i in 0..3 {
        let key = h.key("list", &format!("shardId-00000000000{i}"));
        h.store
            .create(&key, &["parent".to_owned()])
            .await
            .expect("create");
        expected.insert(key);
    }
    let rows = h.store.list(&mine).await.expect("list");
    let got: HashSet<_> = rows.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        got, expected,
        "list({mine}) returns its rows and no other stream's"
    );
    assert!(rows.iter().all(|r| r.parents == ["parent".to_owned()]));
    assert!(h
        .store
        .list(&format!("{}-none", h.namespace))
        .await
        .expect("list")
        .is_empty());
}

/// `create` creates once, keeps parents, and never touches an existing row.
pub async fn create_is_idempotent(h: &Harness) {
    let key = h.key("create", "shardId-000000000002");
    let parents = vec![
        "shardId-000000000000".to_owned(),
        "shardId-000000000001".to_owned(),
    ];
    assert!(h.store.create(&key, &parents).await.expect("create"));
    let row = h.read(&key).await;
    assert_eq!((row.owner.clone(), row.checkpoint.clone()), (None, None));
    let mut got = row.parents.clone();
    got.sort();
    assert_eq!(got, parents);
    written(h.take(&key, "a").await, "take");
    assert!(!h.store.create(&key, &[]).await.expect("create again"));
    assert_eq!(h.read(&key).await.owner.as_deref(), Some("a"));
}

/// Checkpoints of every kind come back as written, through checkpoint, renew and release.
pub async fn checkpoints_round_trip(h: &Harness) {
    let key = h.key("cp", "shardId-000000000000");
    written(h.take(&key, "a").await, "take");
    let big = "49590338271490256608559692538361571095921575989136588898";
    let all = [
        Checkpoint::TrimHorizon,
        Checkpoint::Latest,
        Checkpoint::AtTimestamp(1_700_000_000_123),
        Checkpoint::Sequence(SequenceNumber::new(big, Some(3)).expect("seq")),
        Checkpoint::Sequence(SequenceNumber::new(big, None).expect("seq")),
        Checkpoint::ShardEnd,
    ];
    for cp in &all {
        written(
            h.store.checkpoint(&key, "a", cp).await.expect("checkpoint"),
            "checkpoint",
        );
        assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(cp));
    }
    written(
        h.store
            .renew(&key, "a", TTL, Some(&all[3]))
            .await
            .expect("renew"),
        "renew",
    );
    assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(&all[3]));
    written(
        h.store.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew",
    );
    assert_eq!(
        h.read(&key).await.checkpoint.as_ref(),
        Some(&all[3]),
        "renew keeps it"
    );
}

/// A lapsed owner cannot checkpoint once another owner took the row.
pub async fn lapsed_owner_checkpoint_refused(h: &Harness) {
    let key = h.key("lapsed", "shardId-000000000000");
    written(h.take(&key, "a").await, "take by a");
    written(
        h.store
            .checkpoint(&key, "a", &seq("10"))
            .await
            .expect("checkpoint"),
        "checkpoint",
    );
    h.clock.advance(TTL + Duration::from_secs(1));
    written(h.take(&key, "b").await, "take by b after a lapsed");
    let refused = lost(
        h.store
            .checkpoint(&key, "a", &seq("20"))
            .await
            .expect("checkpoint"),
        "checkpoint by the lapsed owner",
    );
    assert_eq!(refused.holder.as_deref(), Some("b"));
    assert_eq!(h.read(&key).await.checkpoint, Some(seq("10")));
}

/// A request marks a foreign row wanted; the owner's renewal shows the mark; the hand-over
/// moves the row to the asker with the final checkpoint in one write.
pub async fn request_then_hand_over_moves_the_row(h: &Harness) {
    let key = h.key("handover", "shardId-000000000000");
    let taken = written(h.take(&key, "a").await, "take by a");
    let marked = written(
        h.store
            .request(&key, "b", taken.counter)
            .await
            .expect("request"),
        "request by b",
    );
    assert_eq!(marked.wanted_by.as_deref(), Some("b"));
    assert_eq!(
        (marked.owner.as_deref(), marked.counter),
        (Some("a"), taken.counter + 1)
    );
    let renewed = written(
        h.store.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew",
    );
    assert_eq!(
        renewed.wanted_by.as_deref(),
        Some("b"),
        "the owner sees the mark"
    );
    h.clock.advance(Duration::from_secs(1));
    let moved = written(
        h.store
            .hand_over(&key, "a", "b", TTL, Some(&seq("77")))
            .await
            .expect("hand over"),
        "hand over to b",
    );
    assert_eq!(moved.owner.as_deref(), Some("b"));
    assert_eq!(moved.wanted_by, None);
    assert_eq!(moved.checkpoint, Some(seq("77")));
    assert_eq!(moved.expiry_ms, h.clock.now_ms_for_kit() + 10_000);
    assert_eq!(moved.counter, renewed.counter + 1);
    lost(
        h.store.renew(&key, "a", TTL, None).await.expect("renew"),
        "renew by the old owner",
    );
    written(
        h.store.renew(&key, "b", TTL, None).await.expect("renew"),
        "renew by the new owner",
    );
}

/// Requests are refused on stale counters, free, own, missing or already wanted rows; a
/// hand-over is refused to anyone but the asker and by anyone but the owner.
pub async fn request_and_hand_over_refusals(h: &Harness) {
    let key = h.key("refuse", "shardId-000000000000");
    let s = &h.store;
    assert!(s.create(&key, &[]).await.expect("create"));
    let free = h.read(&key).await;
    lost(
        s.request(&key, "b", free.counter).await.expect("request"),
        "request of a free row",
    );
    let taken = written(h.take(&key, "a").await, "take by a");
    lost(
        s.request(&key, "a", taken.counter).await.expect("request"),
        "request of an own row",
    );
    lost(
        s.request(&key, "b", taken.counter - 1)
            .await
            .expect("request"),
        "request on a stale counter",
    );
    let marked = written(
        s.request(&key, "b", taken.counter).await.expect("request"),
        "request",
    );
    lost(
        s.request(&key, "c", marked.counter).await.expect("request"),
        "second request",
    );
    lost(
        s.hand_over(&key, "a", "c", TTL, None)
            .await
            .expect("hand over"),
        "hand over to a non-asker",
    );
    lost(
        s.hand_over(&key, "b", "b", TTL, None)
            .await
            .expect("hand over"),
        "hand over by a non-owner",
    );
    let missing = h.key("refuse", "shardId-000000000009");
    lost(
        s.request(&missing, "b", 0).await.expect("request"),
        "request of a missing row",
    );
    assert_eq!(h.read(&key).await, marked, "refusals change nothing");
    // A take by the owner (or anyone) and a release clear the mark.
    let retaken = written(h.take(&key, "a").await, "retake");
    assert_eq!(retaken.wanted_by, None);
    written(
        s.request(&key, "b", retaken.counter)
            .await
            .expect("request"),
        "request again",
    );
    let released = written(
        s.release(&key, "a", None).await.expect("release"),
        "release",
    );
    assert_eq!(released.wanted_by, None);
}

/// Epochs start at 0, bump by one per call, and are per stream.
pub async fn epochs_bump_per_stream(h: &Harness) {
    let (one, two) = (h.key("epoch1", "x"), h.key("epoch2", "x"));
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 0);
    h.store.bump_epoch(one.stream()).await.expect("bump");
    h.store.bump_epoch(one.stream()).await.expect("bump");
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 2);
    assert_eq!(h.store.epoch(two.stream()).await.expect("epoch"), 0);
    h.store.create(&one, &[]).await.expect("create");
    let rows = h.store.list(one.stream()).await.expect("list");
    assert_eq!(rows.len(), 1, "epochs are not rows");
}

/// 32 takers race for one free row, round after round: exactly one wins each round.
pub async fn concurrent_takers_one_winner(h: &Harness) {
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < h.concurrent_rounds {
        if rounds > 0 && h.concurrent_budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let key = h.key("race", &format!("shardId-{rounds:012}"));
        let mut tasks = tokio::task::JoinSet::new();
        for taker in 0..32 {
            let (store, key) = (h.store.clone(), key.clone());
            tasks.spawn(async move {
                let owner = format!("taker-{taker}");
                let out = store.take(&key, &owner, Take::new(TTL)).await;
                (owner, out)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (owner, out) = joined.expect("taker task");
            if out
                .unwrap_or_else(|e| panic!("take by {owner} failed: {e}"))
                .is_written()
            {
                winners.push(owner);
            }
        }
        assert_eq!(winners.len(), 1, "round {rounds}: winners {winners:?}");
        assert_eq!(
            h.read(&key).await.owner.as_deref(),
            Some(winners[0].as_str())
        );
        rounds += 1;
    }
    eprintln!(
        "concurrent_takers_one_winner: {rounds} rounds of 32 takers in {:.1?}",
        started.elapsed()
    );
}

impl ManualClock {
    fn now_ms_for_kit(&self) -> u64 {
        crate::Clock::now_ms(self)
    }
}

/// Expands to one `#[tokio::test]` per conformance check, each building its harness with the
/// given expression (it may use `.await`).
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::__conformance_tests!(
            $harness;
            take_free_row,
            retake_own_row,
            take_of_live_foreign_row_refused,
            take_of_expired_row_succeeds,
            non_owner_writes_refused,
            release_then_take_by_another,
            counter_increases_on_every_write,
            fenced_take_with_stale_counter_refused,
            streams_are_independent,
            list_returns_one_stream,
            create_is_idempotent,
            checkpoints_round_trip,
            lapsed_owner_checkpoint_refused,
            concurrent_takers_one_winner,
            request_then_hand_over_moves_the_row,
            request_and_hand_over_refusals,
            epochs_bump_per_stream,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($harness:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let harness: $crate::testkit::Harness = $harness;
                $crate::testkit::$check(&harness).await;
            }
        )*
    };
}
