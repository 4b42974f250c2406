//! The conditional-write rules as plain functions over a row.
//!
//! Stores that evaluate conditions in process (the memory store, a store over a local
//! database) call these instead of restating the rules; stores that push conditions to a server
//! (DynamoDB's `ConditionExpression`) must express exactly the same predicates.

use crate::{Checkpoint, Holder, Lease, Lost, Take};

/// Whether a take may land on `row` (`None`: the row does not exist): its counter still equals
/// the fence. No clock takes part.
pub fn may_take(row: Option<&Lease>, take: &Take) -> bool {
    row.map_or(0, |r| r.counter) == take.fence
}

/// Whether `holder` holds `row` (owner and token), the condition of renew, checkpoint and
/// release.
pub fn holds(row: Option<&Lease>, holder: &Holder) -> bool {
    row.is_some_and(|r| r.is_held_with(holder))
}

/// Whether `asker` may mark `row` as wanted: it exists, its owner field is still `holder`, the
/// owner the asker chose to ask (not the asker itself, nor an operator's hold, which nobody
/// hands over and which a write would restart), and nobody asked for it yet.
///
/// Fenced on the holder, not on the counter: the holder writes its row at every renewal, so a
/// counter the asker listed is stale after one renew interval, and an asker whose lease table
/// answers slower than that would never land a request (it held nothing for good).
pub fn may_request(row: Option<&Lease>, asker: &str, holder: &str) -> bool {
    row.is_some_and(|r| {
        holder != asker
            && holder != EVICTED_OWNER
            && r.owner.as_deref() == Some(holder)
            && r.wanted_by.is_none()
    })
}

/// Whether `holder` may hand `row` over to `to`: it holds the row and `to` asked for it.
pub fn may_hand_over(row: Option<&Lease>, holder: &Holder, to: &str) -> bool {
    holds(row, holder) && row.is_some_and(|r| r.wanted_by.as_deref() == Some(to))
}

/// Pokes `row` about the row keyed `about` (see [`LeaseStore::poke`](crate::LeaseStore::poke)):
/// one more poke, that row's shard as the last poked, and nothing else changes (not the
/// counter).
pub fn poked(row: &mut Lease, about: &crate::LeaseKey) {
    row.pokes = row.pokes.saturating_add(1);
    row.poked = Some(about.shard().to_owned());
    row.poked_at = row.pokes;
}

/// Whether a delete observed at `observed` may remove `row`: it exists and was not written
/// since.
pub fn may_delete(row: Option<&Lease>, observed: u64) -> bool {
    row.is_some_and(|r| r.counter == observed)
}

/// Whether an operator's evict observed at `observed` may land on `row`: it exists and was
/// not written since. Who holds it does not matter: the operator frees it on purpose.
pub fn may_evict(row: Option<&Lease>, observed: u64) -> bool {
    row.is_some_and(|r| r.counter == observed)
}

/// The owner an operator's evict leaves on a row. No instance has it (owner ids never start
/// with `*`), so the evicted holder's next renewal, checkpoint or release fails and it stops.
pub const EVICTED_OWNER: &str = "*evicted";

/// The token an evict leaves on a row: not a roster token, so instances take the row only
/// once its counter has stood still for a whole lease on their own clock, as a row of an
/// instance without a member row. By then the evicted holder has stopped for sure (its keeper
/// stops within `lease - renew` of its last renewal); taking the row at once would let the
/// next owner read beside the evicted one until that one's next renewal.
pub const EVICTED_TOKEN: &str = "evicted";

/// The row as an evict leaves it: held by [`EVICTED_OWNER`] with [`EVICTED_TOKEN`] (taken by
/// an instance once it stood still for a lease), no expiry or hand-over request, and
/// `checkpoint` stored when given (the counter is the store's to bump).
pub fn evicted(row: &mut Lease, checkpoint: Option<&Checkpoint>) {
    row.owner = Some(EVICTED_OWNER.to_owned());
    row.token = Some(EVICTED_TOKEN.to_owned());
    row.expiry_ms = 0;
    row.wanted_by = None;
    if let Some(cp) = checkpoint {
        row.checkpoint = Some(cp.clone());
    }
}

