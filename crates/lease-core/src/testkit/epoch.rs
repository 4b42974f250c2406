//! Checks of the epoch rule: each stream has its own counter of writes that free rows, apart
//! from the rows.

use super::{row, Harness};

/// Epochs start at 0, bump by one per call, and are per stream.
pub async fn epochs_bump_per_stream(h: &Harness) {
    let (one, two) = (h.key("epoch1", "x"), h.key("epoch2", "x"));
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 0);
    h.store.bump_epoch(one.stream()).await.expect("bump");
    h.store.bump_epoch(one.stream()).await.expect("bump");
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 2);
    assert_eq!(h.store.epoch(two.stream()).await.expect("epoch"), 0);
    assert!(h.create(&row(&one, &[])).await);
    let rows = h.store.list(one.stream()).await.expect("list");
    assert_eq!(rows.len(), 1, "epochs are not rows");
    assert_eq!(h.store.epoch(one.stream()).await.expect("epoch"), 2);
}

/// One read of [`LeaseStore::epochs`](crate::LeaseStore::epochs) tells both epochs: a bump of
/// the roster's epoch moves `roster` and not `rows`, a bump of the stream's moves `rows` and
/// not `roster`; another stream's bumps move neither.
pub async fn epochs_tell_the_roster_apart(h: &Harness) {
    let stream = h.key("epochs1", "x").stream().to_owned();
    let other = h.key("epochs2", "x").stream().to_owned();
    let members = crate::LeaseKey::members_stream(&stream);
    let read = || async { h.store.epochs(&stream).await.expect("epochs") };
    let start = read().await;
    h.store.bump_epoch(&members).await.expect("bump");
    let after_roster = read().await;
    assert_eq!(
        after_roster.rows, start.rows,
        "a roster bump moved the rows"
    );
    assert_ne!(
        after_roster.roster, start.roster,
        "a roster bump went unseen"
    );
    h.store.bump_epoch(&stream).await.expect("bump");
    let after_rows = read().await;
    assert_ne!(
        after_rows.rows, after_roster.rows,
        "a stream bump went unseen"
    );
    assert_eq!(
        after_rows.roster, after_roster.roster,
        "a stream bump moved the roster"
    );
    h.store.bump_epoch(&other).await.expect("bump");
    h.store
        .bump_epoch(&crate::LeaseKey::members_stream(&other))
        .await
        .expect("bump");
    assert_eq!(
        read().await,
        after_rows,
        "another stream's bumps moved this one's"
    );
    assert_eq!(
        h.store.epoch(&stream).await.expect("epoch"),
        after_rows.rows,
        "`epochs` and `epoch` disagree on the stream's epoch"
    );
}

/// An eventually consistent read gives the row as written, or (a replica behind) nothing yet
/// for a row just created; never another row, and `None` for a row never written.
pub async fn eventual_reads_show_written_rows(h: &Harness) {
    let key = h.key("eventual", "x");
    let missing = h.key("eventual", "never");
    assert!(h.create(&row(&key, &["p"])).await);
    let consistent = h.store.read(&key).await.expect("read").expect("row");
    if let Some(eventual) = h.store.read_eventually(&key).await.expect("eventual read") {
        assert_eq!(
            eventual, consistent,
            "an eventual read showed a row never written"
        );
    }
    assert_eq!(
        h.store
            .read_eventually(&missing)
            .await
            .expect("eventual read"),
        None,
        "a row never written was read"
    );
}
