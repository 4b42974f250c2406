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
//!
//! # Rows created for shards that have none
//!
//! [`initial_checkpoints`] decides where each new row starts, from the stream's rows as they
//! stand, never from their counters (an import, another version or an operator writes rows
//! with any counter):
//!
//! - A shard whose ancestor holds (or held) a checkpoint is read from its first record,
//!   however many levels down: its parent has a row that will be or was read, or is created
//!   in the same listing with a start its own ancestors forced (not the beginning's), or
//!   (once the subscription has history) has no row at all (trimmed, or deleted once
//!   finished).
//! - The subscription's start position applies to every other shard only while the
//!   subscription begins ([`subscription_begins`]): every row of the stream stands where a
//!   beginning at that position creates it, and none is held. At `LATEST`, shards closed
//!   before the beginning are then created finished and open ones start at the tip, as the
//!   KCL does; at `AT_TIMESTAMP` the children of a shard closed before the beginning start at
//!   that time too. Once the subscription has history, a root shard gets no checkpoint (its
//!   first take pins the start position) and every child starts at its first record.
//!
//! # Finished rows
//!
//! A parent read to its end and released leaves only its `SHARD_END` row, and its children
//! must then be read whole; a shard closed before a `LATEST` beginning also has a `SHARD_END`
//! row, and its children start at the tip. The rows tell the two apart by one fact, never by
//! comparing counters across rows: a row is created with counter 1 and every take bumps it
//! (the lease contract's *Counter* rule), so a finished row at counter 1 was created finished
//! and never taken, and any other finished row was read to its end, which is history. Two
//! instances starting together therefore decide alike, whichever rows of the beginning the
//! other one has created so far.
//!
//! What is left reads more than asked, never less: at `AT_TIMESTAMP`, an instance that finds
//! a parent's row created (at that time) by another instance, not yet taken, reads the
//! parent's children from their first record, records before the time included.

use std::collections::{HashMap, HashSet};
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

/// True when the subscription begins now, judged from its stream's `rows` (shard rows only):
/// every row stands where a beginning at `start_at` creates it (the `LATEST` sentinel or a row
/// [created finished](created_finished); the `TRIM_HORIZON` or `AT_TIMESTAMP` position) and
/// none is held. A take at `LATEST` pins a time into the row, a row read to its end is finished
/// past counter 1, and any checkpoint, import or operator's write leaves something else, so a
/// table with history never looks like a beginning.
pub fn subscription_begins(rows: &[Lease], start_at: &StartAt) -> bool {
    rows.iter().all(|row| {
        row.owner.is_none()
            && row.token.is_none()
            && match (start_at, &row.checkpoint) {
                (StartAt::Latest, Some(Checkpoint::Latest)) => true,
                (StartAt::Latest, Some(Checkpoint::ShardEnd)) => created_finished(row),
                (StartAt::TrimHorizon, Some(Checkpoint::TrimHorizon)) => true,
                (StartAt::AtTimestamp(time), Some(Checkpoint::AtTimestamp(ms))) => {
                    *ms == millis_of(time)
                }
                _ => false,
            }
    })
}

/// True for a finished row that was created finished and never taken: `SHARD_END` at counter
/// 1 (a created row has counter 1 and every take bumps it), as a beginning at `LATEST` creates
/// a shard closed before it. A row read to its end was taken first.
pub fn created_finished(row: &Lease) -> bool {
    row.is_finished() && row.counter == 1 && row.owner.is_none()
}

/// The checkpoints of the rows created for `missing` shards (those with no row yet), given
/// the stream's `rows` and the subscription's `start_at`: see the module docs. Parents are
/// decided before their children, whatever the order of `missing`.
pub fn initial_checkpoints<'a>(
    missing: &[&'a Shard],
    rows: &[Lease],
    start_at: &StartAt,
) -> Vec<(&'a Shard, Option<Checkpoint>)> {
    let begins = subscription_begins(rows, start_at);
    let existing: HashMap<&str, &Lease> = rows.iter().map(|r| (r.key.shard(), r)).collect();
    let by_id: HashMap<&str, &Shard> = missing.iter().map(|s| (s.id.as_str(), *s)).collect();
    let mut decided: HashMap<String, Option<Checkpoint>> = HashMap::new();
    for shard in missing {
        decide(
            shard,
            &by_id,
            &existing,
            begins,
            start_at,
            &mut decided,
            &mut HashSet::new(),
        );
    }
    missing
        .iter()
        .map(|s| (*s, decided.get(&s.id).cloned().flatten()))
        .collect()
}