/// Whether `row` was left by an operator's evict and not taken since.
pub fn is_evicted(row: &Lease) -> bool {
    row.owner.as_deref() == Some(EVICTED_OWNER)
}

/// The [`Lost`] outcome describing `row` as it stands.
pub fn lost(row: Option<&Lease>) -> Lost {
    Lost {
        holder: row.and_then(|r| r.owner.clone()),
        counter: row.map_or(0, |r| r.counter),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseKey;
    use std::time::Duration;

    fn row(owner: Option<&str>, token: Option<&str>, counter: u64) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s", "a").unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row.counter = counter;
        row
    }

    #[test]
    fn the_operators_hold_is_never_requested() {
        let hold = row(Some(EVICTED_OWNER), Some(EVICTED_TOKEN), 7);
        assert!(!may_request(Some(&hold), "b", EVICTED_OWNER));
        let held = row(Some("a"), Some("a-1"), 7);
        assert!(may_request(Some(&held), "b", "a"));
        assert!(!may_request(Some(&held), "b", "c"), "a holder not asked");
        assert!(!may_request(Some(&held), "a", "a"), "its own row");
    }

    #[test]
    fn takes_are_decided_by_the_counter_alone() {
        let ttl = Duration::from_secs(10);
        let live = row(Some("a"), Some("t1"), 7);
        assert!(may_take(Some(&live), &Take::fenced(ttl, 7)));
        assert!(!may_take(Some(&live), &Take::fenced(ttl, 6)));
        let mut expired = row(Some("a"), Some("t1"), 7);
        expired.expiry_ms = 0;
        assert!(
            !may_take(Some(&expired), &Take::fenced(ttl, 6)),
            "an expiry never decides"
        );
        assert!(may_take(None, &Take::fenced(ttl, 0)));
        assert!(!may_take(None, &Take::fenced(ttl, 1)));
    }

    #[test]
    fn an_evict_is_fenced_on_the_counter_alone_and_leaves_the_operators_hold() {
        let held = row(Some("a"), Some("t1"), 7);
        assert!(may_evict(Some(&held), 7), "whoever holds it");
        assert!(!may_evict(Some(&held), 6), "written since");
        assert!(!may_evict(None, 0), "a missing row is not created");
        let mut wanted = held.clone();
        wanted.wanted_by = Some("b".into());
        wanted.expiry_ms = 99;
        wanted.checkpoint = Some(Checkpoint::TrimHorizon);
        let mut kept = wanted.clone();
        evicted(&mut kept, None);
        assert_eq!(
            (
                kept.owner.as_deref(),
                kept.token.as_deref(),
                kept.expiry_ms,
                &kept.wanted_by
            ),
            (Some(EVICTED_OWNER), Some(EVICTED_TOKEN), 0, &None)
        );
        assert!(is_evicted(&kept) && !is_evicted(&held));
        assert!(
            !holds(Some(&kept), &crate::Holder::new("a", "t1")),
            "the evicted holder holds it no more"
        );
        assert_eq!(kept.checkpoint, Some(Checkpoint::TrimHorizon), "kept");
        assert_eq!(kept.counter, 7, "the store bumps the counter");
        evicted(&mut wanted, Some(&Checkpoint::Latest));
        assert_eq!(wanted.checkpoint, Some(Checkpoint::Latest), "stored");
    }

    #[test]
    fn holding_needs_owner_and_token() {
        let r = row(Some("a"), Some("t1"), 3);
        assert!(holds(Some(&r), &Holder::new("a", "t1")));
        assert!(
            !holds(Some(&r), &Holder::new("a", "t2")),
            "same owner id, other holding"
        );
        assert!(!holds(Some(&r), &Holder::new("b", "t1")));
        let handed = row(Some("a"), None, 3);
        assert!(!holds(Some(&handed), &Holder::new("a", "t1")));
        assert!(!holds(None, &Holder::new("a", "t1")));
    }
}
