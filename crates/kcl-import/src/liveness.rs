//! Whether KCL workers still run: pure, from the KCL's lease rows seen over time.
//!
//! A KCL worker renews every lease it holds several times per failover time (its renewer
//! runs every third of it), and every KCL write of a lease row, renewal, take or checkpoint,
//! bumps `leaseCounter`. So a counter that moves within one failover time means a live
//! worker; counters that all stand still for a whole failover time mean none held a lease of
//! the stream meanwhile. Rows appearing or disappearing (the KCL's shard sync creating
//! leases, its cleanup deleting them) count as movement too. The import reads the rows
//! again and again over the window ([`Watch::look`]); the first movement ends the watch.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::select::KclLease;

/// The KCL's `epsilonMillis`, added to the failover time in its lease taker's interval.
const KCL_EPSILON: Duration = Duration::from_millis(25);

/// How long to watch for a KCL application whose failover time is `failover`: its lease
/// taker's interval, `(failover + epsilon) * 2`, and one reading more.
///
/// One failover time is enough to see a worker that holds a lease (it renews several times
/// per failover time), but not a live worker that holds none (more workers than shards, or
/// one that just lost its leases): that one takes the expired leases at its next taker run,
/// up to twice the failover time later, after a one-failover watch would have closed and the
/// brokers started. Over this window such a take moves a counter while it is watched.
pub fn watch_window(failover: Duration) -> Duration {
    let taker = (failover + KCL_EPSILON) * 2;
    taker + reading_interval(taker)
}

/// How often a watch of `window` reads the rows: a tenth of it, between 100 ms and 1 s.
fn reading_interval(window: Duration) -> Duration {
    (window / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// A lease row the KCL wrote while it was watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    /// The shard.
    pub shard: String,
    /// The lease's owner as last seen.
    pub owner: Option<String>,
    /// The counter first seen (`None`: the row appeared).
    pub before: Option<u64>,
    /// The counter seen now (`None`: the row was deleted).
    pub after: Option<u64>,
}

impl fmt::Display for Movement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the KCL lease of shard `{}`", self.shard)?;
        if let Some(owner) = &self.owner {
            write!(f, " (owner `{owner}`)")?;
        }
        match (self.before, self.after) {
            (Some(a), Some(b)) => write!(f, " went from leaseCounter {a} to {b}"),
            (None, _) => f.write_str(" was created"),
            (Some(_), None) => f.write_str(" was deleted"),
        }
    }
}

/// What a watch concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Still watching: nothing moved, and the window has not passed.
    Watching,
    /// A row moved: KCL workers run.
    Live(Movement),
    /// Nothing moved for the whole window.
    Still,
}

/// Watches the KCL's lease rows of one stream for one failover time.
#[derive(Debug, Clone)]
pub struct Watch {
    window: Duration,
    first: BTreeMap<String, (u64, Option<String>)>,
    moved: Option<Movement>,
    elapsed: Duration,
}

fn counters(leases: &[KclLease]) -> BTreeMap<String, (u64, Option<String>)> {
    leases
        .iter()
        .map(|l| (l.shard.clone(), (l.row.counter, l.row.owner.clone())))
        .collect()
}

