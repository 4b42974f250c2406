//! Checks of create: a created row is free with counter 1 and keeps the parents, start
//! checkpoint and marker it was given, and creating an existing row changes nothing.

use super::{holder, row, sorted, written, Harness};
use crate::Checkpoint;

/// `create` creates once, keeps parents, writes only the row's key, parents, checkpoint and
/// marker (no owner, no token, counter 1), and never touches an existing row.
pub async fn create_is_idempotent(h: &Harness) {
    let key = h.key("create", "shardId-000000000002");
    let parents = ["shardId-000000000000", "shardId-000000000001"];
    let mut given = row(&key, &parents);
    // Fields `create` must not copy: a new row is free, with counter 1.
    given.owner = Some("x".to_owned());
    given.token = Some("x-1".to_owned());
    given.wanted_by = Some("y".to_owned());
    given.counter = 9;
    assert!(h.create(&given).await, "first create");
    let created = h.read(&key).await;
    assert_eq!(
        (
            created.owner.as_deref(),
            created.token.as_deref(),
            created.wanted_by.as_deref(),
            created.counter
        ),
        (None, None, None, 1),
        "a created row is free with counter 1"
    );
    assert_eq!(
        (created.checkpoint.clone(), created.repositioned.clone()),
        (None, None)
    );
    assert_eq!(sorted(created.parents.clone()), parents.map(str::to_owned));
    assert!(
        !h.create(&row(&key, &[])).await,
        "second create of a free row"
    );
    assert_eq!(
        h.read(&key).await,
        created,
        "a second create changes nothing"
    );
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&key, &a, 1).await, "take");
    let again = row(&key, &[]).starting_at(Some(Checkpoint::TrimHorizon));
    assert!(!h.create(&again).await, "create of a held row");
    assert_eq!(
        h.read(&key).await,
        taken,
        "a create never touches a held row"
    );
}

/// `create` stores the start checkpoint, parents and marker it is given; read and list return
/// them; a second create leaves the row untouched.
pub async fn create_keeps_start_checkpoint(h: &Harness) {
    let latest = h.key("start", "shardId-000000000002");
    let ended = h.key("start", "shardId-000000000003");
    let parents = ["shardId-000000000000", "shardId-000000000001"];
    let mut given = row(&latest, &parents).starting_at(Some(Checkpoint::Latest));
    given.repositioned = Some("m".to_owned());
    assert!(h.create(&given).await, "create at LATEST");
    assert!(
        h.create(&row(&ended, &["shardId-000000000000"]).starting_at(Some(Checkpoint::ShardEnd)))
            .await,
        "create at SHARD_END"
    );
    let one = h.read(&latest).await;
    assert_eq!(one.checkpoint, Some(Checkpoint::Latest));
    assert_eq!(one.repositioned.as_deref(), Some("m"));
    assert_eq!(sorted(one.parents.clone()), parents.map(str::to_owned));
    assert_eq!(
        (one.owner.as_deref(), one.token.as_deref(), one.counter),
        (None, None, 1)
    );
    let two = h.read(&ended).await;
    assert!(two.is_finished(), "{two:?}");
    assert_eq!(
        (two.parents.clone(), two.repositioned.clone(), two.counter),
        (vec!["shardId-000000000000".to_owned()], None, 1)
    );
    let listed = h.store.list(latest.stream()).await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for row in &listed {
        let expected = if row.key == latest { &one } else { &two };
        assert_eq!(
            (
                &row.key,
                &row.checkpoint,
                &row.repositioned,
                sorted(row.parents.clone())
            ),
            (
                &expected.key,
                &expected.checkpoint,
                &expected.repositioned,
                sorted(expected.parents.clone())
            ),
            "list returns what read does"
        );
    }
    let mut other = row(&latest, &[]).starting_at(Some(Checkpoint::TrimHorizon));
    other.repositioned = Some("other".to_owned());
    assert!(!h.create(&other).await, "second create");
    assert!(!h.create(&row(&ended, &[])).await, "second create");
    assert_eq!(
        h.read(&latest).await,
        one,
        "a second create changes nothing"
    );
    assert_eq!(h.read(&ended).await, two, "a second create changes nothing");
    let a = holder("a", "a-1");
    let taken = written(h.take_fenced(&latest, &a, 1).await, "take");
    assert_eq!(
        (taken.checkpoint, taken.repositioned.as_deref()),
        (Some(Checkpoint::Latest), Some("m")),
        "the take keeps the start checkpoint and marker"
    );
}
