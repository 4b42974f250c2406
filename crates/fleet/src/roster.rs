//! The roster: which instances of a subscription are alive, so no instance has to read every
//! shard row to find out.
//!
//! Pure: no store, no clock, no tokio. The I/O lives in `member.rs` (joining, renewing) and in
//! the coordinator (watching, listing).
//!
//! # Why a roster
//!
//! Without one, an instance learns that another has crashed only by seeing each of that
//! instance's shard rows stand still for a lease duration, so every instance must read every
//! row all the time: reads grow with shards times instances. With a roster, each instance holds
//! one *member row* (stream `<stream>@members`, shard its owner id), taken with a fenced take
//! and renewed every renew interval, and every shard keeper stops when its instance's member
//! row has not been renewed within `lease - renew` (as it does for its own row). So:
//!
//! - **A member row that stood still for a lease proves that all of its instance's keepers
//!   stopped.** The member watching it (its successor in a ring of owner ids) then takes the
//!   member row, fenced on the counter it saw, so no late renewal can land and revive them,
//!   and tells the others (the roster epoch and the rows epoch).
//! - **A shard row whose owner is not a member may be taken at once**, fenced on the counter
//!   seen in a listing made *before* the roster listing that showed the owner absent: an owner
//!   joins before it takes any row, so an owner absent after the listing held nothing then that
//!   it could still act on (it left after its keepers finished, or its keepers had stopped
//!   before its member row was taken).
//! - **A shard row whose owner is a member is that member's business**: the others never take
//!   it without a hand-over.
//!
//! Steady state then costs each instance one small read per take interval (the stream's epoch
//! item: the rows' epoch and the roster's count of bumps), one per list interval (the member
//! row it watches, eventually consistent while it shows the member alive) and two per lease
//! (the member after that one, and the roster's own epoch), whatever the number of shards and
//! of instances; shard rows and the roster are listed only when something changed.
//!
//! # Rows from before the roster
//!
//! Tokens written under the roster start with [`TOKEN_PREFIX`]. A row held with any other token
//! was taken by an instance that has no member row and whose keepers ignore it, so it may only
//! be taken once its counter stood still for a lease, as before; while such rows exist the
//! coordinator lists every list interval.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kinesis_lease_core::Lease;

/// The start of every token written by an instance that runs the roster.
pub(crate) const TOKEN_PREFIX: &str = "r1.";

/// The pseudo-stream holding `stream`'s member rows. `@` is never part of a stream name, so it
/// cannot collide with a stream.
pub(crate) fn members_stream(stream: &str) -> String {
    kinesis_lease_core::LeaseKey::members_stream(stream)
}

/// A fresh token for one holding: random, so no two holdings share one, and marked as written
/// under the roster.
pub(crate) fn new_token() -> String {
    format!(
        "{TOKEN_PREFIX}{:016x}{:016x}",
        fastrand::u64(..),
        fastrand::u64(..)
    )
}

/// A fresh token for a holding that came by a hand-over taken at `now_ms` (the taker's
/// clock): [`new_token`] with the moment after it, so that another member planning a move by
/// load can tell from a listing or a read of the row that the shard changed hands a moment ago
/// and stays (`load_plan::dwell`): a shard moves at most once in a handed shard's dwell,
/// whoever asks for it. Equal tokens are all that fencing compares, and an earlier release
/// looks only at the prefix, so the suffix changes nothing else.
pub(crate) fn new_token_handed(now_ms: u64) -> String {
    format!("{}{HANDED}{now_ms}", new_token())
}

/// What marks a token of a holding that came by a hand-over ([`new_token_handed`]).
const HANDED: &str = ".h";

/// When the holding `token` names was taken by a hand-over, by its taker's clock (ms since the
/// epoch); `None` for any other take, or a token of another form.
pub(crate) fn handed_at(token: &str) -> Option<u64> {
    let (_, at) = token.strip_prefix(TOKEN_PREFIX)?.rsplit_once(HANDED)?;
    at.parse().ok()
}

/// True when `token` names a holding taken by a hand-over less than `dwell_ms` before
/// `now_ms` ([`handed_at`]), by the clocks of its taker and of the reader. A time more than
/// `dwell_ms` ahead of `now_ms` is a clock far off, not a hand-over to wait for: it counts as
/// none, so a row stays for at most twice the dwell however far the taker's clock runs ahead;
/// a taker's clock behind the reader's shortens the dwell by as much, to nothing at a dwell.
pub(crate) fn handed_within(token: &str, now_ms: u64, dwell_ms: u64) -> bool {
    handed_at(token).is_some_and(|at| {
        now_ms < at.saturating_add(dwell_ms) && at <= now_ms.saturating_add(dwell_ms)
    })
}

