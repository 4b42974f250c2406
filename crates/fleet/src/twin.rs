//! Telling a live twin (another process running with this owner id) from the rows a crashed
//! earlier run of this id left behind.
//!
//! Pure: no store, no clock, no tokio. The start probe (`Coordinator::probe_owner`) and the
//! coordinator's listings read the rows; this module only judges two sightings of one row.
//!
//! # Why the counter alone proves nothing
//!
//! A row that names this owner id with a token this process never wrote belongs to a twin or
//! to a crashed run. Both look the same in one reading; only a *write by the holder* between
//! two readings (a renewal or a checkpoint, which need the holder's token) proves that a
//! process holding it is alive. Every landed write moves the counter by one, but one write
//! that moves it keeps owner and token without being the holder's: another instance's
//! hand-over `request`, which marks the row wanted. It lands only on a row nobody wants yet,
//! and only takes, releases and hand-overs (which change owner or token) clear the mark, so
//! between two sightings of one holding at most one request landed, and only if the mark
//! appeared. A counter that moved further than that was written by the holder.
//!
//! A member row (`<stream>@members`, see `roster`) is never asked for, so any move of a
//! present member row's counter under the same token is its holder's renewal.

use kinesis_lease_core::Lease;

/// What one reading showed of a row: who held it, with which token, its counter, and whether
/// it was marked wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sighting<'a> {
    pub(crate) owner: Option<&'a str>,
    pub(crate) token: Option<&'a str>,
    pub(crate) counter: u64,
    pub(crate) wanted: bool,
}

impl<'a> Sighting<'a> {
    /// What `row` shows.
    pub(crate) fn of(row: &'a Lease) -> Self {
        Self {
            owner: row.owner.as_deref(),
            token: row.token.as_deref(),
            counter: row.counter,
            wanted: row.wanted_by.is_some(),
        }
    }
}

/// True when, between `before` and `after` (two readings of one row, in that order), the
/// holder of the row wrote to it: the same holding (owner and a token) stands, and its counter
/// moved further than one hand-over request by another instance explains.
pub(crate) fn holder_wrote(before: Sighting<'_>, after: Sighting<'_>) -> bool {
    let same_holding =
        before.token.is_some() && before.owner == after.owner && before.token == after.token;
    // A request lands only on a row nobody wants yet, and nothing that keeps the holding
    // clears the mark: at most one between the two readings.
    let requests = u64::from(!before.wanted && after.wanted);
    same_holding && after.counter > before.counter.saturating_add(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(token: Option<&'static str>, counter: u64, wanted: bool) -> Sighting<'static> {
        Sighting {
            owner: Some("x"),
            token,
            counter,
            wanted,
        }
    }

    #[test]
    fn a_renewal_or_checkpoint_is_the_holders() {
        assert!(holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("t"), 6, false)
        ));
        // Renewals keep the mark of an earlier request.
        assert!(holder_wrote(
            seen(Some("t"), 5, true),
            seen(Some("t"), 6, true)
        ));
    }

    #[test]
    fn one_request_by_another_instance_is_not() {
        assert!(!holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("t"), 6, true)
        ));
        assert!(!holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("t"), 5, false)
        ));
    }

    #[test]
    fn a_request_and_a_renewal_are_the_holders() {
        assert!(holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("t"), 7, true)
        ));
    }

    #[test]
    fn another_holding_or_no_token_proves_nothing() {
        assert!(!holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("u"), 9, false)
        ));
        assert!(!holder_wrote(seen(None, 5, false), seen(None, 9, false)));
        let other = Sighting {
            owner: Some("y"),
            ..seen(Some("t"), 9, false)
        };
        assert!(!holder_wrote(seen(Some("t"), 5, false), other));
        // A row deleted and created again starts its counter over.
        assert!(!holder_wrote(
            seen(Some("t"), 5, false),
            seen(Some("t"), 2, false)
        ));
    }
}
