//! Checks of the counter rule: every write that lands bumps the row's counter by exactly one,
//! and a refused write leaves it.

use super::{holder, lost, seq, written, Harness, TTL};
use crate::{Checkpoint, Outcome, Take};

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
        h.request(&key, "a", "b").await,
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
    lost(h.request(&key, "b", "a").await, "request of a free row");
    assert_eq!(
        h.read(&key).await.counter,
        last,
        "a refused write does not bump"
    );
}
