//! Where a shard starts: pure rules, unit-tested without Kinesis or a store.
//!
//! A subscription's start position says where it begins, once. A row created for a fresh
//! subscription records it ([`initial_checkpoint`]); the first take of a row without a real
//! position pins one into the row with the take itself ([`plan`]), so every later owner, and
//! every reopen before the first delivery, resumes from the same place:
//!
//! - `TRIM_HORIZON` and `AT_TIMESTAMP` are positions already and are stored as they are.
//! - `LATEST` is not: a later `LATEST` is a later place. The first reader opens its iterator at
//!   `LATEST`, and the take stores `AT_TIMESTAMP(now - slack)`, taken before the iterator
//!   opened. A later owner (after a crash, a hand-over or a shutdown before the first
//!   checkpoint) starts there: it may see records that arrived up to `slack` before the first
//!   reader opened (`slack` covers the clock difference between this host and Kinesis), and
//!   never misses one that arrived after.
//!
//! A reposition is applied once per subscription: its marker is written into the row by the
//! take that applies it, and a row that carries the marker is never repositioned again.

use std::time::Duration;

use kinesis_lease_core::{duration_ms, Checkpoint, Lease, SequenceNumber};

use kinesis_stream_core::{millis_of, Shard, StartAt};

/// How a taken shard starts reading, and what its take writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartPlan {
    /// Written with the take: a pinned start position or a reposition.
    pub checkpoint: Option<Checkpoint>,
    /// The reposition marker written with the take.
    pub marker: Option<String>,
    /// Where the first iterator opens.
    pub open: StartAt,
    /// Where the reader reopens while it has delivered nothing yet.
    pub reopen: StartAt,
    /// Records at or below this are skipped (a checkpoint inside an aggregated record).
    pub skip: Option<SequenceNumber>,
}

impl StartPlan {
    fn at(position: StartAt) -> Self {
        Self {
            checkpoint: None,
            marker: None,
            open: position.clone(),
            reopen: position,
            skip: None,
        }
    }

    /// A subscription-level position (not a sequence number) made a stored position.
    fn pinned(position: &StartAt, now_ms: u64, slack: Duration) -> Self {
        match position {
            StartAt::Latest => {
                let pin = now_ms.saturating_sub(duration_ms(slack));
                Self {
                    checkpoint: Some(Checkpoint::AtTimestamp(pin)),
                    marker: None,
                    open: StartAt::Latest,
                    reopen: StartAt::at_millis(pin),
                    skip: None,
                }
            }
            StartAt::TrimHorizon => Self {
                checkpoint: Some(Checkpoint::TrimHorizon),
                ..Self::at(StartAt::TrimHorizon)
            },
            StartAt::AtTimestamp(time) => Self {
                checkpoint: Some(Checkpoint::AtTimestamp(millis_of(time))),
                ..Self::at(StartAt::at_millis(millis_of(time)))
            },
            // Refused by `subscription_position`; should one get here, it opens as given.
            other => Self::at(other.clone()),
        }
    }
}

/// The marker a reposition to `position` writes.
pub fn reposition_marker(position: &StartAt) -> String {
    match position {
        StartAt::TrimHorizon => Checkpoint::TRIM_HORIZON.to_owned(),
        StartAt::Latest => Checkpoint::LATEST.to_owned(),
        StartAt::AtTimestamp(time) => {
            format!("{}:{}", Checkpoint::AT_TIMESTAMP, millis_of(time))
        }
        StartAt::AtSequence(seq) => format!("AT_SEQUENCE_NUMBER:{seq}"),
        StartAt::AfterSequence(seq) => format!("AFTER_SEQUENCE_NUMBER:{seq}"),
    }
}

/// True for the positions a whole subscription may start or reposition at: sequence numbers
/// belong to one shard.
pub fn is_subscription_position(position: &StartAt) -> bool {
    matches!(
        position,
        StartAt::TrimHorizon | StartAt::Latest | StartAt::AtTimestamp(_)
    )
}

