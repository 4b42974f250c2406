//! Checks of delete: fenced on the counter the deleter observed
//! ([`rules::may_delete`](crate::rules::may_delete)), and a deleted row leaves `list`.

use super::{holder, row, written, Harness};

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
