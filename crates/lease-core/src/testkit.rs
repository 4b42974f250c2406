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

pub use crate::outage::{Outage, OutageSwitch};

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{
    Checkpoint, Holder, Lease, LeaseKey, LeaseStore, Lost, ManualClock, Outcome, SequenceNumber,
    Take,
};

/// What the checks run against.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LeaseStore>,
    /// The clock the store reads; checks move it (forwards and backwards) to show that it only
    /// stamps expiries and never decides a write.
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

    /// The row's counter as a taker observes it (0 when the row does not exist).
    async fn observe(&self, key: &LeaseKey) -> u64 {
        self.store
            .read(key)
            .await
            .unwrap_or_else(|e| panic!("read {key} failed: {e}"))
            .map_or(0, |row| row.counter)
    }

    /// Takes the row for `holder`, fenced on the counter read just before: the take of a row
    /// the caller judged takeable.
    async fn take(&self, key: &LeaseKey, holder: &Holder) -> Outcome {
        let fence = self.observe(key).await;
        self.take_fenced(key, holder, fence).await
    }

    /// Takes the row for `holder`, fenced on `fence`.
    async fn take_fenced(&self, key: &LeaseKey, holder: &Holder, fence: u64) -> Outcome {
        self.take_with(key, holder, &Take::fenced(TTL, fence)).await
    }

    async fn take_with(&self, key: &LeaseKey, holder: &Holder, take: &Take) -> Outcome {
        self.store
            .take(key, holder, take)
            .await
            .unwrap_or_else(|e| panic!("take {key} by {holder:?} ({take:?}) failed: {e}"))
    }

    async fn renew(&self, key: &LeaseKey, holder: &Holder, cp: Option<&Checkpoint>) -> Outcome {
        self.store
            .renew(key, holder, TTL, cp)
            .await
            .unwrap_or_else(|e| panic!("renew {key} by {holder:?} failed: {e}"))
    }

    async fn checkpoint(&self, key: &LeaseKey, holder: &Holder, cp: &Checkpoint) -> Outcome {
        self.store
            .checkpoint(key, holder, cp)
            .await
            .unwrap_or_else(|e| panic!("checkpoint {key} by {holder:?} failed: {e}"))
    }

    async fn release(&self, key: &LeaseKey, holder: &Holder, cp: Option<&Checkpoint>) -> Outcome {
        self.store
            .release(key, holder, cp)
            .await
            .unwrap_or_else(|e| panic!("release {key} by {holder:?} failed: {e}"))
    }

    async fn request(&self, key: &LeaseKey, asker: &str, observed: u64) -> Outcome {
        self.store
            .request(key, asker, observed)
            .await
            .unwrap_or_else(|e| panic!("request {key} by {asker} failed: {e}"))
    }

    async fn hand_over(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        to: &str,
        cp: Option<&Checkpoint>,
    ) -> Outcome {
        self.store
            .hand_over(key, holder, to, TTL, cp)
            .await
            .unwrap_or_else(|e| panic!("hand over {key} by {holder:?} to {to} failed: {e}"))
    }

    async fn create(&self, row: &Lease) -> bool {
        self.store
            .create(row)
            .await
            .unwrap_or_else(|e| panic!("create {} failed: {e}", row.key))
    }

    async fn read(&self, key: &LeaseKey) -> Lease {
        self.store
            .read(key)
            .await
            .unwrap_or_else(|e| panic!("read {key} failed: {e}"))
            .unwrap_or_else(|| panic!("row {key} missing"))
    }

    fn now_ms(&self) -> u64 {
        crate::Clock::now_ms(&self.clock)
    }
}

fn holder(owner: &str, token: &str) -> Holder {
    Holder::new(owner, token)
}

fn written(outcome: Outcome, what: &str) -> Lease {
    match outcome {
        Outcome::Written(lease) => lease,
        Outcome::Lost(lost) => panic!("{what}: expected the write to land, lost to {lost:?}"),
    }
}

fn lost(outcome: Outcome, what: &str) -> Lost {
    match outcome {
        Outcome::Lost(lost) => lost,
        Outcome::Written(lease) => {
            panic!("{what}: expected the write to be refused, wrote {lease:?}")
        }
    }
}

/// Asserts the refusal names `holder` and `counter`.
fn lost_to(outcome: Outcome, what: &str, holder: Option<&str>, counter: u64) {
    let lost = lost(outcome, what);
    assert_eq!(
        (lost.holder.as_deref(), lost.counter),
        (holder, counter),
        "{what}: the refusal names the row as it stands"
    );
}

fn seq(n: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, None).expect("valid kit sequence"))
}

fn row(key: &LeaseKey, parents: &[&str]) -> Lease {
    Lease::new(
        key.clone(),
        parents.iter().map(|p| (*p).to_owned()).collect(),
    )
}

fn sorted(mut parents: Vec<String>) -> Vec<String> {
    parents.sort();
    parents
}

/// A free (missing or ownerless) row is taken; the row names the owner and the holder's token
/// and expires at now + TTL.
pub async fn take_free_row(h: &Harness) {
    let a = holder("a", "a-1");
    let key = h.key("free", "shardId-000000000000");
    let lease = written(h.take_fenced(&key, &a, 0).await, "take of a missing row");
    assert_eq!(lease.owner.as_deref(), Some("a"));
    assert_eq!(
        lease.token.as_deref(),
        Some("a-1"),
        "a take writes the token"
    );
    assert_eq!(
        lease.counter, 1,
        "a take that creates the row leaves counter 1"
    );
    assert_eq!(lease.expiry_ms, h.now_ms() + 10_000, "expiry is now + ttl");
    assert_eq!(
        h.read(&key).await,
        lease,
        "read returns the row the take wrote"
    );
    let key2 = h.key("free", "shardId-000000000001");
    assert!(h.create(&row(&key2, &[])).await, "create");
    let lease = written(
        h.take_fenced(&key2, &a, 1).await,
        "take of a created, ownerless row",
    );
    assert_eq!(
        (
            lease.owner.as_deref(),
            lease.token.as_deref(),
            lease.counter
        ),
        (Some("a"), Some("a-1"), 2)
    );
    assert_eq!(h.read(&key2).await, lease);
}

