//! What a KCL checkpoint means in this library's terms, and how far a checkpoint has reached:
//! pure.
//!
//! # Inclusive on both sides
//!
//! The KCL's checkpoint is the last record processed, inclusive: on restart it opens
//! `AT_SEQUENCE_NUMBER` and drops every record whose (sequence, subsequence) is at or below
//! the checkpoint (its `ProcessTask`), the subsequence being a sub-record's index inside a KPL
//! aggregate and 0 for a record that was not aggregated. This library's checkpoint is also
//! the last record settled, and the next owner resumes after it: a checkpoint with a
//! subsequence opens `AT_SEQUENCE_NUMBER` and skips what is at or below it, one without opens
//! `AFTER_SEQUENCE_NUMBER`.
//!
//! So a KCL checkpoint `(n, s)` maps to this library's `Sequence(n, Some(s))`, the
//! subsequence always kept, also when it is 0: `(n, 0)` is the first sub-record of an
//! aggregate or a whole record that was not aggregated, and the table does not say which.
//! Kept, it skips exactly what the KCL would skip in both cases (a plain record's own
//! position, `(n, none)`, sorts below `(n, 0)`). Mapped to `Sequence(n, None)` it would skip
//! the rest of an aggregate whose first sub-record alone was processed.
//!
//! # Sentinels
//!
//! `TRIM_HORIZON` and `LATEST` map to themselves (a lease the KCL never checkpointed starts
//! where the KCL would start it). `SHARD_END` maps to `SHARD_END`. The KCL stores
//! `AT_TIMESTAMP` without the time (that lives in the application's configuration), so it
//! maps only when the caller gives the time. A pending checkpoint is never a checkpoint.

use std::cmp::Ordering;

use kinesis_lease_core::{Checkpoint, SequenceNumber};

use crate::KclRow;

/// The checkpoint of this library that resumes where the KCL would, for `row`'s committed
/// checkpoint; `at_timestamp_ms` is the application's `AT_TIMESTAMP` start, if known.
///
/// # Errors
///
/// Why the row cannot be mapped: no checkpoint, `AT_TIMESTAMP` without a time, or a value that
/// is neither a sentinel nor a sequence number.
pub fn kcl_checkpoint(row: &KclRow, at_timestamp_ms: Option<u64>) -> Result<Checkpoint, String> {
    let stored = match row.checkpoint.as_deref() {
        None | Some("") => return Err("the KCL row has no checkpoint".to_owned()),
        Some(stored) => stored,
    };
    match stored {
        "SHARD_END" => Ok(Checkpoint::ShardEnd),
        "TRIM_HORIZON" => Ok(Checkpoint::TrimHorizon),
        "LATEST" => Ok(Checkpoint::Latest),
        "AT_TIMESTAMP" => at_timestamp_ms.map(Checkpoint::AtTimestamp).ok_or_else(|| {
            "the KCL checkpoint is AT_TIMESTAMP, whose time the KCL keeps in the application's \
             configuration, not in the table: give that time (--at-timestamp)"
                .to_owned()
        }),
        digits => SequenceNumber::new(digits, Some(row.checkpoint_subsequence))
            .map(Checkpoint::Sequence)
            .map_err(|_| {
                format!("the KCL checkpoint `{digits}` is neither a sentinel nor a sequence number")
            }),
    }
}

/// The KCL checkpoint as the import shows it: `sequence/subsequence` or the sentinel.
pub fn kcl_text(row: &KclRow) -> String {
    match row.checkpoint.as_deref() {
        None | Some("") => "-".to_owned(),
        Some(s) if s.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{s}/{}", row.checkpoint_subsequence)
        }
        Some(sentinel) => sentinel.to_owned(),
    }
}

/// How far a checkpoint has reached in a shard, comparable across stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Nothing settled yet: a start position (or no checkpoint).
    Nothing,
    /// Settled up to and including this record (`None` subsequence: the whole record at that
    /// sequence number, every sub-record of it).
    Record(SequenceNumber),
    /// Read and settled to its end.
    End,
}

impl Reach {
    /// How far `checkpoint` has reached.
    pub fn of(checkpoint: Option<&Checkpoint>) -> Self {
        match checkpoint {
            Some(Checkpoint::Sequence(seq)) => Reach::Record(seq.clone()),
            Some(Checkpoint::ShardEnd) => Reach::End,
            _ => Reach::Nothing,
        }
    }
}