impl Watch {
    /// Starts watching `leases` (as read at the start) for `window`.
    pub fn new(window: Duration, leases: &[KclLease]) -> Self {
        Self {
            window,
            first: counters(leases),
            moved: None,
            elapsed: Duration::ZERO,
        }
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// How often to read the rows again: a tenth of the window, between 100 ms and 1 s.
    pub fn every(&self) -> Duration {
        reading_interval(self.window)
    }

    /// Compares `leases` (read `elapsed` after the start) with the first reading.
    pub fn look(&mut self, leases: &[KclLease], elapsed: Duration) {
        self.elapsed = self.elapsed.max(elapsed);
        if self.moved.is_some() {
            return;
        }
        let now = counters(leases);
        self.moved = moved(&self.first, &now);
    }

    /// The verdict so far.
    pub fn verdict(&self) -> Verdict {
        match &self.moved {
            Some(movement) => Verdict::Live(movement.clone()),
            None if self.elapsed >= self.window => Verdict::Still,
            None => Verdict::Watching,
        }
    }
}

/// The first difference between two readings of the rows, by shard.
pub fn moved(
    before: &BTreeMap<String, (u64, Option<String>)>,
    after: &BTreeMap<String, (u64, Option<String>)>,
) -> Option<Movement> {
    for (shard, (counter, owner)) in before {
        match after.get(shard) {
            Some((now, now_owner)) if now != counter => {
                return Some(Movement {
                    shard: shard.clone(),
                    owner: now_owner.clone(),
                    before: Some(*counter),
                    after: Some(*now),
                })
            }
            Some(_) => {}
            None => {
                return Some(Movement {
                    shard: shard.clone(),
                    owner: owner.clone(),
                    before: Some(*counter),
                    after: None,
                })
            }
        }
    }
    after
        .iter()
        .find(|(shard, _)| !before.contains_key(*shard))
        .map(|(shard, (counter, owner))| Movement {
            shard: shard.clone(),
            owner: owner.clone(),
            before: None,
            after: Some(*counter),
        })
}

/// The readings of `leases`, for [`moved`].
pub fn reading(leases: &[KclLease]) -> BTreeMap<String, (u64, Option<String>)> {
    counters(leases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KclRow;

    fn lease(shard: &str, counter: u64) -> KclLease {
        KclLease {
            shard: shard.to_owned(),
            row: KclRow {
                owner: Some("w1".into()),
                ..KclRow::lease(shard, counter)
            },
        }
    }

    const WINDOW: Duration = Duration::from_secs(10);

    #[test]
    fn still_counters_for_the_whole_window_mean_no_live_worker() {
        let rows = [lease("a", 3), lease("b", 7)];
        let mut watch = Watch::new(WINDOW, &rows);
        watch.look(&rows, Duration::from_secs(5));
        assert_eq!(watch.verdict(), Verdict::Watching);
        watch.look(&rows, WINDOW);
        assert_eq!(watch.verdict(), Verdict::Still);
    }

    #[test]
    fn a_moving_counter_means_a_live_worker_at_once() {
        let mut watch = Watch::new(WINDOW, &[lease("a", 3), lease("b", 7)]);
        watch.look(&[lease("a", 3), lease("b", 8)], Duration::from_secs(1));
        match watch.verdict() {
            Verdict::Live(m) => {
                assert_eq!(
                    (m.shard.as_str(), m.before, m.after),
                    ("b", Some(7), Some(8))
                );
                assert_eq!(
                    m.to_string(),
                    "the KCL lease of shard `b` (owner `w1`) went from leaseCounter 7 to 8"
                );
            }
            other => panic!("{other:?}"),
        }
        // A later still reading does not undo it.
        watch.look(&[lease("a", 3), lease("b", 7)], WINDOW);
        assert!(matches!(watch.verdict(), Verdict::Live(_)));
    }

    #[test]
    fn rows_created_or_deleted_count_as_movement() {
        let mut created = Watch::new(WINDOW, &[lease("a", 3)]);
        created.look(&[lease("a", 3), lease("c", 1)], Duration::from_secs(1));
        assert!(
            matches!(created.verdict(), Verdict::Live(m) if m.before.is_none() && m.shard == "c")
        );
        let mut deleted = Watch::new(WINDOW, &[lease("a", 3), lease("b", 1)]);
        deleted.look(&[lease("a", 3)], Duration::from_secs(1));
        assert!(
            matches!(deleted.verdict(), Verdict::Live(m) if m.after.is_none() && m.shard == "b")
        );
    }

    #[test]
    fn the_polling_interval_is_bounded() {
        assert_eq!(Watch::new(WINDOW, &[]).every(), Duration::from_secs(1));
        assert_eq!(
            Watch::new(Duration::from_secs(3), &[]).every(),
            Duration::from_millis(300)
        );
        assert_eq!(
            Watch::new(Duration::from_millis(200), &[]).every(),
            Duration::from_millis(100)
        );
    }
}