/// An owner that restarts with the same owner id holds a new token: it cannot renew,
/// checkpoint or release its old holding, and takes the row back only fenced on the current
/// counter.
pub async fn retake_own_row(h: &Harness) {
    let (old, new) = (holder("a", "a-1"), holder("a", "a-2"));
    let key = h.key("retake", "shardId-000000000000");
    let first = written(h.take(&key, &old).await, "first take");
    let c = first.counter;
    lost_to(
        h.renew(&key, &new, None).await,
        "renew by the same owner id with another token",
        Some("a"),
        c,
    );
    lost_to(
        h.checkpoint(&key, &new, &seq("1")).await,
        "checkpoint by the same owner id with another token",
        Some("a"),
        c,
    );
    lost_to(
        h.release(&key, &new, None).await,
        "release by the same owner id with another token",
        Some("a"),
        c,
    );
    assert_eq!(h.read(&key).await, first, "refused writes change nothing");
    h.clock.advance(Duration::from_secs(5));
    lost_to(
        h.take_fenced(&key, &new, c - 1).await,
        "retake fenced on a stale counter",
        Some("a"),
        c,
    );
    lost_to(
        h.take_fenced(&key, &new, c + 1).await,
        "retake fenced on a counter the row never had",
        Some("a"),
        c,
    );
    let lease = written(
        h.take_fenced(&key, &new, c).await,
        "retake fenced on the current counter",
    );
    assert_eq!(
        (
            lease.owner.as_deref(),
            lease.token.as_deref(),
            lease.counter
        ),
        (Some("a"), Some("a-2"), c + 1)
    );
    assert_eq!(lease.expiry_ms, h.now_ms() + 10_000);
    lost_to(
        h.renew(&key, &old, None).await,
        "renew of the old holding after the retake",
        Some("a"),
        c + 1,
    );
    written(h.renew(&key, &new, None).await, "renew of the new holding");
}

/// A live row held by another owner is not taken on an observation its holder's writes made
/// stale; the refusal names the holder and nothing is written.
pub async fn take_of_live_foreign_row_refused(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("live", "shardId-000000000000");
    let seen = written(h.take(&key, &a).await, "take by a").counter;
    h.clock.advance(TTL - Duration::from_millis(1));
    let held = written(h.renew(&key, &a, None).await, "renewal by a");
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "take by b on the counter it saw before a's renewal",
        Some("a"),
        held.counter,
    );
    lost_to(
        h.take_fenced(&key, &b, 0).await,
        "take by b fenced on 0 (as if the row were missing)",
        Some("a"),
        held.counter,
    );
    assert_eq!(h.read(&key).await, held, "a refused take changes nothing");
    written(h.renew(&key, &a, None).await, "a still holds the row");
}

/// An expired row is not taken on a stale counter (nor as if it were missing), however long
/// ago it expired; a take fenced on the counter the taker observed lands whatever the expiry
/// says, and the lapsed holder then loses its writes.
pub async fn take_of_expired_row_succeeds(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("expired", "shardId-000000000000");
    let seen = written(h.take(&key, &a).await, "take by a").counter;
    let taken = written(h.renew(&key, &a, None).await, "renew by a");
    h.clock.advance(TTL * 3);
    assert!(taken.expiry_ms < h.now_ms(), "the row has expired");
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "take of an expired row on a stale counter",
        Some("a"),
        taken.counter,
    );
    lost_to(
        h.take_fenced(&key, &b, 0).await,
        "take of an expired row fenced on 0",
        Some("a"),
        taken.counter,
    );
    assert_eq!(h.read(&key).await, taken, "refused takes change nothing");
    let lease = written(
        h.take_fenced(&key, &b, taken.counter).await,
        "take of an expired row on the observed counter",
    );
    assert_eq!(
        (lease.owner.as_deref(), lease.token.as_deref()),
        (Some("b"), Some("b-1"))
    );
    assert_eq!(lease.expiry_ms, h.now_ms() + 10_000);
    lost_to(
        h.renew(&key, &a, None).await,
        "renew by the lapsed owner after the take",
        Some("b"),
        lease.counter,
    );
}

