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
