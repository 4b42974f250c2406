//! Checks of pokes ([`LeaseStore::poke`](crate::LeaseStore::poke)): they count on a member row
//! and change nothing else, and an operator's evict pokes the holder's member row in the same
//! write.

use super::{holder, lost_to, row, written, Harness};
use crate::LeaseKey;

/// A poke adds one to a member row's pokes and leaves its counter, owner, token and expiry as
/// they were; the holder's next renewal returns the count. A missing row is not created.
pub async fn poke_counts_and_changes_nothing_else(h: &Harness) {
    let stream = format!("{}-poke", h.namespace);
    let member = LeaseKey::member(&stream, "a").expect("member key");
    assert!(h.create(&row(&member, &[])).await);
    let a = holder("a", "a-1");
    let joined = written(h.take_fenced(&member, &a, 1).await, "join");
    assert_eq!(joined.pokes, 0, "no poke yet");
    let (one, two) = (
        LeaseKey::new(stream.as_str(), "shardId-1").expect("key"),
        LeaseKey::new(stream.as_str(), "shardId-2").expect("key"),
    );
    assert!(
        h.store.poke(&member, &one).await.expect("poke"),
        "the row exists"
    );
    assert_eq!(h.read(&member).await.last_poke_about(), Some("shardId-1"));
    assert!(h.store.poke(&member, &two).await.expect("poke"));
    let poked = h.read(&member).await;
    assert_eq!(poked.pokes, 2, "two pokes");
    assert_eq!(
        poked.last_poke_about(),
        Some("shardId-2"),
        "the last poke names its row"
    );
    assert_eq!(
        (
            poked.counter,
            poked.owner.as_deref(),
            poked.token.as_deref(),
            poked.expiry_ms
        ),
        (
            joined.counter,
            joined.owner.as_deref(),
            joined.token.as_deref(),
            joined.expiry_ms
        ),
        "a poke is no write of the holder: the counter stands"
    );
    let renewed = written(h.renew(&member, &a, None).await, "renewal");
    assert_eq!(
        (renewed.pokes, renewed.last_poke_about(), renewed.counter),
        (2, Some("shardId-2"), joined.counter + 1),
        "the renewal returns the pokes and the row of the last"
    );
    let missing = LeaseKey::member(&stream, "nobody").expect("member key");
    assert!(
        !h.store.poke(&missing, &one).await.expect("poke"),
        "not created"
    );
    assert_eq!(h.store.read(&missing).await.expect("read"), None);
}

/// An operator's evict pokes the member row it names in the same write; a refused evict pokes
/// nothing; an evict naming a member row that does not exist evicts the row alone.
pub async fn evict_pokes_the_holders_member_row(h: &Harness) {
    let stream = format!("{}-evictpoke", h.namespace);
    let key = LeaseKey::new(stream.as_str(), "shardId-1").expect("key");
    let member = LeaseKey::member(&stream, "a").expect("member key");
    assert!(h.create(&row(&key, &[])).await);
    assert!(h.create(&row(&member, &[])).await);
    let a = holder("a", "a-1");
    written(h.take_fenced(&member, &a, 1).await, "join");
    let taken = written(h.take_fenced(&key, &a, 1).await, "take");
    let renewed = written(h.renew(&key, &a, None).await, "renew");
    lost_to(
        h.store
            .evict(&key, taken.counter, None, Some(&member))
            .await
            .expect("evict"),
        "a stale evict",
        Some("a"),
        renewed.counter,
    );
    assert_eq!(
        h.read(&member).await.pokes,
        0,
        "a refused evict pokes nothing"
    );
    let freed = written(
        h.store
            .evict(&key, renewed.counter, None, Some(&member))
            .await
            .expect("evict"),
        "evict",
    );
    assert!(crate::rules::is_evicted(&freed));
    let poked = h.read(&member).await;
    assert_eq!(
        (poked.pokes, poked.last_poke_about()),
        (1, Some("shardId-1")),
        "poked with the evict, about the evicted row"
    );
    let gone = LeaseKey::member(&stream, "gone").expect("member key");
    let again = written(
        h.store
            .evict(&key, freed.counter, None, Some(&gone))
            .await
            .expect("evict"),
        "an evict whose holder has no member row",
    );
    assert_eq!(again.counter, freed.counter + 1);
    assert_eq!(
        h.store.read(&gone).await.expect("read"),
        None,
        "not created"
    );
}
