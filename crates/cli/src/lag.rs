//! How far a checkpoint is behind its shard's tip, asked of Kinesis: one GetShardIterator at
//! the checkpoint and one GetRecords of at most [`PROBE_LIMIT`] records per shard.
//!
//! The time comes from GetRecords' `MillisBehindLatest`; the record count is exact only when
//! that one page reached the tip (fewer records than the limit and 0 ms behind), else it is a
//! lower bound. Finished rows and rows without a real position (`LATEST`, none) are not asked.
//!
//! A checkpoint inside record `n` (`n/s`, as the KCL import writes every checkpoint, `n/0` for
//! a plain record) is probed at `n`, where a reader opens, so the page starts with record `n`
//! itself: it counts as its sub-records after `s` when it is a KPL aggregate, and not at all
//! otherwise (a reader skips a plain record, or a malformed aggregate it delivers whole, at
//! or below `n/s`), so a caught-up row shows 0 ([`pending_in_page`]).
//!
//! A checkpoint Kinesis refuses to open (InvalidArgumentException, or ResourceNotFound from
//! an emulator) while it opens the same shard at `TRIM_HORIZON` is [`Probe::Refused`]: every
//! reader's GetShardIterator there is refused too, so the shard is stuck until an operator
//! moves its checkpoint. Refused at both, it is the shard (gone, access denied), not the
//! checkpoint: [`Probe::Failed`].

use std::cmp::Ordering;
use std::sync::Arc;

use kinesis_lease_core::{Checkpoint, Lease};
use kinesis_stream_core::{KinesisApi, ReaderError, Record, StartAt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Records one probe reads at most.
pub const PROBE_LIMIT: usize = 100;

/// Shards probed at once.
const PARALLEL: usize = 8;

/// How far one checkpoint is behind the tip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind {
    /// `MillisBehindLatest` of the page read after the checkpoint.
    pub millis: Option<u64>,
    /// The records after the checkpoint: exact, or at least this many.
    pub records: Records,
}

/// A record count, exact or a lower bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// Exactly this many records follow the checkpoint.
    Exactly(u64),
    /// At least this many (the probe did not reach the tip).
    AtLeast(u64),
}

/// What one probe page says: `read` records read with `limit`, `pending` of them still to
/// process ([`pending_in_page`]), `millis` behind the tip.
pub fn behind_from_page(read: usize, pending: u64, millis: Option<u64>, limit: usize) -> Behind {
    let at_tip = millis == Some(0) && read < limit;
    Behind {
        millis,
        records: if at_tip {
            Records::Exactly(pending)
        } else {
            Records::AtLeast(pending)
        },
    }
}

/// How many of `records`, read from `position`, are still to process. Opened inside record
/// `n` (`AtSequence(n/s)`), the page starts with `n`: a KPL aggregate counts its sub-records
/// after `s`, anything else (a plain record, a malformed aggregate readers deliver whole)
/// nothing, as a reader skips it. Every other record counts one.
pub fn pending_in_page(records: &[Record], position: &StartAt) -> u64 {
    let all = records.len() as u64;
    let StartAt::AtSequence(at) = position else {
        return all;
    };
    let (Some(subsequence), Some(first)) = (at.subsequence(), records.first()) else {
        return all;
    };
    if first
        .sequence
        .with_subsequence(None)
        .cmp(&at.with_subsequence(None))
        != Ordering::Equal
    {
        // Record `n` is gone (trimmed): every record read follows the checkpoint.
        return all;
    }
    let left = match kinesis_kpl::deaggregate(&first.payload) {
        Ok(Some(subs)) => (subs.len() as u64).saturating_sub(subsequence.saturating_add(1)),
        Ok(None) | Err(_) => 0,
    };
    all - 1 + left
}

/// Where to open the probe's iterator for `checkpoint`, or `None` when there is nothing to
/// measure (finished, `LATEST`, never checkpointed).
pub fn probe_position(checkpoint: Option<&Checkpoint>) -> Option<StartAt> {
    match checkpoint? {
        Checkpoint::Sequence(seq) if seq.subsequence().is_some() => {
            // Inside a KPL aggregate: its record is read again.
            Some(StartAt::AtSequence(seq.clone()))
        }
        Checkpoint::Sequence(seq) => Some(StartAt::AfterSequence(seq.clone())),
        Checkpoint::TrimHorizon => Some(StartAt::TrimHorizon),
        Checkpoint::AtTimestamp(ms) => Some(StartAt::at_millis(*ms)),
        Checkpoint::Latest | Checkpoint::ShardEnd => None,
    }
}

/// One shard's probe outcome.
#[derive(Debug)]
pub enum Probe {
    /// Not asked: nothing to measure (finished, `LATEST`, never checkpointed).
    NotAsked,
    /// How far behind the tip the checkpoint is.
    Behind(Behind),
    /// Kinesis refuses to open the shard at its checkpoint, though it opens it at
    /// `TRIM_HORIZON`: no reader can go on from the checkpoint, the shard is stuck. The error
    /// is Kinesis' answer at the checkpoint.
    Refused(ReaderError),
    /// Kinesis could not say (throttled, a 5xx, the shard gone, access denied).
    Failed(ReaderError),
}

