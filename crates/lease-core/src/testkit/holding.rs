//! Checks of holding: renew, checkpoint, release and hand-over land only while the row still
//! carries the writer's owner id *and* token ([`rules::holds`](crate::rules::holds)), so
//! another owner, the same owner id restarted with a new token, or an owner whose row was taken
//! after it lapsed writes nothing.

use std::time::Duration;

use super::{holder, lost, lost_to, seq, written, Harness, TTL};

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

/// Two holders with the same owner id and different tokens: once one takes the row, the other
/// can neither renew, checkpoint, release nor hand it over.
pub async fn same_owner_other_token_refused(h: &Harness) {
    let (first, second) = (holder("a", "a-1"), holder("a", "a-2"));
    let key = h.key("twin", "shardId-000000000000");
    written(h.take(&key, &first).await, "take by the first holder");
    let marked = written(h.request(&key, "c", "a").await, "request by c");
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