/// Where a taken row starts, given the subscription's start position and reposition (with its
/// marker), at `now_ms` on this host's wall clock.
pub fn plan(
    row: &Lease,
    start_at: &StartAt,
    reposition: Option<(&StartAt, &str)>,
    now_ms: u64,
    slack: Duration,
) -> StartPlan {
    if let Some((position, marker)) = reposition {
        if row.repositioned.as_deref() != Some(marker) && !row.is_finished() {
            let mut plan = StartPlan::pinned(position, now_ms, slack);
            plan.marker = Some(marker.to_owned());
            return plan;
        }
    }
    match &row.checkpoint {
        Some(Checkpoint::Sequence(seq)) if seq.subsequence().is_some() => {
            // Part of an aggregated record settled: read it again, skip what settled.
            StartPlan {
                skip: Some(seq.clone()),
                ..StartPlan::at(StartAt::AtSequence(seq.clone()))
            }
        }
        Some(Checkpoint::Sequence(seq)) => StartPlan::at(StartAt::AfterSequence(seq.clone())),
        Some(Checkpoint::TrimHorizon) => StartPlan::at(StartAt::TrimHorizon),
        Some(Checkpoint::AtTimestamp(ms)) => StartPlan::at(StartAt::at_millis(*ms)),
        // "Start at the tip when first taken": pin it now.
        Some(Checkpoint::Latest) => StartPlan::pinned(&StartAt::Latest, now_ms, slack),
        // A finished shard is never taken; should one be, it reads nothing new from the tip.
        Some(Checkpoint::ShardEnd) => StartPlan::at(StartAt::Latest),
        // A child of a split or merge reads from its first record.
        None if !row.parents.is_empty() => StartPlan::pinned(&StartAt::TrimHorizon, now_ms, slack),
        None => StartPlan::pinned(start_at, now_ms, slack),
    }
}