/// Renew, checkpoint and release by anyone but the holder are refused and change nothing.
pub async fn non_owner_writes_refused(h: &Harness) {
    let a = holder("a", "a-1");
    let key = h.key("foreign", "shardId-000000000000");
    let held = written(h.take(&key, &a).await, "take by a");
    let cp = seq("100");
    let c = held.counter;
    for (who, what) in [
        (holder("b", "b-1"), "another owner"),
        (holder("b", "a-1"), "another owner with the holder's token"),
    ] {
        lost_to(
            h.renew(&key, &who, None).await,
            &format!("renew by {what}"),
            Some("a"),
            c,
        );
        lost_to(
            h.renew(&key, &who, Some(&cp)).await,
            &format!("renew+checkpoint by {what}"),
            Some("a"),
            c,
        );
        lost_to(
            h.checkpoint(&key, &who, &cp).await,
            &format!("checkpoint by {what}"),
            Some("a"),
            c,
        );
        lost_to(
            h.release(&key, &who, None).await,
            &format!("release by {what}"),
            Some("a"),
            c,
        );
        lost_to(
            h.release(&key, &who, Some(&cp)).await,
            &format!("release+checkpoint by {what}"),
            Some("a"),
            c,
        );
    }
    let missing = h.key("foreign", "shardId-000000000009");
    lost_to(
        h.renew(&missing, &a, None).await,
        "renew of a missing row",
        None,
        0,
    );
    lost_to(
        h.checkpoint(&missing, &a, &cp).await,
        "checkpoint of a missing row",
        None,
        0,
    );
    lost_to(
        h.release(&missing, &a, None).await,
        "release of a missing row",
        None,
        0,
    );
    assert!(
        h.store.read(&missing).await.expect("read").is_none(),
        "a refused write creates no row"
    );
    assert_eq!(
        h.read(&key).await,
        held,
        "refused writes leave the row as it was"
    );
}

/// After a release (with a final checkpoint) the row is free: another owner takes it at once
/// on the counter it reads, and sees the checkpoint.
pub async fn release_then_take_by_another(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("release", "shardId-000000000000");
    written(h.take(&key, &a).await, "take by a");
    let released = written(h.release(&key, &a, Some(&seq("42"))).await, "release by a");
    assert_eq!(
        (released.owner.as_deref(), released.token.as_deref()),
        (None, None),
        "a release clears owner and token"
    );
    assert_eq!(released.checkpoint, Some(seq("42")));
    assert_eq!(h.read(&key).await, released);
    let lease = written(
        h.take_fenced(&key, &b, released.counter).await,
        "take by b right after the release",
    );
    assert_eq!(
        (lease.owner.as_deref(), lease.token.as_deref()),
        (Some("b"), Some("b-1"))
    );
    assert_eq!(
        lease.checkpoint,
        Some(seq("42")),
        "a take keeps the checkpoint"
    );
    lost_to(
        h.renew(&key, &a, None).await,
        "renew by the releaser",
        Some("b"),
        lease.counter,
    );
}

/// Every write that lands bumps the counter by one; a refused one leaves it.
pub async fn counter_increases_on_every_write(h: &Harness) {
    let (a, a2, a3, b) = (
        holder("a", "a-1"),
        holder("a", "a-2"),
        holder("a", "a-3"),
        holder("b", "b-1"),
    );
    let key = h.key("counter", "shardId-000000000000");
    let c = written(h.take(&key, &a).await, "take").counter;
    assert!(c >= 1);
    let steps: Vec<Outcome> = vec![
        h.renew(&key, &a, None).await,
        h.renew(&key, &a, Some(&seq("1"))).await,
        h.checkpoint(&key, &a, &seq("2")).await,
        h.take_fenced(&key, &a2, c + 3).await,
        h.release(&key, &a2, None).await,
        h.take_fenced(&key, &b, c + 5).await,
        h.request(&key, "a", c + 6).await,
        h.hand_over(&key, &b, "a", Some(&seq("3"))).await,
        h.take_with(&key, &a3, &Take::fenced(TTL, c + 8).with_reposition("m"))
            .await,
        h.release(&key, &a3, Some(&Checkpoint::ShardEnd)).await,
    ];
    let mut last = c;
    for (i, step) in steps.into_iter().enumerate() {
        let counter = written(step, &format!("write #{i}")).counter;
        assert_eq!(counter, last + 1, "write #{i} bumps the counter by one");
        last = counter;
    }
    lost(h.renew(&key, &a3, None).await, "renew after release");
    lost(h.take_fenced(&key, &b, last - 1).await, "stale take");
    lost(h.request(&key, "b", last).await, "request of a free row");
    assert_eq!(
        h.read(&key).await.counter,
        last,
        "a refused write does not bump"
    );
}

/// A take fenced on a stale counter is refused; fenced on the current one it lands, even over a
/// live foreign row (the caller judged it takeable by observation).
pub async fn fenced_take_with_stale_counter_refused(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("fence", "shardId-000000000000");
    let start = h.now_ms();
    let seen = written(h.take(&key, &a).await, "take by a").counter;
    written(h.renew(&key, &a, None).await, "renew");
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "take fenced on a stale counter",
        Some("a"),
        seen + 1,
    );
    h.clock.advance(TTL * 2);
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "a stale fence is refused even when the row has expired",
        Some("a"),
        seen + 1,
    );
    h.clock.set(start);
    assert!(h.read(&key).await.is_live_at(h.now_ms()), "the row is live");
    let lease = written(
        h.take_fenced(&key, &b, seen + 1).await,
        "take fenced on the current counter",
    );
    assert_eq!(
        (lease.owner.as_deref(), lease.token.as_deref()),
        (Some("b"), Some("b-1"))
    );
    let fresh = h.key("fence", "shardId-000000000001");
    lost_to(
        h.take_fenced(&fresh, &b, 5).await,
        "a fence other than 0 on a missing row",
        None,
        0,
    );
    assert!(
        h.store.read(&fresh).await.expect("read").is_none(),
        "a refused take creates no row"
    );
    written(
        h.take_fenced(&fresh, &b, 0).await,
        "a fence of 0 on a missing row",
    );
    lost_to(
        h.take_fenced(&fresh, &a, 0).await,
        "a fence of 0 once the row exists",
        Some("b"),
        1,
    );
}

