//! Checks of the hand-over rules: a request marks a foreign row wanted
//! ([`rules::may_request`](crate::rules::may_request)), its holder hands it to the asker
//! without a token ([`rules::may_hand_over`](crate::rules::may_hand_over)), and the asker then
//! takes it with a token of its own.

use std::time::Duration;

use super::{holder, lost, lost_to, row, seq, written, Harness};

/// A request marks a foreign row wanted; the owner's renewal shows the mark; the hand-over
/// moves the row to the asker with the final checkpoint in one write, and the asker then takes
/// it with its own token.
pub async fn request_then_hand_over_moves_the_row(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("handover", "shardId-000000000000");
    let taken = written(h.take(&key, &a).await, "take by a");
    let marked = written(h.request(&key, "b", "a").await, "request by b");
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

/// Requests are refused on rows no longer held by the owner asked, free, own, missing or
/// already wanted rows, and land whatever the holder wrote since the asker listed the row; a
/// hand-over is refused to anyone but the asker and by anyone but the holder.
pub async fn request_and_hand_over_refusals(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("refuse", "shardId-000000000000");
    assert!(h.create(&row(&key, &[])).await, "create");
    let free = h.read(&key).await;
    lost(h.request(&key, "b", "a").await, "request of a free row");
    written(h.take_fenced(&key, &a, free.counter).await, "take by a");
    lost(h.request(&key, "a", "a").await, "request of an own row");
    lost(
        h.request(&key, "b", "c").await,
        "request of a row c does not hold",
    );
    // The holder renews and checkpoints after the asker listed the row: the request still
    // lands (an asker slower than the holder's renewals would otherwise never land one).
    written(h.renew(&key, &a, None).await, "renew");
    written(h.checkpoint(&key, &a, &seq("9")).await, "checkpoint");
    let marked = written(h.request(&key, "b", "a").await, "request");
    lost(h.request(&key, "c", "a").await, "second request");
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
        h.request(&missing, "b", "a").await,
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
    written(h.request(&key, "b", "a").await, "request again");
    let released = written(h.release(&key, &a2, None).await, "release");
    assert_eq!(released.wanted_by, None);
}

/// A hand-over makes the asker the owner without a token: the old holder can no longer write,
/// nor can the asker until it takes the row, fenced on the counter it reads, with its own
/// token.
pub async fn hand_over_clears_token(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("token", "shardId-000000000000");
    written(h.take(&key, &a).await, "take by a");
    let marked = written(h.request(&key, "b", "a").await, "request by b");
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