/// The checkpoint a row is created with. `fresh`: no row of the stream was ever taken, so the
/// subscription begins now and `start_at` applies to every shard: at `LATEST`, shards that are
/// already closed hold nothing after the start and are created finished, and open ones start
/// at the tip even when they have parents (as the KCL does). Later, a new shard (a child of a
/// split or merge) starts at its first record once its parents end.
pub fn initial_checkpoint(shard: &Shard, fresh: bool, start_at: &StartAt) -> Option<Checkpoint> {
    if fresh {
        return match start_at {
            StartAt::Latest if shard.ending_sequence.is_some() => Some(Checkpoint::ShardEnd),
            StartAt::Latest => Some(Checkpoint::Latest),
            StartAt::TrimHorizon => Some(Checkpoint::TrimHorizon),
            StartAt::AtTimestamp(time) => Some(Checkpoint::AtTimestamp(millis_of(time))),
            StartAt::AtSequence(_) | StartAt::AfterSequence(_) => None,
        };
    }
    if shard.parents().is_empty() {
        None
    } else {
        Some(Checkpoint::TrimHorizon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::LeaseKey;

    const NOW: u64 = 1_700_000_000_000;
    const SLACK: Duration = Duration::from_secs(30);

    fn row(checkpoint: Option<Checkpoint>, parents: &[&str]) -> Lease {
        Lease::new(
            LeaseKey::new("s", "shardId-1").unwrap(),
            parents.iter().map(|p| (*p).to_owned()).collect(),
        )
        .starting_at(checkpoint)
    }

    fn seq(n: &str, sub: Option<u64>) -> SequenceNumber {
        SequenceNumber::new(n, sub).unwrap()
    }

    #[test]
    fn latest_opens_at_the_tip_and_pins_a_time_before_it() {
        let plan = plan(&row(None, &[]), &StartAt::Latest, None, NOW, SLACK);
        let pin = NOW - 30_000;
        assert_eq!(plan.open, StartAt::Latest);
        assert_eq!(plan.checkpoint, Some(Checkpoint::AtTimestamp(pin)));
        assert_eq!(plan.reopen, StartAt::at_millis(pin), "never a fresh LATEST");
    }

    #[test]
    fn a_latest_sentinel_is_pinned_like_a_missing_checkpoint() {
        let plan = plan(
            &row(Some(Checkpoint::Latest), &["p"]),
            &StartAt::TrimHorizon,
            None,
            NOW,
            SLACK,
        );
        assert_eq!(plan.open, StartAt::Latest);
        assert_eq!(plan.checkpoint, Some(Checkpoint::AtTimestamp(NOW - 30_000)));
    }

    #[test]
    fn stored_positions_are_resumed_without_writing() {
        let cases = [
            (Checkpoint::TrimHorizon, StartAt::TrimHorizon),
            (Checkpoint::AtTimestamp(5), StartAt::at_millis(5)),
            (
                Checkpoint::Sequence(seq("42", None)),
                StartAt::AfterSequence(seq("42", None)),
            ),
            (
                Checkpoint::Sequence(seq("42", Some(3))),
                StartAt::AtSequence(seq("42", Some(3))),
            ),
        ];
        for (checkpoint, position) in cases {
            let plan = plan(
                &row(Some(checkpoint), &[]),
                &StartAt::Latest,
                None,
                NOW,
                SLACK,
            );
            assert_eq!(plan.checkpoint, None);
            assert_eq!((plan.open, plan.reopen), (position.clone(), position));
        }
    }

    #[test]
    fn children_without_checkpoint_start_at_their_first_record() {
        let plan = plan(&row(None, &["p"]), &StartAt::Latest, None, NOW, SLACK);
        assert_eq!(plan.open, StartAt::TrimHorizon);
        assert_eq!(plan.checkpoint, Some(Checkpoint::TrimHorizon));
    }

    #[test]
    fn a_reposition_applies_once_per_row() {
        let cp = Some(Checkpoint::Sequence(seq("42", None)));
        let fresh = plan(
            &row(cp.clone(), &[]),
            &StartAt::Latest,
            Some((&StartAt::TrimHorizon, "TRIM_HORIZON")),
            NOW,
            SLACK,
        );
        assert_eq!(fresh.checkpoint, Some(Checkpoint::TrimHorizon));
        assert_eq!(fresh.marker.as_deref(), Some("TRIM_HORIZON"));
        let mut done = row(cp, &[]);
        done.repositioned = Some("TRIM_HORIZON".into());
        let again = plan(
            &done,
            &StartAt::Latest,
            Some((&StartAt::TrimHorizon, "TRIM_HORIZON")),
            NOW,
            SLACK,
        );
        assert_eq!(again.open, StartAt::AfterSequence(seq("42", None)));
        assert_eq!((again.checkpoint, again.marker), (None, None));
    }

    fn shard(closed: bool, parent: Option<&str>) -> Shard {
        let mut shard = Shard::new("shardId-2", (0, u128::MAX));
        shard.parent = parent.map(str::to_owned);
        shard.ending_sequence = closed.then(|| "9".to_owned());
        shard
    }

    #[test]
    fn a_fresh_latest_subscription_skips_closed_shards_and_starts_children_at_the_tip() {
        assert_eq!(
            initial_checkpoint(&shard(true, None), true, &StartAt::Latest),
            Some(Checkpoint::ShardEnd)
        );
        assert_eq!(
            initial_checkpoint(&shard(false, Some("p")), true, &StartAt::Latest),
            Some(Checkpoint::Latest)
        );
        assert_eq!(
            initial_checkpoint(&shard(true, None), true, &StartAt::TrimHorizon),
            Some(Checkpoint::TrimHorizon)
        );
        assert_eq!(
            initial_checkpoint(&shard(false, Some("p")), true, &StartAt::at_millis(7)),
            Some(Checkpoint::AtTimestamp(7))
        );
    }

    #[test]
    fn later_children_start_at_their_first_record() {
        assert_eq!(
            initial_checkpoint(&shard(false, Some("p")), false, &StartAt::Latest),
            Some(Checkpoint::TrimHorizon)
        );
        assert_eq!(
            initial_checkpoint(&shard(false, None), false, &StartAt::Latest),
            None
        );
    }
}
