//! The import's own record in the lease table: that a KCL table was imported into a stream,
//! and what the KCL's leases of the stream stood at then. Pure.
//!
//! # Why
//!
//! An import moves rows that are behind the KCL's checkpoints forward. That is right once, at
//! the cut-over; at every later start (`.import_kcl(..)` stays in the code) it would undo what
//! the brokers and the operator did since: a shard an operator reset to `TRIM_HORIZON` would
//! be moved forward again, silently, and a row a broker re-reads after a forced reset would
//! make the import refuse, failing every new instance's `start()`.
//!
//! So the import records itself: one bookkeeping row per stream and KCL table
//! (`stream@kcl-imports:table`, beside the member rows `stream@members:owner`), holding the
//! KCL's [`Imprint`]: how many leases of the stream it had and a digest of every lease's shard
//! and `leaseCounter`. Every KCL write bumps a lease's counter, and its shard sync and
//! clean-up create and delete leases, so an unchanged imprint means the KCL has not written
//! its leases of the stream since: a later import then writes nothing, does not watch and
//! does not wait. (A sum of counters would not do: a clean-up that deletes a lease can bring
//! it back to the recorded value.) A changed imprint means the KCL ran again (a rollback, then
//! a second cut-over): the import plans again as a first one, moving forward only what is
//! behind the KCL's new checkpoints.

use std::fmt;
use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use kinesis_lease_core::{Lease, LeaseError, LeaseKey};

use crate::select::KclLease;

/// The owner the record row is written with (owner ids of brokers never start with `*`).
pub const RECORD_OWNER: &str = "*kcl-import";

/// What the marker of a record starts with.
const PREFIX: &str = "kcl-import:v2";

/// The pseudo-stream that holds `stream`'s import records.
pub fn records_stream(stream: &str) -> String {
    format!("{stream}@kcl-imports")
}

/// The key of the record of importing `kcl_table` (and, for a multi-stream KCL table, the
/// stream key `account:stream:epoch`) into `stream`.
///
/// # Errors
///
/// [`LeaseError::InvalidKey`] for an empty stream or table name.
pub fn record_key(
    stream: &str,
    kcl_table: &str,
    stream_key: Option<&str>,
) -> Result<LeaseKey, LeaseError> {
    let id = match stream_key {
        Some(key) => format!("{kcl_table}#{key}"),
        None => kcl_table.to_owned(),
    };
    LeaseKey::new(records_stream(stream), id)
}

/// What the KCL's leases of a stream stood at: their number and a digest of every lease's
/// shard and counter (SipHash-1-3 with fixed keys over the leases sorted by shard: the same
/// leases give the same digest in every release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imprint {
    /// The KCL's leases of the stream.
    pub leases: usize,
    /// The digest of their shards and `leaseCounter`s.
    pub digest: u64,
}

impl Imprint {
    /// The imprint of `leases`.
    pub fn of(leases: &[KclLease]) -> Self {
        let mut sorted: Vec<(&str, u64)> = leases
            .iter()
            .map(|l| (l.shard.as_str(), l.row.counter))
            .collect();
        sorted.sort_unstable();
        let mut hasher = SipHasher13::new_with_keys(0, 0);
        for (shard, counter) in sorted {
            hasher.write(shard.as_bytes());
            hasher.write_u8(0);
            hasher.write_u64(counter);
        }
        Self {
            leases: leases.len(),
            digest: hasher.finish(),
        }
    }

    /// The imprint a record row holds, if it is one.
    pub fn recorded(row: &Lease) -> Option<Self> {
        let marker = row.repositioned.as_deref()?.strip_prefix(PREFIX)?;
        let mut leases = None;
        let mut digest = None;
        for part in marker.split(':').filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("leases", n)) => leases = n.parse().ok(),
                Some(("digest", n)) => digest = u64::from_str_radix(n, 16).ok(),
                _ => {}
            }
        }
        Some(Self {
            leases: leases?,
            digest: digest?,
        })
    }

    /// The record row of this imprint under `key`: no owner, no checkpoint, the imprint as its
    /// marker.
    pub fn row(&self, key: LeaseKey) -> Lease {
        let mut row = Lease::new(key, Vec::new());
        row.repositioned = Some(self.to_string());
        row
    }
}

impl fmt::Display for Imprint {
    /// `kcl-import:v2:leases=N:digest=HEX`, as stored.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}:leases={}:digest={:016x}",
            self.leases, self.digest
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KclRow;

    fn lease(shard: &str, counter: u64) -> KclLease {
        KclLease {
            shard: shard.to_owned(),
            row: KclRow::lease(shard, counter),
        }
    }

    #[test]
    fn an_imprint_changes_with_any_kcl_write_and_reads_back() {
        let at = Imprint::of(&[lease("a", 4), lease("b", 9)]);
        assert_eq!(at, Imprint::of(&[lease("b", 9), lease("a", 4)]), "order");
        assert_ne!(
            at,
            Imprint::of(&[lease("a", 5), lease("b", 9)]),
            "a renewal"
        );
        assert_ne!(at, Imprint::of(&[lease("a", 4)]), "a lease deleted");
        assert_ne!(
            at,
            Imprint::of(&[lease("a", 4), lease("b", 9), lease("c", 1)]),
            "a lease created"
        );
        // A clean-up that deletes a lease while others were renewed: same count and same
        // counter sum as before, still another imprint.
        assert_ne!(
            Imprint::of(&[lease("a", 30), lease("b", 30)]),
            Imprint::of(&[lease("a", 40), lease("c", 20)])
        );
        let key = record_key("orders", "orders-kcl", None).unwrap();
        assert_eq!(key.to_string(), "orders@kcl-imports:orders-kcl");
        let row = at.row(key);
        assert_eq!(Imprint::recorded(&row), Some(at));
        let marker = row.repositioned.clone().unwrap();
        assert!(
            marker.starts_with("kcl-import:v2:leases=2:digest="),
            "{marker}"
        );
        let mut other = row.clone();
        other.repositioned = Some("TRIM_HORIZON".into());
        assert_eq!(Imprint::recorded(&other), None, "not a record");
        other.repositioned = Some("kcl-import:v2:leases=x".into());
        assert_eq!(Imprint::recorded(&other), None, "unreadable");
        assert_eq!(
            record_key("orders", "t", Some("1:orders:5"))
                .unwrap()
                .shard(),
            "t#1:orders:5"
        );
    }
}