/// Probes every row of `stream` at once (8 in parallel), calling `progress(done, total)`
/// after each; the outcomes come back in the order of `rows`.
pub async fn probe_all(
    kinesis: Arc<dyn KinesisApi>,
    stream: &str,
    rows: &[Lease],
    progress: &mut dyn FnMut(usize, usize),
) -> Vec<Probe> {
    let gate = Arc::new(Semaphore::new(PARALLEL));
    let mut tasks = JoinSet::new();
    for (i, row) in rows.iter().enumerate() {
        let Some(position) = probe_position(row.checkpoint.as_ref()) else {
            continue;
        };
        let (kinesis, gate) = (kinesis.clone(), gate.clone());
        let (stream, shard) = (stream.to_owned(), row.key.shard().to_owned());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            (i, probe(&*kinesis, &stream, &shard, &position).await)
        });
    }
    let mut out: Vec<Probe> = rows.iter().map(|_| Probe::NotAsked).collect();
    let total = tasks.len();
    let mut done = 0;
    while let Some(joined) = tasks.join_next().await {
        if let Ok((i, outcome)) = joined {
            out[i] = outcome;
        }
        done += 1;
        progress(done, total);
    }
    out
}

async fn probe(kinesis: &dyn KinesisApi, stream: &str, shard: &str, position: &StartAt) -> Probe {
    let iterator = match kinesis.shard_iterator(stream, shard, position).await {
        Ok(iterator) => iterator,
        Err(error @ (ReaderError::Refused { .. } | ReaderError::ShardNotFound { .. })) => {
            // The checkpoint or the shard? Kinesis opening the shard at its oldest record
            // says the checkpoint.
            return match kinesis
                .shard_iterator(stream, shard, &StartAt::TrimHorizon)
                .await
            {
                Ok(_) if *position != StartAt::TrimHorizon => Probe::Refused(error),
                _ => Probe::Failed(error),
            };
        }
        Err(error) => return Probe::Failed(error),
    };
    match kinesis
        .get_records(stream, shard, &iterator, PROBE_LIMIT)
        .await
    {
        Ok(page) => Probe::Behind(behind_from_page(
            page.records.len(),
            pending_in_page(&page.records, position),
            page.millis_behind,
            PROBE_LIMIT,
        )),
        Err(error) => Probe::Failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::SequenceNumber;

    #[test]
    fn the_count_is_exact_only_when_the_page_reached_the_tip() {
        assert_eq!(
            behind_from_page(3, 3, Some(0), 100),
            Behind {
                millis: Some(0),
                records: Records::Exactly(3)
            }
        );
        assert_eq!(
            behind_from_page(0, 0, Some(0), 100).records,
            Records::Exactly(0)
        );
        assert_eq!(
            behind_from_page(1, 0, Some(0), 100).records,
            Records::Exactly(0),
            "the record at the checkpoint, processed"
        );
        assert_eq!(
            behind_from_page(100, 99, Some(0), 100).records,
            Records::AtLeast(99)
        );
        assert_eq!(
            behind_from_page(7, 7, Some(5_000), 100).records,
            Records::AtLeast(7)
        );
        assert_eq!(
            behind_from_page(7, 7, None, 100).records,
            Records::AtLeast(7)
        );
    }

    fn record(number: &str, payload: bytes::Bytes) -> Record {
        Record::new(payload, "k", SequenceNumber::new(number, None).unwrap())
    }

    #[test]
    fn only_what_a_reader_delivers_after_the_checkpoint_is_pending() {
        let mut aggregator = kinesis_kpl::Aggregator::new();
        for key in ["a", "b", "c"] {
            let _ = aggregator.push(key, None, bytes::Bytes::from_static(b"x"));
        }
        let aggregate = aggregator.finish().unwrap().data;
        let plain = bytes::Bytes::from_static(b"plain");
        let at =
            |n: &str, sub: Option<u64>| StartAt::AtSequence(SequenceNumber::new(n, sub).unwrap());
        let page = [record("7", plain.clone()), record("9", plain.clone())];
        assert_eq!(
            pending_in_page(&page, &at("7", Some(0))),
            1,
            "plain 7 processed"
        );
        assert_eq!(
            pending_in_page(&page, &at("007", Some(2))),
            1,
            "the same number"
        );
        assert_eq!(
            pending_in_page(&page, &at("7", None)),
            2,
            "at 7: 7 is pending"
        );
        assert_eq!(pending_in_page(&page, &at("5", Some(0))), 2, "5 is gone");
        let after = StartAt::AfterSequence(SequenceNumber::new("5", None).unwrap());
        assert_eq!(pending_in_page(&page, &after), 2);
        let page = [record("7", aggregate), record("9", plain)];
        assert_eq!(pending_in_page(&page, &at("7", Some(0))), 2 + 1);
        assert_eq!(
            pending_in_page(&page, &at("7", Some(2))),
            1,
            "all three processed"
        );
        assert_eq!(pending_in_page(&page, &at("7", Some(9))), 1);
        assert_eq!(pending_in_page(&[], &at("7", Some(0))), 0);
    }

    #[test]
    fn probes_open_where_a_reader_would() {
        let seq = SequenceNumber::new("42", None).unwrap();
        assert_eq!(
            probe_position(Some(&Checkpoint::Sequence(seq.clone()))),
            Some(StartAt::AfterSequence(seq.clone()))
        );
        let sub = seq.with_subsequence(Some(3));
        assert_eq!(
            probe_position(Some(&Checkpoint::Sequence(sub.clone()))),
            Some(StartAt::AtSequence(sub))
        );
        assert_eq!(
            probe_position(Some(&Checkpoint::TrimHorizon)),
            Some(StartAt::TrimHorizon)
        );
        assert_eq!(
            probe_position(Some(&Checkpoint::AtTimestamp(9))),
            Some(StartAt::at_millis(9))
        );
        assert_eq!(probe_position(Some(&Checkpoint::Latest)), None);
        assert_eq!(probe_position(Some(&Checkpoint::ShardEnd)), None);
        assert_eq!(probe_position(None), None);
    }
}