/// The same shard id in two streams is two rows.
pub async fn streams_are_independent(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let (k1, k2) = (
        h.key("one", "shardId-000000000000"),
        h.key("two", "shardId-000000000000"),
    );
    written(h.take_fenced(&k1, &a, 0).await, "take in stream one");
    written(
        h.take_fenced(&k2, &b, 0).await,
        "take of the same shard id in stream two",
    );
    written(h.checkpoint(&k1, &a, &seq("7")).await, "checkpoint");
    lost(
        h.checkpoint(&k2, &a, &seq("8")).await,
        "a's holding in stream one does not reach stream two",
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
        assert!(h.create(&row(other, &[])).await);
    }
    let mut expected = HashSet::new();
    for i in 0..3 {
        let key = h.key("list", &format!("shardId-00000000000{i}"));
        assert!(h.create(&row(&key, &["parent"])).await);
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

/// `create` creates once, keeps parents, writes only the row's key, parents, checkpoint and
/// marker (no owner, no token, counter 1), and never touches an existing row.
pub async fn create_is_idempotent(h: &Harness) {
    let key = h.key("create", "shardId-000000000002");
    let parents = ["shardId-000000000000", "shardId-000000000001"];
    let mut given = row(&key, &parents);
    // Fields `create` must not copy: a new row is free, with counter 1.
    given.owner = Some("x".to_owned());
    given.token = Some("x-1".to_owned());
    given.wanted_by = Some("y".to_owned());
    given.counter = 9;
    assert!(h.create(&given).await, "first create");
    let created = h.read(&key).await;
    assert_eq!(
        (
            created.owner.as_deref(),
            created.token.as_deref(),
            created.wanted_by.as_deref(),
            created.counter
        ),
        (None, None, None, 1),
        "a created row is free with counter 1"
    );
    assert_eq!(
        (created.checkpoint.clone(), created.repositioned.clone()),
        (None, None)
    );
    assert_eq!(sorted(created.parents.clone()), parents.map(str::to_owned));
    assert!(
        !h.create(&row(&key, &[])).await,
        "second create of a free row"
    );
    assert_eq!(
        h.read(&key).await,
        created,
        "a second create changes nothing"
    );
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&key, &a, 1).await, "take");
    let again = row(&key, &[]).starting_at(Some(Checkpoint::TrimHorizon));
    assert!(!h.create(&again).await, "create of a held row");
    assert_eq!(
        h.read(&key).await,
        taken,
        "a create never touches a held row"
    );
}

/// Checkpoints of every kind come back as written, through checkpoint, renew, release and
/// take.
pub async fn checkpoints_round_trip(h: &Harness) {
    let a = holder("a", "a-1");
    let key = h.key("cp", "shardId-000000000000");
    written(h.take(&key, &a).await, "take");
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
        let out = written(h.checkpoint(&key, &a, cp).await, "checkpoint");
        assert_eq!(out.checkpoint.as_ref(), Some(cp), "the written row");
        assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(cp), "read");
    }
    written(h.renew(&key, &a, Some(&all[3])).await, "renew");
    assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(&all[3]));
    written(h.renew(&key, &a, None).await, "renew");
    assert_eq!(
        h.read(&key).await.checkpoint.as_ref(),
        Some(&all[3]),
        "renew keeps it"
    );
    let released = written(h.release(&key, &a, Some(&all[4])).await, "release");
    assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(&all[4]));
    let mut counter = released.counter;
    for (i, cp) in all.iter().enumerate() {
        let taker = holder("a", &format!("a-take-{i}"));
        let take = Take::fenced(TTL, counter).with_checkpoint(cp.clone());
        let out = written(
            h.take_with(&key, &taker, &take).await,
            "take with checkpoint",
        );
        assert_eq!(out.checkpoint.as_ref(), Some(cp), "the taken row");
        assert_eq!(h.read(&key).await.checkpoint.as_ref(), Some(cp), "read");
        counter = out.counter;
    }
}

/// A lapsed owner cannot checkpoint, renew or release once another owner took the row.
pub async fn lapsed_owner_checkpoint_refused(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("lapsed", "shardId-000000000000");
    written(h.take(&key, &a).await, "take by a");
    let stood = written(h.checkpoint(&key, &a, &seq("10")).await, "checkpoint");
    // b saw the counter stand still for a whole lease duration.
    h.clock.advance(TTL + Duration::from_secs(1));
    let taken = written(
        h.take_fenced(&key, &b, stood.counter).await,
        "take by b after a lapsed",
    );
    lost_to(
        h.checkpoint(&key, &a, &seq("20")).await,
        "checkpoint by the lapsed owner",
        Some("b"),
        taken.counter,
    );
    lost(h.renew(&key, &a, None).await, "renew by the lapsed owner");
    lost(
        h.release(&key, &a, Some(&seq("30"))).await,
        "release by the lapsed owner",
    );
    assert_eq!(h.read(&key).await, taken, "the lapsed owner wrote nothing");
    assert_eq!(taken.checkpoint, Some(seq("10")));
}

