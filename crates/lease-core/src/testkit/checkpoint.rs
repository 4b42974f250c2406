//! Checks of checkpoints: every kind comes back as it was written, whether a checkpoint,
//! a renewal, a release or a take carried it.

use super::{holder, written, Harness, TTL};
use crate::{Checkpoint, SequenceNumber, Take};

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
