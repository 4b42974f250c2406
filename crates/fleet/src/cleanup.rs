//! Which rows may be deleted, so that no part of the lease table grows with the stream's
//! history (every split or merge adds rows; every instance that starts adds a member row).
//!
//! Pure: the coordinator lists, decides here, and deletes (fenced on the counter it saw).
//!
//! # Finished shards
//!
//! A finished row (`SHARD_END`) is still needed while:
//!
//! - the stream lists the shard: an instance that does not find its row would create it again
//!   and read the shard anew;
//! - one of its children has no row yet: a child is created to start at its first record
//!   because its parent has a row (see `start`); without it, the child would start where the
//!   subscription starts (`LATEST` by default) and lose records.
//!
//! Once neither holds, the row decides nothing: a child whose parent has no row and is not
//! listed counts its parent as done. It is deleted then.
//!
//! # Member rows
//!
//! A member row that is not held by its own owner id belongs to an instance that left or was
//! found dead; it is deleted (an instance that comes back with the same id creates it again).

use kinesis_lease_core::Lease;

use crate::roster;

/// The finished rows that may go: finished, no longer listed by the stream (`listed`), and
/// every child (a row naming it as parent, or a listed shard of `children_listed`) has a row.
///
/// `children_listed(shard)` gives the ids of the listed shards whose parents include `shard`.
pub(crate) fn finished(
    rows: &[Lease],
    listed: impl Fn(&str) -> bool,
    children_listed: impl Fn(&str) -> Vec<String>,
) -> Vec<&Lease> {
    let has_row = |shard: &str| rows.iter().any(|r| r.key.shard() == shard);
    rows.iter()
        .filter(|row| row.is_finished() && !listed(row.key.shard()))
        .filter(|row| {
            children_listed(row.key.shard())
                .iter()
                .all(|child| has_row(child))
        })
        .collect()
}

/// The member rows of instances that left or were found dead.
pub(crate) fn departed(members: &[Lease]) -> Vec<&Lease> {
    members.iter().filter(|r| !roster::is_present(r)).collect()
}

/// True when `me` is the member that deletes: the first present member by id, so one instance
/// does it and the others spend nothing on refused deletes.
pub(crate) fn is_janitor(members: &std::collections::BTreeSet<String>, me: &str) -> bool {
    members.iter().map(String::as_str).min() == Some(me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::{Checkpoint, LeaseKey};

    fn row(shard: &str, parents: &[&str], checkpoint: Option<Checkpoint>) -> Lease {
        Lease::new(
            LeaseKey::new("s", shard).unwrap(),
            parents.iter().map(|p| (*p).to_owned()).collect(),
        )
        .starting_at(checkpoint)
    }

    fn ids(rows: Vec<&Lease>) -> Vec<&str> {
        rows.into_iter().map(|r| r.key.shard()).collect()
    }

    #[test]
    fn a_finished_row_goes_once_unlisted_and_every_child_has_a_row() {
        let rows = vec![
            row("p", &[], Some(Checkpoint::ShardEnd)),
            row("c1", &["p"], Some(Checkpoint::TrimHorizon)),
            row("open", &[], Some(Checkpoint::TrimHorizon)),
        ];
        let none = |_: &str| Vec::new();
        // Still listed: kept.
        assert!(finished(&rows, |s| s == "p", none).is_empty());
        // Unlisted, but a listed child has no row yet: kept.
        let c2 = |s: &str| {
            if s == "p" {
                vec!["c1".to_owned(), "c2".to_owned()]
            } else {
                Vec::new()
            }
        };
        assert!(finished(&rows, |_| false, c2).is_empty());
        // Unlisted, every child has a row: goes. Unfinished rows never go.
        assert_eq!(ids(finished(&rows, |_| false, none)), vec!["p"]);
    }

    #[test]
    fn members_that_left_or_died_go_and_one_member_deletes() {
        let mut here = row("a", &[], None);
        here.key = LeaseKey::new("s@members", "a").unwrap();
        here.owner = Some("a".into());
        here.token = Some("r1.x".into());
        let mut left = here.clone();
        left.key = LeaseKey::new("s@members", "b").unwrap();
        left.owner = None;
        left.token = None;
        let mut buried = here.clone();
        buried.key = LeaseKey::new("s@members", "c").unwrap();
        let rows = vec![here, left, buried];
        assert_eq!(ids(departed(&rows)), vec!["b", "c"]);
        let members = ["b", "a", "d"].iter().map(|s| (*s).to_owned()).collect();
        assert!(is_janitor(&members, "a"));
        assert!(!is_janitor(&members, "b"));
    }
}