/// A request marks a foreign row wanted; the owner's renewal shows the mark; the hand-over
/// moves the row to the asker with the final checkpoint in one write, and the asker then takes
/// it with its own token.
pub async fn request_then_hand_over_moves_the_row(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("handover", "shardId-000000000000");
    let taken = written(h.take(&key, &a).await, "take by a");
    let marked = written(h.request(&key, "b", taken.counter).await, "request by b");
    assert_eq!(marked.wanted_by.as_deref(), Some("b"));
    assert_eq!(
        (
            marked.owner.as_deref(),
            marked.token.as_deref(),
            marked.counter
        ),
        (Some("a"), Some("a-1"), taken.counter + 1),
        "a request changes neither owner nor token"
    );
    let renewed = written(h.renew(&key, &a, None).await, "renew");
    assert_eq!(
        renewed.wanted_by.as_deref(),
        Some("b"),
        "the owner sees the mark"
    );
    let checkpointed = written(h.checkpoint(&key, &a, &seq("70")).await, "checkpoint");
    assert_eq!(
        checkpointed.wanted_by.as_deref(),
        Some("b"),
        "checkpoints keep it"
    );
    h.clock.advance(Duration::from_secs(1));
    let moved = written(
        h.hand_over(&key, &a, "b", Some(&seq("77"))).await,
        "hand over to b",
    );
    assert_eq!(
        (moved.owner.as_deref(), moved.token.as_deref()),
        (Some("b"), None)
    );
    assert_eq!(moved.wanted_by, None);
    assert_eq!(moved.checkpoint, Some(seq("77")));
    assert_eq!(moved.expiry_ms, h.now_ms() + 10_000);
    assert_eq!(moved.counter, checkpointed.counter + 1);
    assert_eq!(h.read(&key).await, moved);
    lost(h.renew(&key, &a, None).await, "renew by the old owner");
    let took = written(
        h.take_fenced(&key, &b, moved.counter).await,
        "take by the asker",
    );
    assert_eq!(
        took.checkpoint,
        Some(seq("77")),
        "the take keeps the final checkpoint"
    );
    written(h.renew(&key, &b, None).await, "renew by the new owner");
}

/// Requests are refused on stale counters, free, own, missing or already wanted rows; a
/// hand-over is refused to anyone but the asker and by anyone but the holder.
pub async fn request_and_hand_over_refusals(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("refuse", "shardId-000000000000");
    assert!(h.create(&row(&key, &[])).await, "create");
    let free = h.read(&key).await;
    lost(
        h.request(&key, "b", free.counter).await,
        "request of a free row",
    );
    let taken = written(h.take_fenced(&key, &a, free.counter).await, "take by a");
    lost(
        h.request(&key, "a", taken.counter).await,
        "request of an own row",
    );
    lost(
        h.request(&key, "b", taken.counter - 1).await,
        "request on a stale counter",
    );
    let marked = written(h.request(&key, "b", taken.counter).await, "request");
    lost(h.request(&key, "c", marked.counter).await, "second request");
    lost(
        h.hand_over(&key, &a, "c", None).await,
        "hand over to a non-asker",
    );
    lost(
        h.hand_over(&key, &b, "b", None).await,
        "hand over by a non-owner",
    );
    lost(
        h.hand_over(&key, &holder("a", "a-2"), "b", None).await,
        "hand over by the owner id with another token",
    );
    let missing = h.key("refuse", "shardId-000000000009");
    lost_to(
        h.request(&missing, "b", 0).await,
        "request of a missing row",
        None,
        0,
    );
    lost_to(
        h.hand_over(&missing, &a, "b", None).await,
        "hand over of a missing row",
        None,
        0,
    );
    assert_eq!(h.read(&key).await, marked, "refusals change nothing");
    // A take (by the owner or anyone) and a release clear the mark.
    let a2 = holder("a", "a-2");
    let retaken = written(h.take_fenced(&key, &a2, marked.counter).await, "retake");
    assert_eq!(retaken.wanted_by, None);
    written(h.request(&key, "b", retaken.counter).await, "request again");
    let released = written(h.release(&key, &a2, None).await, "release");
    assert_eq!(released.wanted_by, None);
}

/// A delete is fenced on the counter the deleter observed, takes the row out of `list`, and
/// leaves the other rows alone; a deleted row may be created again, fresh.
pub async fn delete_is_fenced_and_unlists(h: &Harness) {
    let (gone, kept) = (h.key("delete", "shardId-1"), h.key("delete", "shardId-2"));
    assert!(h.create(&row(&gone, &[])).await);
    assert!(h.create(&row(&kept, &[])).await);
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&gone, &a, 1).await, "take");
    assert!(
        !h.store.delete(&gone, 1).await.expect("delete"),
        "a delete observed before a write is refused"
    );
    assert_eq!(
        h.read(&gone).await,
        taken,
        "a refused delete changes nothing"
    );
    assert!(h.store.delete(&gone, taken.counter).await.expect("delete"));
    assert_eq!(h.store.read(&gone).await.expect("read"), None);
    let listed: Vec<String> = h
        .store
        .list(gone.stream())
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.key.shard().to_owned())
        .collect();
    assert_eq!(
        listed,
        vec!["shardId-2".to_owned()],
        "a deleted row is not listed"
    );
    assert!(
        !h.store.delete(&gone, taken.counter).await.expect("delete"),
        "a row already gone"
    );
    assert!(
        h.create(&row(&gone, &[])).await,
        "created again after a delete"
    );
    assert_eq!(h.read(&gone).await.counter, 1, "fresh");
}