/// True when `token` was written by an instance that runs the roster.
pub(crate) fn is_roster_token(token: &str) -> bool {
    token.starts_with(TOKEN_PREFIX)
}

/// True when `row`, `member`'s member row, shows it present (held under a roster token) and
/// taking nothing: it publishes capacity 0 from the moment its shutdown begins, and until its
/// join is announced (its roster bump landed; the renewal after the announcement is sent at
/// once).
pub(crate) fn shows_leaving(row: &Lease, member: &str) -> bool {
    row.is_held_by(member)
        && row.token.as_deref().is_some_and(is_roster_token)
        && row
            .load
            .as_ref()
            .is_some_and(|load| load.capacity_milli == Some(0))
}

/// True when `row` (a member row) says its instance is a member: held by the owner id it is
/// keyed by, with a token. A member row held by another id was taken from a dead member; a
/// free one was left by a member that left.
pub(crate) fn is_present(row: &Lease) -> bool {
    row.owner.as_deref() == Some(row.key.shard()) && row.token.is_some()
}

/// The owner ids of the members present in a listing of member rows.
pub(crate) fn present(rows: &[Lease]) -> BTreeSet<String> {
    rows.iter()
        .filter(|r| is_present(r))
        .map(|r| r.key.shard().to_owned())
        .collect()
}

/// The members present in a listing of member rows, with their holding's token: a member that
/// left or was buried and came back under its own id holds a new one.
pub(crate) fn holdings(rows: &[Lease]) -> BTreeMap<String, Option<String>> {
    rows.iter()
        .filter(|r| is_present(r))
        .map(|r| (r.key.shard().to_owned(), r.token.clone()))
        .collect()
}

/// The member `me` would watch had nobody joined since it saw the members `seen` (with their
/// holdings): among `members` (with theirs), one whose holding is not the one seen joined
/// since, even under an id seen before (buried by another member and back within one watch).
pub(crate) fn successor_without_joins<'a>(
    seen: &BTreeMap<String, Option<String>>,
    members: &'a BTreeMap<String, Option<String>>,
    me: &str,
) -> Option<&'a str> {
    let stayed: BTreeSet<String> = members
        .iter()
        .filter(|(id, token)| seen.get(*id) == Some(*token))
        .map(|(id, _)| id.clone())
        .collect();
    let old = successor(&stayed, me)?;
    members.get_key_value(old).map(|(id, _)| id.as_str())
}

/// The member `me` watches: the next owner id after `me` in sorted order, wrapping around, so
/// every member is watched by exactly one other while all see the same roster. `None` when
/// `me` is alone.
pub(crate) fn successor<'a>(members: &'a BTreeSet<String>, me: &str) -> Option<&'a str> {
    let mut others: Vec<&str> = members
        .iter()
        .map(String::as_str)
        .filter(|m| *m != me)
        .collect();
    others.sort_unstable();
    others
        .iter()
        .find(|m| **m > me)
        .or_else(|| others.first())
        .copied()
}

/// How long a member row's counter must stand still (on the watcher's clock) for its member
/// to be dead: a whole lease. The one definition the verdict and the watch's schedule share.
pub(crate) fn dead_after(lease: Duration) -> Duration {
    lease
}

/// Whether a member whose row's counter has stood still for `still` (on the watcher's clock,
/// since the watcher first saw that counter) is dead: it stood still for [`dead_after`].
pub(crate) fn is_dead(still: Duration, lease: Duration) -> bool {
    still >= dead_after(lease)
}

/// Reads a second of one epoch item the whole fleet may send: 2,000 eventually consistent
/// reads are 1,000 RCU/s, a third of DynamoDB's limit per partition (3,000), so the stream's
/// epoch and the roster's together stay within it should they share a partition.
const EPOCH_READS_PER_SECOND: f64 = 2_000.0;

