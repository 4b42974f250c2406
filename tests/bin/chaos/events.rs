//! The consumers' logs, read back: handled records, takes, losses and checkpoint writes.

use std::path::Path;

/// One line of a consumer's log.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) process: String,
    pub(crate) kind: Kind,
    pub(crate) shard: String,
    /// The record's sequence number; for a checkpoint, its sequence number or marker.
    pub(crate) sequence: String,
    /// The record's (or checkpoint's) place in a KPL aggregate.
    pub(crate) subsequence: Option<u64>,
    pub(crate) key: String,
    pub(crate) began: u128,
    pub(crate) ended: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Handled,
    Take,
    Lost,
    /// A checkpoint write that landed: `sequence` is the checkpoint, `began` when it was sent.
    Checkpoint,
    /// A handler attempt that failed (the record is retried): a handler began on it.
    Failed,
}

pub(crate) fn read_events(path: &Path, process: &str) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p: Vec<&str> = l.split('\t').collect();
            // A failed attempt is logged as a handled record is, after `FAIL`.
            let failed = p.first() == Some(&"FAIL");
            if failed {
                p.remove(0);
            }
            if p.len() < 7 {
                return None;
            }
            let (kind, shard) = match p[0] {
                _ if failed => (Kind::Failed, p[0]),
                "TAKE" => (Kind::Take, p[1]),
                "LOST" => (Kind::Lost, p[1]),
                "CKPT" => (Kind::Checkpoint, p[1]),
                shard => (Kind::Handled, shard),
            };
            let (sequence, subsequence) = match kind {
                Kind::Handled | Kind::Failed => (p[1].to_owned(), p[2].parse().ok()),
                // A checkpoint is written `sequence[/subsequence]`.
                Kind::Checkpoint => match p[2].split_once('/') {
                    Some((s, sub)) => (s.to_owned(), sub.parse().ok()),
                    None => (p[2].to_owned(), None),
                },
                _ => (String::new(), None),
            };
            Some(Event {
                process: process.to_owned(),
                kind,
                shard: shard.to_owned(),
                sequence,
                subsequence,
                key: p[3].to_owned(),
                began: p[5].parse().ok()?,
                ended: p[6].parse().ok()?,
            })
        })
        .collect()
}

/// Sequence numbers compared as numbers (they are up to 129 digits).
pub(crate) fn seq_key(s: &str) -> (usize, &str) {
    let t = s.trim_start_matches('0');
    (t.len(), t)
}

/// A place in a shard, ordered: the sequence number, then the place in its aggregate.
pub(crate) type Place<'a> = ((usize, &'a str), u64);

/// A record's place: a record that is not part of an aggregate comes first at its number.
pub(crate) fn record_place(sequence: &str, subsequence: Option<u64>) -> Place<'_> {
    (seq_key(sequence), subsequence.unwrap_or(0))
}

/// A checkpoint's place: one without a subsequence covers its whole aggregate.
pub(crate) fn checkpoint_place(sequence: &str, subsequence: Option<u64>) -> Place<'_> {
    (seq_key(sequence), subsequence.unwrap_or(u64::MAX))
}

/// The marker of a finished shard.
pub(crate) const SHARD_END: &str = "SHARD_END";

/// Whether a checkpoint is a sequence number rather than a marker (`SHARD_END`, ...).
pub(crate) fn numeric(checkpoint: &str) -> bool {
    !checkpoint.is_empty() && checkpoint.bytes().all(|b| b.is_ascii_digit())
}

/// A stored checkpoint (`sequence[/subsequence]` or a marker), split.
pub(crate) fn split_checkpoint(checkpoint: &str) -> (&str, Option<u64>) {
    match checkpoint.split_once('/') {
        Some((s, sub)) => (s, sub.parse().ok()),
        None => (checkpoint, None),
    }
}
