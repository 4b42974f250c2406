//! What a keeper concludes from a row it read, and how it names what a row holds: pure
//! policy, apart from the keeper's writes and waits (`keeper`) so that it is tested alone.

use kinesis_lease_core::{Checkpoint, Holder, Lease};

/// Whether `row`, read after a release by `holder` with `checkpoint` whose answer was lost
/// and whose retry was refused, shows that release landed. A finished row (`SHARD_END`) that
/// `holder` no longer holds was finished by it: only a holder writes `SHARD_END`, and nobody
/// takes a finished row. Otherwise the row must be free and carry the released checkpoint (a
/// row taken since by another instance proves nothing either way, and counts as lost).
pub(crate) fn release_landed(
    row: &Lease,
    holder: &Holder,
    checkpoint: Option<&Checkpoint>,
) -> bool {
    if row.is_held_with(holder) {
        return false;
    }
    match checkpoint {
        Some(Checkpoint::ShardEnd) => row.is_finished(),
        Some(cp) => row.owner.is_none() && row.checkpoint.as_ref() == Some(cp),
        None => row.owner.is_none(),
    }
}

/// The checkpoint a row holds, for logs: the stored text, or `none (never checkpointed)`.
pub(crate) fn stored_checkpoint(row: &Lease) -> String {
    row.checkpoint.as_ref().map_or_else(
        || "none (never checkpointed)".to_owned(),
        ToString::to_string,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::LeaseKey;
    use kinesis_lease_core::SequenceNumber;

    fn row(owner: Option<&str>, token: Option<&str>, checkpoint: Option<Checkpoint>) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s", "shard-1").unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row.checkpoint = checkpoint;
        row
    }

    #[test]
    fn a_finished_row_no_longer_held_is_our_shard_end() {
        let me = Holder::new("x", "t");
        let end = Some(&Checkpoint::ShardEnd);
        assert!(release_landed(
            &row(None, None, Some(Checkpoint::ShardEnd)),
            &me,
            end
        ));
        // Not finished: someone took it from us before our release.
        let seq = Checkpoint::Sequence(SequenceNumber::new("5", None).unwrap());
        assert!(!release_landed(
            &row(Some("y"), Some("u"), Some(seq)),
            &me,
            end
        ));
        assert!(!release_landed(&row(None, None, None), &me, end));
    }

    #[test]
    fn a_free_row_with_our_checkpoint_is_our_release() {
        let me = Holder::new("x", "t");
        let seq = Checkpoint::Sequence(SequenceNumber::new("5", None).unwrap());
        let other = Checkpoint::Sequence(SequenceNumber::new("9", None).unwrap());
        assert!(release_landed(
            &row(None, None, Some(seq.clone())),
            &me,
            Some(&seq)
        ));
        assert!(!release_landed(
            &row(None, None, Some(other)),
            &me,
            Some(&seq)
        ));
        assert!(!release_landed(
            &row(Some("y"), Some("u"), Some(seq.clone())),
            &me,
            Some(&seq)
        ));
        assert!(release_landed(&row(None, None, None), &me, None));
        assert!(!release_landed(&row(Some("x"), Some("t"), None), &me, None));
    }

    #[test]
    fn logs_say_what_the_row_holds() {
        let mut row = Lease::new(LeaseKey::new("s", "a").unwrap(), Vec::new());
        assert_eq!(stored_checkpoint(&row), "none (never checkpointed)");
        row.checkpoint = Some(Checkpoint::TrimHorizon);
        assert_eq!(stored_checkpoint(&row), "TRIM_HORIZON");
    }
}