/// An operator's evict frees a held (or handed-over) row whoever holds it, fenced on the
/// counter it observed, into the operator's hold (`rules::EVICTED_OWNER`, taken once it stood
/// still for a lease), keeps or replaces the checkpoint, and the holder's next writes are
/// refused; a missing row is not created.
pub async fn evict_is_fenced_and_frees(h: &Harness) {
    let key = h.key("evict", "shardId-1");
    assert!(h.create(&row(&key, &["shardId-0"])).await);
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&key, &a, 1).await, "take");
    let renewed = written(h.renew(&key, &a, Some(&seq("5"))).await, "renew");
    let stale = h
        .store
        .evict(&key, taken.counter, None)
        .await
        .expect("evict");
    lost_to(
        stale,
        "an evict observed before a write",
        Some("a"),
        renewed.counter,
    );
    assert_eq!(
        h.read(&key).await,
        renewed,
        "a refused evict changes nothing"
    );
    let freed = written(
        h.store
            .evict(&key, renewed.counter, None)
            .await
            .expect("evict"),
        "evict",
    );
    // The operator's hold: no instance's, and taken only once it stood still for a lease.
    assert_eq!(
        (freed.owner.as_deref(), freed.token.as_deref()),
        (
            Some(crate::rules::EVICTED_OWNER),
            Some(crate::rules::EVICTED_TOKEN)
        )
    );
    assert!(crate::rules::is_evicted(&freed));
    assert_eq!(freed.wanted_by, None);
    assert_eq!(freed.counter, renewed.counter + 1, "one bump");
    assert_eq!(freed.checkpoint, Some(seq("5")), "the checkpoint stays");
    assert_eq!(
        freed.parents,
        vec!["shardId-0".to_owned()],
        "the parents stay"
    );
    lost_to(
        h.renew(&key, &a, None).await,
        "the evicted holder's renewal",
        Some(crate::rules::EVICTED_OWNER),
        freed.counter,
    );
    // A row handed over (owner, no token) and wanted is freed the same way, and a new
    // checkpoint replaces the old one, subsequence included.
    let b = holder("b", "b-1");
    written(h.take_fenced(&key, &b, freed.counter).await, "take by b");
    let asked = written(h.request(&key, "c", freed.counter + 1).await, "request");
    let handed = written(h.hand_over(&key, &b, "c", None).await, "hand over");
    assert!(asked.wanted_by.is_some() && handed.token.is_none());
    let at = Checkpoint::Sequence(SequenceNumber::new("9", Some(2)).expect("seq"));
    let reset = written(
        h.store
            .evict(&key, handed.counter, Some(&at))
            .await
            .expect("evict"),
        "evict with a checkpoint",
    );
    assert_eq!(
        (reset.owner.as_deref(), reset.checkpoint),
        (Some(crate::rules::EVICTED_OWNER), Some(at))
    );
    let back = written(
        h.store
            .evict(&key, reset.counter, Some(&Checkpoint::TrimHorizon))
            .await
            .expect("evict"),
        "evict of a free row",
    );
    assert_eq!(back.checkpoint, Some(Checkpoint::TrimHorizon));
    assert_eq!(
        back.checkpoint.as_ref().and_then(Checkpoint::subsequence),
        None
    );
    let missing = h.key("evict", "shardId-9");
    lost_to(
        h.store.evict(&missing, 0, None).await.expect("evict"),
        "an evict of a missing row",
        None,
        0,
    );
    assert_eq!(
        h.store.read(&missing).await.expect("read"),
        None,
        "not created"
    );
}

/// Epochs start at 0, bump by one per call, and are per stream.
pub async fn epochs_bump_per_stream(h: &Harness) {
    let (one, two) = (h.key("epoch1", "x"), h.key("epoch2", "x"));
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 0);
    h.store.bump_epoch(one.stream()).await.expect("bump");
    h.store.bump_epoch(one.stream()).await.expect("bump");
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 2);
    assert_eq!(h.store.epoch(two.stream()).await.expect("epoch"), 0);
    assert!(h.create(&row(&one, &[])).await);
    let rows = h.store.list(one.stream()).await.expect("list");
    assert_eq!(rows.len(), 1, "epochs are not rows");
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 2);
}

