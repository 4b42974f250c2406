//! Checks that rows belong to one stream: the same shard id in two streams is two rows, and
//! `list` returns exactly one stream's rows.

use std::collections::HashSet;

use super::{holder, lost, row, seq, written, Harness};

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
