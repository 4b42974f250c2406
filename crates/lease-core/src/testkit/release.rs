//! Checks of release: one write clears owner and token and stores the final checkpoint, and the
//! row is free for the next taker at once.

use super::{holder, lost_to, seq, written, Harness};

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