/// 32 takers race for one row, round after round, all fenced on the same observation (a
/// missing row in even rounds, the previous round's row on its counter in odd ones): exactly
/// one wins each round, and the row carries its token.
pub async fn concurrent_takers_one_winner(h: &Harness) {
    let started = Instant::now();
    let mut rounds = 0;
    let mut key = h.key("race", "shardId-000000000000");
    while rounds < h.concurrent_rounds {
        if rounds > 0 && h.concurrent_budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        if rounds % 2 == 0 {
            key = h.key("race", &format!("shardId-{rounds:012}"));
        }
        let fence = h.observe(&key).await;
        let mut tasks = tokio::task::JoinSet::new();
        for taker in 0..32 {
            let (store, key) = (h.store.clone(), key.clone());
            tasks.spawn(async move {
                let who = Holder::new(format!("taker-{taker}"), format!("r{rounds}-t{taker}"));
                let out = store.take(&key, &who, &Take::fenced(TTL, fence)).await;
                (who, out)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (who, out) = joined.expect("taker task");
            if out
                .unwrap_or_else(|e| panic!("take by {who:?} failed: {e}"))
                .is_written()
            {
                winners.push(who);
            }
        }
        assert_eq!(winners.len(), 1, "round {rounds}: winners {winners:?}");
        let row = h.read(&key).await;
        assert!(row.is_held_with(&winners[0]), "round {rounds}: {row:?}");
        assert_eq!(row.counter, fence + 1, "round {rounds}: one write landed");
        rounds += 1;
    }
    eprintln!(
        "concurrent_takers_one_winner: {rounds} rounds of 32 takers in {:.1?}",
        started.elapsed()
    );
}

/// Two holders with the same owner id and different tokens: once one takes the row, the other
/// can neither renew, checkpoint, release nor hand it over.
pub async fn same_owner_other_token_refused(h: &Harness) {
    let (first, second) = (holder("a", "a-1"), holder("a", "a-2"));
    let key = h.key("twin", "shardId-000000000000");
    let taken = written(h.take(&key, &first).await, "take by the first holder");
    let marked = written(h.request(&key, "c", taken.counter).await, "request by c");
    let c = marked.counter;
    let cp = seq("5");
    lost_to(
        h.renew(&key, &second, None).await,
        "renew by the twin",
        Some("a"),
        c,
    );
    lost_to(
        h.renew(&key, &second, Some(&cp)).await,
        "renew+checkpoint by the twin",
        Some("a"),
        c,
    );
    lost_to(
        h.checkpoint(&key, &second, &cp).await,
        "checkpoint by the twin",
        Some("a"),
        c,
    );
    lost_to(
        h.release(&key, &second, None).await,
        "release by the twin",
        Some("a"),
        c,
    );
    lost_to(
        h.release(&key, &second, Some(&cp)).await,
        "release+checkpoint by the twin",
        Some("a"),
        c,
    );
    lost_to(
        h.hand_over(&key, &second, "c", Some(&cp)).await,
        "hand over by the twin",
        Some("a"),
        c,
    );
    assert_eq!(h.read(&key).await, marked, "the twin wrote nothing");
    let renewed = written(
        h.renew(&key, &first, None).await,
        "the first holder still holds the row",
    );
    assert_eq!(renewed.token.as_deref(), Some("a-1"));
    written(
        h.hand_over(&key, &first, "c", None).await,
        "the first holder hands it over",
    );
}

/// A take writes the holder's token, and the checkpoint and reposition marker it carries; a
/// take without them keeps the stored ones.
pub async fn take_writes_token_checkpoint_and_marker(h: &Harness) {
    let (a, b, c) = (holder("a", "a-1"), holder("b", "b-1"), holder("c", "c-1"));
    let key = h.key("marker", "shardId-000000000000");
    let take = Take::fenced(TTL, 0)
        .with_checkpoint(seq("5"))
        .with_reposition("m");
    let first = written(h.take_with(&key, &a, &take).await, "take with both");
    assert_eq!(
        (
            first.token.as_deref(),
            first.checkpoint.clone(),
            first.repositioned.as_deref()
        ),
        (Some("a-1"), Some(seq("5")), Some("m"))
    );
    assert_eq!(h.read(&key).await, first);
    let released = written(h.release(&key, &a, None).await, "release");
    assert_eq!(
        (
            released.checkpoint.clone(),
            released.repositioned.as_deref()
        ),
        (Some(seq("5")), Some("m")),
        "a release keeps checkpoint and marker"
    );
    let plain = written(
        h.take_fenced(&key, &b, released.counter).await,
        "take without either",
    );
    assert_eq!(
        (
            plain.token.as_deref(),
            plain.checkpoint.clone(),
            plain.repositioned.as_deref()
        ),
        (Some("b-1"), Some(seq("5")), Some("m")),
        "a plain take keeps checkpoint and marker"
    );
    written(h.checkpoint(&key, &b, &seq("9")).await, "checkpoint by b");
    let take = Take::fenced(TTL, plain.counter + 1)
        .with_checkpoint(Checkpoint::Latest)
        .with_reposition("m2");
    let moved = written(h.take_with(&key, &c, &take).await, "reposition by c");
    assert_eq!(
        (moved.checkpoint.clone(), moved.repositioned.as_deref()),
        (Some(Checkpoint::Latest), Some("m2")),
        "a take's checkpoint and marker replace the stored ones"
    );
    let marker_only = Take::fenced(TTL, moved.counter).with_reposition("m3");
    let out = written(
        h.take_with(&key, &a, &marker_only).await,
        "take with a marker",
    );
    assert_eq!(
        (out.checkpoint.clone(), out.repositioned.as_deref()),
        (Some(Checkpoint::Latest), Some("m3")),
        "a marker alone keeps the checkpoint"
    );
    let cp_only = Take::fenced(TTL, out.counter).with_checkpoint(Checkpoint::TrimHorizon);
    let out = written(
        h.take_with(&key, &b, &cp_only).await,
        "take with a checkpoint",
    );
    assert_eq!(
        (out.checkpoint.clone(), out.repositioned.as_deref()),
        (Some(Checkpoint::TrimHorizon), Some("m3")),
        "a checkpoint alone keeps the marker"
    );
    assert_eq!(h.read(&key).await, out);
    // A created row without a checkpoint gets its pinned start from the take.
    let fresh = h.key("marker", "shardId-000000000001");
    assert!(h.create(&row(&fresh, &[])).await);
    let take = Take::fenced(TTL, 1).with_checkpoint(Checkpoint::AtTimestamp(1_700_000_000_000));
    let pinned = written(h.take_with(&fresh, &a, &take).await, "take pinning a start");
    assert_eq!(
        (pinned.checkpoint, pinned.repositioned),
        (Some(Checkpoint::AtTimestamp(1_700_000_000_000)), None)
    );
}

/// `create` stores the start checkpoint, parents and marker it is given; read and list return
/// them; a second create leaves the row untouched.
pub async fn create_keeps_start_checkpoint(h: &Harness) {
    let latest = h.key("start", "shardId-000000000002");
    let ended = h.key("start", "shardId-000000000003");
    let parents = ["shardId-000000000000", "shardId-000000000001"];
    let mut given = row(&latest, &parents).starting_at(Some(Checkpoint::Latest));
    given.repositioned = Some("m".to_owned());
    assert!(h.create(&given).await, "create at LATEST");
    assert!(
        h.create(&row(&ended, &["shardId-000000000000"]).starting_at(Some(Checkpoint::ShardEnd)))
            .await,
        "create at SHARD_END"
    );
    let one = h.read(&latest).await;
    assert_eq!(one.checkpoint, Some(Checkpoint::Latest));
    assert_eq!(one.repositioned.as_deref(), Some("m"));
    assert_eq!(sorted(one.parents.clone()), parents.map(str::to_owned));
    assert_eq!(
        (one.owner.as_deref(), one.token.as_deref(), one.counter),
        (None, None, 1)
    );
    let two = h.read(&ended).await;
    assert!(two.is_finished(), "{two:?}");
    assert_eq!(
        (two.parents.clone(), two.repositioned.clone(), two.counter),
        (vec!["shardId-000000000000".to_owned()], None, 1)
    );
    let listed = h.store.list(latest.stream()).await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for row in &listed {
        let expected = if row.key == latest { &one } else { &two };
        assert_eq!(
            (
                &row.key,
                &row.checkpoint,
                &row.repositioned,
                sorted(row.parents.clone())
            ),
            (
                &expected.key,
                &expected.checkpoint,
                &expected.repositioned,
                sorted(expected.parents.clone())
            ),
            "list returns what read does"
        );
    }
    let mut other = row(&latest, &[]).starting_at(Some(Checkpoint::TrimHorizon));
    other.repositioned = Some("other".to_owned());
    assert!(!h.create(&other).await, "second create");
    assert!(!h.create(&row(&ended, &[])).await, "second create");
    assert_eq!(
        h.read(&latest).await,
        one,
        "a second create changes nothing"
    );
    assert_eq!(h.read(&ended).await, two, "a second create changes nothing");
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&latest, &a, 1).await, "take");
    assert_eq!(
        (taken.checkpoint, taken.repositioned.as_deref()),
        (Some(Checkpoint::Latest), Some("m")),
        "the take keeps the start checkpoint and marker"
    );
}

