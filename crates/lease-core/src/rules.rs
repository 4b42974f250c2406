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

/// The [`Lost`] outcome describing `row` as it stands.
pub fn lost(row: Option<&Lease>) -> Lost {
    Lost {
        holder: row.and_then(|r| r.owner.clone()),
        counter: row.map_or(0, |r| r.counter),
    }
}
