//! Checks of the take rule: a take is fenced on the counter the taker observed (a missing row
//! counts as 0) and on nothing else, so it lands on a free, expired or even live row it was
//! fenced on and is refused on a stale counter; it writes the owner, the holder's token, a new
//! expiry and the checkpoint and marker it carries; and of takers racing on one observation
//! exactly one wins ([`rules::may_take`](crate::rules::may_take)).

use std::time::{Duration, Instant};

use super::{holder, lost_to, row, seq, written, Harness, TTL};
use crate::{Checkpoint, Holder, Take};

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