/// A hand-over makes the asker the owner without a token: the old holder can no longer write,
/// nor can the asker until it takes the row, fenced on the counter it reads, with its own
/// token.
pub async fn hand_over_clears_token(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("token", "shardId-000000000000");
    let taken = written(h.take(&key, &a).await, "take by a");
    let marked = written(h.request(&key, "b", taken.counter).await, "request by b");
    let moved = written(h.hand_over(&key, &a, "b", None).await, "hand over");
    assert_eq!(
        (
            moved.owner.as_deref(),
            moved.token.as_deref(),
            moved.counter
        ),
        (Some("b"), None, marked.counter + 1)
    );
    let stored = h.read(&key).await;
    assert_eq!(
        (stored.owner.as_deref(), stored.token.as_deref()),
        (Some("b"), None),
        "the stored row has no token"
    );
    let c = moved.counter;
    lost_to(
        h.renew(&key, &a, None).await,
        "renew by the old holder",
        Some("b"),
        c,
    );
    lost_to(
        h.checkpoint(&key, &a, &seq("1")).await,
        "checkpoint by the old holder",
        Some("b"),
        c,
    );
    lost_to(
        h.release(&key, &a, None).await,
        "release by the old holder",
        Some("b"),
        c,
    );
    lost_to(
        h.renew(&key, &b, None).await,
        "renew by the asker before its take",
        Some("b"),
        c,
    );
    lost_to(
        h.checkpoint(&key, &b, &seq("1")).await,
        "checkpoint by the asker before its take",
        Some("b"),
        c,
    );
    lost_to(
        h.take_fenced(&key, &b, c - 1).await,
        "take by the asker on a stale counter",
        Some("b"),
        c,
    );
    let observed = h.observe(&key).await;
    assert_eq!(observed, c);
    let took = written(h.take_fenced(&key, &b, observed).await, "take by the asker");
    assert_eq!(
        (took.owner.as_deref(), took.token.as_deref(), took.counter),
        (Some("b"), Some("b-1"), c + 1)
    );
    written(h.renew(&key, &b, None).await, "renew by the asker");
    lost(h.renew(&key, &a, None).await, "renew by the old holder");
}

/// No clock decides a take: far past the expiry a take on a stale counter is refused (and the
/// holder may still renew); with the clock moved back before the expiry, a take on the
/// current counter lands.
pub async fn clock_never_decides_a_take(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("clock", "shardId-000000000000");
    let start = h.now_ms();
    let taken = written(h.take(&key, &a).await, "take by a");
    let seen = taken.counter;
    h.clock.set(start + 1_000 * 3_600 * 1_000);
    assert!(taken.expiry_ms < h.now_ms());
    let renewed = written(
        h.renew(&key, &a, None).await,
        "renew by the holder of an expired row",
    );
    assert_eq!(
        renewed.expiry_ms,
        h.now_ms() + 10_000,
        "the clock stamps the expiry"
    );
    h.clock.advance(TTL * 1_000);
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "take on a stale counter far past the expiry",
        Some("a"),
        renewed.counter,
    );
    h.clock.set(start - 3_600 * 1_000);
    assert!(renewed.expiry_ms > h.now_ms() + crate::duration_ms(TTL));
    let took = written(
        h.take_fenced(&key, &b, renewed.counter).await,
        "take on the current counter of a live row, the clock moved back",
    );
    assert_eq!(
        (took.owner.as_deref(), took.token.as_deref()),
        (Some("b"), Some("b-1"))
    );
    assert_eq!(
        took.expiry_ms,
        h.now_ms() + 10_000,
        "the clock stamps the expiry"
    );
    lost_to(
        h.renew(&key, &a, None).await,
        "renew by a after the take",
        Some("b"),
        took.counter,
    );
    h.clock.set(start);
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
            delete_is_fenced_and_unlists,
            evict_is_fenced_and_frees,
            same_owner_other_token_refused,
            take_writes_token_checkpoint_and_marker,
            create_keeps_start_checkpoint,
            hand_over_clears_token,
            clock_never_decides_a_take,
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
