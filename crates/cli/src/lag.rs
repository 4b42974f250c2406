//! How far a checkpoint is behind its shard's tip, asked of Kinesis: one GetShardIterator at
//! the checkpoint and one GetRecords of at most [`PROBE_LIMIT`] records per shard.
//!
//! The time comes from GetRecords' `MillisBehindLatest`; the record count is exact only when
//! that one page reached the tip (fewer records than the limit and 0 ms behind), else it is a
//! lower bound. Finished rows and rows without a real position (`LATEST`, none) are not asked.

use std::sync::Arc;

use kinesis_lease_core::{Checkpoint, Lease};
use kinesis_stream_core::{KinesisApi, ReaderError, StartAt};
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

/// What one probe page says: `records` read with `limit`, `millis` behind the tip.
pub fn behind_from_page(records: usize, millis: Option<u64>, limit: usize) -> Behind {
    let n = records as u64;
    let at_tip = millis == Some(0) && records < limit;
    Behind {
        millis,
        records: if at_tip {
            Records::Exactly(n)
        } else {
            Records::AtLeast(n)
        },
    }
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
pub type Probe = Result<Option<Behind>, ReaderError>;

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
    let mut out: Vec<Probe> = rows.iter().map(|_| Ok(None)).collect();
    let total = tasks.len();
    let mut done = 0;
    while let Some(joined) = tasks.join_next().await {
        if let Ok((i, outcome)) = joined {
            out[i] = outcome.map(Some);
        }
        done += 1;
        progress(done, total);
    }
    out
}

async fn probe(
    kinesis: &dyn KinesisApi,
    stream: &str,
    shard: &str,
    position: &StartAt,
) -> Result<Behind, ReaderError> {
    let iterator = kinesis.shard_iterator(stream, shard, position).await?;
    let page = kinesis
        .get_records(stream, shard, &iterator, PROBE_LIMIT)
        .await?;
    Ok(behind_from_page(
        page.records.len(),
        page.millis_behind,
        PROBE_LIMIT,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::SequenceNumber;

    #[test]
    fn the_count_is_exact_only_when_the_page_reached_the_tip() {
        assert_eq!(
            behind_from_page(3, Some(0), 100),
            Behind {
                millis: Some(0),
                records: Records::Exactly(3)
            }
        );
        assert_eq!(
            behind_from_page(0, Some(0), 100).records,
            Records::Exactly(0)
        );
        assert_eq!(
            behind_from_page(100, Some(0), 100).records,
            Records::AtLeast(100)
        );
        assert_eq!(
            behind_from_page(7, Some(5_000), 100).records,
            Records::AtLeast(7)
        );
        assert_eq!(behind_from_page(7, None, 100).records, Records::AtLeast(7));
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