/// Decides `shard` (and, first, its missing ancestors) into `decided`.
fn decide(
    shard: &Shard,
    missing: &HashMap<&str, &Shard>,
    existing: &HashMap<&str, &Lease>,
    begins: bool,
    start_at: &StartAt,
    decided: &mut HashMap<String, Option<Checkpoint>>,
    visiting: &mut HashSet<String>,
) -> Option<Checkpoint> {
    if let Some(done) = decided.get(&shard.id) {
        return done.clone();
    }
    // A listing never has cycles; should one, the shard is decided as if its parent had none.
    visiting.insert(shard.id.clone());
    let read_before = shard.parents().iter().any(|parent| {
        if let Some(row) = existing.get(parent.as_str()) {
            // It will be read, or was; at a beginning, a row created finished was closed
            // before it (see the module docs).
            return !(begins && created_finished(row));
        }
        match missing.get(parent.as_str()) {
            // Created now: its children follow it only when its own ancestors made it start
            // at its first record; else they start where the beginning puts them, as it does.
            Some(p) if !visiting.contains(&p.id) => {
                decide(p, missing, existing, begins, start_at, decided, visiting)
                    != initial_checkpoint(p, begins, start_at)
            }
            Some(_) => false,
            // Neither a row nor listed: trimmed, or its finished row deleted. With history,
            // it was read (or its records aged out unread, which reading this one from its
            // first record cannot make worse).
            None => !begins,
        }
    });
    visiting.remove(&shard.id);
    let checkpoint = if read_before {
        Some(Checkpoint::TrimHorizon)
    } else {
        initial_checkpoint(shard, begins, start_at)
    };
    decided.insert(shard.id.clone(), checkpoint.clone());
    checkpoint
}