impl PartialOrd for Reach {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Reach {
    /// Nothing < any record < End; records by sequence number, then subsequence, where no
    /// subsequence (the whole record) counts as past every sub-record of it.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Reach::Nothing, Reach::Nothing) | (Reach::End, Reach::End) => Ordering::Equal,
            (Reach::Nothing, _) | (_, Reach::End) => Ordering::Less,
            (_, Reach::Nothing) | (Reach::End, _) => Ordering::Greater,
            (Reach::Record(a), Reach::Record(b)) => a
                .with_subsequence(None)
                .cmp(&b.with_subsequence(None))
                .then_with(|| match (a.subsequence(), b.subsequence()) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Greater,
                    (Some(_), None) => Ordering::Less,
                    (Some(x), Some(y)) => x.cmp(&y),
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(checkpoint: &str, sub: u64) -> KclRow {
        KclRow {
            checkpoint: Some(checkpoint.to_owned()),
            checkpoint_subsequence: sub,
            ..KclRow::lease("shardId-0", 3)
        }
    }

    fn seq(n: &str, sub: Option<u64>) -> SequenceNumber {
        SequenceNumber::new(n, sub).unwrap()
    }

    #[test]
    fn every_kind_of_kcl_checkpoint_maps() {
        assert_eq!(
            kcl_checkpoint(&row("4959", 0), None),
            Ok(Checkpoint::Sequence(seq("4959", Some(0)))),
            "subsequence 0 is kept: it may be the first sub-record of an aggregate"
        );
        assert_eq!(
            kcl_checkpoint(&row("4959", 7), None),
            Ok(Checkpoint::Sequence(seq("4959", Some(7))))
        );
        assert_eq!(
            kcl_checkpoint(&row("SHARD_END", 0), None),
            Ok(Checkpoint::ShardEnd)
        );
        assert_eq!(
            kcl_checkpoint(&row("TRIM_HORIZON", 0), None),
            Ok(Checkpoint::TrimHorizon)
        );
        assert_eq!(
            kcl_checkpoint(&row("LATEST", 0), None),
            Ok(Checkpoint::Latest)
        );
        assert_eq!(
            kcl_checkpoint(&row("AT_TIMESTAMP", 0), Some(1_700)),
            Ok(Checkpoint::AtTimestamp(1_700))
        );
        assert!(kcl_checkpoint(&row("AT_TIMESTAMP", 0), None)
            .unwrap_err()
            .contains("--at-timestamp"));
        assert!(kcl_checkpoint(&row("12ab", 0), None).is_err());
        assert!(kcl_checkpoint(&KclRow::lease("shardId-0", 1), None).is_err());
    }

    #[test]
    fn a_pending_checkpoint_is_never_the_checkpoint() {
        let mut pending = row("100", 2);
        pending.pending_checkpoint = Some("200".into());
        pending.pending_checkpoint_subsequence = 5;
        assert_eq!(
            kcl_checkpoint(&pending, None),
            Ok(Checkpoint::Sequence(seq("100", Some(2))))
        );
        let mut only_pending = KclRow::lease("shardId-0", 1);
        only_pending.checkpoint = Some("TRIM_HORIZON".into());
        only_pending.pending_checkpoint = Some("200".into());
        assert_eq!(
            kcl_checkpoint(&only_pending, None),
            Ok(Checkpoint::TrimHorizon)
        );
    }

    #[test]
    fn the_mapped_checkpoint_skips_exactly_what_the_kcl_skips() {
        // The reader skips every record at or below a checkpoint with a subsequence.
        let skip = |cp: &Checkpoint, record: &SequenceNumber| match cp {
            Checkpoint::Sequence(at) => record <= at,
            _ => unreachable!(),
        };
        let cp = kcl_checkpoint(&row("50", 0), None).unwrap();
        assert!(skip(&cp, &seq("50", None)), "the plain record itself");
        assert!(skip(&cp, &seq("50", Some(0))), "sub-record 0");
        assert!(!skip(&cp, &seq("50", Some(1))), "sub-record 1 is next");
        assert!(!skip(&cp, &seq("51", None)));
        let mid = kcl_checkpoint(&row("50", 3), None).unwrap();
        assert!(skip(&mid, &seq("50", Some(3))));
        assert!(!skip(&mid, &seq("50", Some(4))));
    }

    #[test]
    fn reach_orders_whole_records_past_their_sub_records() {
        let at = |n: &str, sub| Reach::Record(seq(n, sub));
        assert!(Reach::Nothing < at("1", None));
        assert!(at("9", None) < at("10", Some(0)));
        assert!(at("10", Some(3)) < at("10", Some(4)));
        assert!(at("10", Some(u64::MAX)) < at("10", None));
        assert_eq!(at("010", Some(2)).cmp(&at("10", Some(2))), Ordering::Equal);
        assert!(at("99999", None) < Reach::End);
        assert_eq!(Reach::of(Some(&Checkpoint::TrimHorizon)), Reach::Nothing);
        assert_eq!(Reach::of(Some(&Checkpoint::AtTimestamp(5))), Reach::Nothing);
        assert_eq!(Reach::of(None), Reach::Nothing);
        assert_eq!(Reach::of(Some(&Checkpoint::ShardEnd)), Reach::End);
    }

    #[test]
    fn kcl_text_shows_the_subsequence_of_sequence_numbers_only() {
        assert_eq!(kcl_text(&row("4959", 0)), "4959/0");
        assert_eq!(kcl_text(&row("SHARD_END", 0)), "SHARD_END");
        assert_eq!(kcl_text(&KclRow::lease("x", 1)), "-");
    }
}
