//! Checks of the operator's evict: fenced on the counter the operator observed, whoever holds
//! the row ([`rules::may_evict`](crate::rules::may_evict)), leaving it in the operator's hold
//! ([`rules::evicted`](crate::rules::evicted)).

use super::{holder, lost, lost_to, row, seq, written, Harness};
use crate::{Checkpoint, SequenceNumber};

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
        .evict(&key, taken.counter, None, None)
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
            .evict(&key, renewed.counter, None, None)
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
    // Nobody asks the hold for the row: nobody would hand it over, and the write would restart
    // the hold.
    lost(
        h.request(&key, "c", crate::rules::EVICTED_OWNER).await,
        "a request of the operator's hold",
    );
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
    let asked = written(h.request(&key, "c", "b").await, "request");
    let handed = written(h.hand_over(&key, &b, "c", None).await, "hand over");
    assert!(asked.wanted_by.is_some() && handed.token.is_none());
    let at = Checkpoint::Sequence(SequenceNumber::new("9", Some(2)).expect("seq"));
    let reset = written(
        h.store
            .evict(&key, handed.counter, Some(&at), None)
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
            .evict(&key, reset.counter, Some(&Checkpoint::TrimHorizon), None)
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
        h.store.evict(&missing, 0, None, None).await.expect("evict"),
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