/// The checkpoint a row is created with when no ancestor of the shard was read (see
/// [`initial_checkpoints`], which decides that). `fresh`: the subscription begins now
/// ([`subscription_begins`]) and `start_at` applies to every shard: at `LATEST`, shards that
/// are already closed hold nothing after the start and are created finished, and open ones
/// start at the tip even when they have parents (as the KCL does). Later, a new shard (a child
/// of a split or merge) starts at its first record once its parents end.
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

    fn listed(id: &str, parent: Option<&str>, closed: bool) -> Shard {
        let mut shard = Shard::new(id, (0, u128::MAX));
        shard.parent = parent.map(str::to_owned);
        shard.ending_sequence = closed.then(|| "9".to_owned());
        shard
    }

    fn table_row(shard: &str, checkpoint: Option<Checkpoint>) -> Lease {
        Lease::new(LeaseKey::new("s", shard).unwrap(), Vec::new()).starting_at(checkpoint)
    }

    fn decided(
        missing: &[Shard],
        rows: &[Lease],
        start_at: &StartAt,
    ) -> Vec<(String, Option<Checkpoint>)> {
        let refs: Vec<&Shard> = missing.iter().rev().collect();
        let mut out: Vec<_> = initial_checkpoints(&refs, rows, start_at)
            .into_iter()
            .map(|(s, cp)| (s.id.clone(), cp))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn every_level_below_a_checkpoint_starts_at_its_first_record_whatever_the_counters() {
        // 0 (imported, counter 1) -> 1, 2; 1 -> 3, 4; 3 -> 5, 6: 1 and 3 closed.
        let missing = [
            listed("1", Some("0"), true),
            listed("2", Some("0"), false),
            listed("3", Some("1"), true),
            listed("4", Some("1"), false),
            listed("5", Some("3"), false),
            listed("6", Some("3"), false),
        ];
        let mut imported = table_row("0", Some(Checkpoint::Sequence(seq("7", Some(0)))));
        imported.counter = 1;
        let th = Some(Checkpoint::TrimHorizon);
        for start_at in [StartAt::Latest, StartAt::TrimHorizon, StartAt::at_millis(5)] {
            let got = decided(&missing, std::slice::from_ref(&imported), &start_at);
            assert!(got.iter().all(|(_, cp)| *cp == th), "{start_at:?}: {got:?}");
        }
    }

    #[test]
    fn children_of_a_trimmed_parent_start_at_their_first_record_once_there_is_history() {
        let missing = [listed("2", Some("0"), false), listed("3", Some("0"), false)];
        let history = [table_row(
            "1",
            Some(Checkpoint::Sequence(seq("7", Some(3)))),
        )];
        let th = Some(Checkpoint::TrimHorizon);
        assert_eq!(
            decided(&missing, &history, &StartAt::Latest),
            vec![("2".into(), th.clone()), ("3".into(), th)]
        );
        // A beginning: the trimmed parent was never read, the start position applies.
        let latest = Some(Checkpoint::Latest);
        assert_eq!(
            decided(&missing, &[], &StartAt::Latest),
            vec![("2".into(), latest.clone()), ("3".into(), latest)]
        );
    }

    #[test]
    fn a_beginning_at_latest_skips_what_closed_before_it_on_every_level() {
        // 0 -> 1, 2; 1 -> 3, 4: all listed, no rows yet.
        let missing = [
            listed("0", None, true),
            listed("1", Some("0"), true),
            listed("2", Some("0"), false),
            listed("3", Some("1"), false),
            listed("4", Some("1"), false),
        ];
        let got = decided(&missing, &[], &StartAt::Latest);
        let end = Some(Checkpoint::ShardEnd);
        let latest = Some(Checkpoint::Latest);
        assert_eq!(
            got,
            vec![
                ("0".into(), end.clone()),
                ("1".into(), end),
                ("2".into(), latest.clone()),
                ("3".into(), latest.clone()),
                ("4".into(), latest)
            ]
        );
    }

    #[test]
    fn children_of_a_parent_read_to_its_end_are_read_whole_even_at_latest() {
        // A LATEST subscription read 0 to its end and released it: only its SHARD_END row
        // is left when its children are listed (taken, so past counter 1).
        let mut read = table_row("0", Some(Checkpoint::ShardEnd));
        read.counter = 4;
        let rows = [read];
        assert!(!subscription_begins(&rows, &StartAt::Latest), "history");
        let missing = [listed("1", Some("0"), false), listed("2", Some("0"), false)];
        let th = Some(Checkpoint::TrimHorizon);
        assert_eq!(
            decided(&missing, &rows, &StartAt::Latest),
            vec![("1".into(), th.clone()), ("2".into(), th)]
        );
    }

    #[test]
    fn a_beginning_whose_rows_are_half_created_is_finished_alike() {
        // Another instance created 1 (open then, unread) and stopped; 1 closed since, and 4
        // is its child. 1 will be read (from its pinned start): its children follow it whole.
        let rows = [table_row("1", Some(Checkpoint::Latest))];
        assert!(subscription_begins(&rows, &StartAt::Latest));
        assert_eq!(
            decided(&[listed("4", Some("1"), false)], &rows, &StartAt::Latest),
            vec![("4".into(), Some(Checkpoint::TrimHorizon))]
        );
        // It had created 0, closed before the beginning, finished (counter 1, never taken):
        // 0's children start at the tip, as the first instance would have created them.
        let mut closed = table_row("0", Some(Checkpoint::ShardEnd));
        closed.counter = 1;
        assert!(subscription_begins(
            std::slice::from_ref(&closed),
            &StartAt::Latest
        ));
        assert_eq!(
            decided(
                &[listed("2", Some("0"), false)],
                &[closed],
                &StartAt::Latest
            ),
            vec![("2".into(), Some(Checkpoint::Latest))]
        );
    }

    #[test]
    fn history_is_anything_but_unheld_rows_where_a_beginning_puts_them() {
        let latest = [table_row("0", Some(Checkpoint::Latest))];
        assert!(subscription_begins(&latest, &StartAt::Latest));
        assert!(subscription_begins(
            &[],
            &StartAt::AtSequence(seq("1", None))
        ));
        assert!(!subscription_begins(&latest, &StartAt::TrimHorizon));
        let mut held = table_row("0", Some(Checkpoint::Latest));
        held.owner = Some("a".into());
        held.token = Some("t".into());
        assert!(!subscription_begins(&[held], &StartAt::Latest));
        for history in [
            Some(Checkpoint::AtTimestamp(5)),
            Some(Checkpoint::TrimHorizon),
            Some(Checkpoint::Sequence(seq("3", None))),
            None,
        ] {
            assert!(
                !subscription_begins(&[table_row("0", history.clone())], &StartAt::Latest),
                "{history:?}"
            );
        }
        let at = StartAt::at_millis(5);
        assert!(subscription_begins(
            &[table_row("0", Some(Checkpoint::AtTimestamp(5)))],
            &at
        ));
        assert!(!subscription_begins(
            &[table_row("0", Some(Checkpoint::AtTimestamp(6)))],
            &at
        ));
        // With history, a root gets no checkpoint (its take pins the start position).
        assert_eq!(
            decided(
                &[listed("9", None, false)],
                &[table_row("0", Some(Checkpoint::TrimHorizon))],
                &StartAt::Latest
            ),
            vec![("9".into(), None)]
        );
    }

    #[test]
    fn at_a_timestamp_children_of_a_shard_closed_before_the_beginning_start_at_that_time() {
        let missing = [
            listed("0", None, true),
            listed("1", Some("0"), false),
            listed("2", Some("0"), false),
        ];
        let at = StartAt::at_millis(7);
        let t = Some(Checkpoint::AtTimestamp(7));
        assert_eq!(
            decided(&missing, &[], &at),
            vec![
                ("0".into(), t.clone()),
                ("1".into(), t.clone()),
                ("2".into(), t)
            ]
        );
    }
}