/// How often each of `members` instances reads an epoch it would read every `every`: every
/// `every` up to 2,000 reads a second in all (2,000 instances at 1 s), then less often, so the
/// item's reads stay at 2,000 a second however large the fleet (5 s at 10,000 instances).
/// Noticing a freed row takes as long; below 2,000 instances nothing changes.
pub(crate) fn epoch_interval(every: Duration, members: usize) -> Duration {
    every.max(Duration::from_secs_f64(
        members as f64 / EPOCH_READS_PER_SECOND,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::LeaseKey;

    #[test]
    fn epoch_reads_of_the_whole_fleet_stay_within_a_partitions_limit() {
        let second = Duration::from_secs(1);
        assert_eq!(epoch_interval(second, 3), second);
        assert_eq!(epoch_interval(second, 2_000), second);
        assert_eq!(
            epoch_interval(Duration::from_secs(2), 100),
            Duration::from_secs(2)
        );
        for members in [2_001, 10_000, 100_000] {
            let per_second = members as f64 / epoch_interval(second, members).as_secs_f64();
            assert!(per_second <= 2_000.0 + 1e-6, "{members}: {per_second}");
        }
        assert_eq!(epoch_interval(second, 10_000), Duration::from_secs(5));
    }

    fn member(id: &str, owner: Option<&str>, token: Option<&str>) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s@members", id).unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_member_is_present_only_while_it_holds_its_own_row() {
        let rows = vec![
            member("a", Some("a"), Some("r1.x")),
            // Taken from a dead member by `c`.
            member("b", Some("c"), Some("r1.y")),
            // Left.
            member("d", None, None),
            // Handed (no token): not a holding.
            member("e", Some("e"), None),
        ];
        assert_eq!(present(&rows), set(&["a"]));
    }

    fn holding(members: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        members
            .iter()
            .map(|(id, token)| ((*id).to_owned(), Some((*token).to_owned())))
            .collect()
    }

    #[test]
    fn a_member_back_under_its_own_id_counts_as_joined() {
        let seen = holding(&[("a", "1"), ("c", "2"), ("e", "3")]);
        // Nobody joined: the successor stays.
        assert_eq!(successor_without_joins(&seen, &seen, "a"), Some("c"));
        // c buried by another member and back under its own id, all between two watches of
        // a: the member after it is a's to watch until c's new holding proves alive.
        let back = holding(&[("a", "1"), ("c", "9"), ("e", "3")]);
        assert_eq!(successor_without_joins(&seen, &back, "a"), Some("e"));
        // A new id between: the same.
        let joined = holding(&[("a", "1"), ("b", "7"), ("c", "2"), ("e", "3")]);
        assert_eq!(successor_without_joins(&seen, &joined, "a"), Some("c"));
        // Everyone else new: none.
        assert_eq!(
            successor_without_joins(&seen, &holding(&[("a", "1"), ("c", "8")]), "a"),
            None
        );
        let rows = [
            member("a", Some("a"), Some("1")),
            member("c", Some("a"), Some("5")),
            member("e", None, None),
        ];
        assert_eq!(holdings(&rows), holding(&[("a", "1")]));
    }

    #[test]
    fn every_member_is_watched_by_exactly_one_other() {
        let members = set(&["d", "a", "c", "b"]);
        let watched: Vec<&str> = ["a", "b", "c", "d"]
            .iter()
            .map(|m| successor(&members, m).unwrap())
            .collect();
        assert_eq!(watched, ["b", "c", "d", "a"]);
        assert_eq!(successor(&set(&["a"]), "a"), None);
        assert_eq!(successor(&set(&["a", "b"]), "b"), Some("a"));
        // A member not yet in the roster it read still watches someone.
        assert_eq!(successor(&set(&["a", "c"]), "b"), Some("c"));
    }

    #[test]
    fn tokens_say_whether_they_were_written_under_the_roster() {
        let token = new_token();
        assert!(is_roster_token(&token));
        assert_ne!(token, new_token());
        assert!(!is_roster_token("0123456789abcdef0123456789abcdef"));
        assert_eq!(members_stream("orders"), "orders@members");
    }

    #[test]
    fn a_handed_token_says_when_its_hand_over_was_taken() {
        let token = new_token_handed(1_700_000_123_456);
        assert!(is_roster_token(&token));
        assert_eq!(handed_at(&token), Some(1_700_000_123_456));
        assert_ne!(token, new_token_handed(1_700_000_123_456));
        assert_eq!(handed_at(&new_token()), None);
        // Another form, or a suffix that is no time, says nothing.
        assert_eq!(handed_at("0123456789abcdef.h12"), None);
        assert_eq!(handed_at("r1.0123456789abcdef.hx"), None);
    }

    #[test]
    fn a_handed_token_stays_for_the_dwell_and_a_clock_far_ahead_counts_as_none() {
        let dwell = 180_000;
        let token = new_token_handed(1_000_000);
        assert!(handed_within(&token, 1_000_000, dwell));
        assert!(handed_within(&token, 1_179_999, dwell));
        assert!(!handed_within(&token, 1_180_000, dwell));
        // The taker's clock a minute ahead of the reader's: a minute more.
        assert!(handed_within(&token, 940_000, dwell));
        // Exactly a dwell ahead still counts; a millisecond more is a clock far off.
        assert!(handed_within(&token, 820_000, dwell));
        assert!(!handed_within(&token, 819_999, dwell));
        assert!(!handed_within(&new_token(), 1_000_000, dwell));
        assert!(!handed_within(&new_token_handed(u64::MAX), 0, dwell));
    }

    #[test]
    fn dead_after_a_whole_lease_of_standing_still() {
        let lease = Duration::from_secs(10);
        assert!(!is_dead(Duration::from_millis(9_999), lease));
        assert!(is_dead(lease, lease));
    }
}
