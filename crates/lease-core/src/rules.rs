//! The conditional-write rules as plain functions over a row.
//!
//! Stores that evaluate conditions in process (the memory store, a store over a local
//! database) call these instead of restating the rules; stores that push conditions to a server
//! (DynamoDB's `ConditionExpression`) must express exactly the same predicates.

use crate::{Lease, Lost, Take};

/// Whether `owner` may take `row` (`None`: the row does not exist) at `now_ms`.
pub fn may_take(row: Option<&Lease>, owner: &str, take: &Take, now_ms: u64) -> bool {
    match take.fence {
        Some(fence) => row.map_or(0, |r| r.counter) == fence,
        None => {
            row.is_none_or(|r| r.owner.is_none() || r.is_held_by(owner) || r.expiry_ms <= now_ms)
        }
    }
}

/// Whether `owner` holds `row`, the condition of renew, checkpoint and release.
pub fn holds(row: Option<&Lease>, owner: &str) -> bool {
    row.is_some_and(|r| r.is_held_by(owner))
}

/// Whether `asker` may mark `row` as wanted: it exists, still has the counter the asker
/// observed, is held by someone else, and nobody asked for it yet.
pub fn may_request(row: Option<&Lease>, asker: &str, observed: u64) -> bool {
    row.is_some_and(|r| {
        r.counter == observed
            && r.owner.as_deref().is_some_and(|o| o != asker)
            && r.wanted_by.is_none()
    })
}

/// Whether `owner` may hand `row` over to `to`: it holds the row and `to` asked for it.
pub fn may_hand_over(row: Option<&Lease>, owner: &str, to: &str) -> bool {
    holds(row, owner) && row.is_some_and(|r| r.wanted_by.as_deref() == Some(to))
}

/// The [`Lost`] outcome describing `row` as it stands.
pub fn lost(row: Option<&Lease>) -> Lost {
    Lost {
        holder: row.and_then(|r| r.owner.clone()),
        counter: row.map_or(0, |r| r.counter),
    }
}
