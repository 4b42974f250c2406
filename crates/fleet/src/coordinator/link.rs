//! [`Link`]: what the ring watch and the coordinator share of member rows, in one place so
//! that both count a member's standing still from this instance's first reading of its
//! holding, whoever made it, and so that the coordinator's epoch reads tell the watch when the
//! roster changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use kinesis_lease_core::Lease;
use tokio::time::Instant;

use crate::roster;

/// What this instance saw of one member row: its holding (counter and token), and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sighting {
    counter: u64,
    token: Option<String>,
    since: Instant,
}

/// What the watcher and the coordinator share: every reading of a member row either made, so
/// both count a member's standing still from this instance's first reading of its holding.
#[derive(Debug, Default)]
pub(super) struct Link {
    seen: Mutex<BTreeMap<String, Sighting>>,
    /// The watcher saw the roster change (a member buried or gone): the coordinator lists the
    /// rows at its next tick, even if the epoch bump that says so failed.
    pub(super) relist: AtomicBool,
    /// The present members of the latest roster listing, the coordinator's or the watcher's:
    /// when the coordinator's shows other members than the watch knows (one that joined and
    /// whose roster bump never landed; one gone whose bump failed), the watch lists the roster
    /// too, and watches them or notes their departed rows.
    present: Mutex<BTreeSet<String>>,
    /// The roster's count of bumps as the last epoch read showed it (`LeaseStore::epochs`),
    /// and when the coordinator last read it.
    roster_epoch: Mutex<(Option<u64>, Option<Instant>)>,
    /// That count moved since the watch last listed the roster: it lists it at once.
    pub(super) roster_moved: AtomicBool,
    /// Wakes the watch when the count moved.
    pub(super) wake: tokio::sync::Notify,
}

impl Link {
    fn seen(&self) -> MutexGuard<'_, BTreeMap<String, Sighting>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a reading of a present member's row at `now`; returns since when its holding
    /// (counter and token) stood still. A new token is a new holding whose counter may repeat
    /// an old one's (a row deleted and created again starts over), so it starts over too.
    pub(super) fn record(&self, row: &Lease, now: Instant) -> Instant {
        let mut seen = self.seen();
        let entry = seen
            .entry(row.key.shard().to_owned())
            .or_insert_with(|| Sighting {
                counter: row.counter,
                token: row.token.clone(),
                since: now,
            });
        // A newer holding, or the same one written since. An older counter of the same holding
        // (a listing sent before a read but recorded after it) says nothing new: counting it
        // as a write would put off the verdict on a dead member for as long again.
        if entry.token != row.token || row.counter > entry.counter {
            *entry = Sighting {
                counter: row.counter,
                token: row.token.clone(),
                since: now,
            };
        }
        entry.since
    }

    /// As [`Link::record`], for an eventually consistent reading: `None`, recording nothing,
    /// when it shows a holding (token) other than the one recorded. A replica behind may
    /// answer with a holding that has since ended (a member that restarted under its own id),
    /// and recording it would start a count afresh for a holding nobody renews: the member
    /// would look dead a lease later though alive. A consistent reading settles it.
    pub(super) fn record_eventual(&self, row: &Lease, now: Instant) -> Option<Instant> {
        let other = self
            .seen()
            .get(row.key.shard())
            .is_some_and(|entry| entry.token != row.token);
        if other {
            return None;
        }
        Some(self.record(row, now))
    }

    /// Records a listing of the roster made at `now`: every present member's row; members
    /// absent from it are forgotten.
    pub(super) fn record_listing(&self, rows: &[Lease], now: Instant) {
        let present: Vec<&Lease> = rows.iter().filter(|r| roster::is_present(r)).collect();
        for row in &present {
            self.record(row, now);
        }
        *self.present.lock().unwrap_or_else(|p| p.into_inner()) = roster::present(rows);
        self.seen()
            .retain(|member, _| present.iter().any(|r| r.key.shard() == member));
    }

    /// The members other than `me` whose row this instance has seen stand still for a lease:
    /// dead, or cut off from the table (their keepers have stopped either way), even if not
    /// buried yet. They do not count in the fair share; their rows stay theirs until buried.
    pub(super) fn stale(
        &self,
        me: &str,
        lease: std::time::Duration,
        now: Instant,
    ) -> BTreeSet<String> {
        self.seen()
            .iter()
            .filter(|(member, s)| {
                member.as_str() != me && roster::is_dead(now.duration_since(s.since), lease)
            })
            .map(|(member, _)| member.clone())
            .collect()
    }

    /// The coordinator's epoch read showed the roster's count at `epoch`: when it moved (or at
    /// the first reading), the watch lists the roster at once.
    pub(super) fn saw_roster_epoch(&self, epoch: u64) {
        self.roster_epoch_read(epoch, Some(Instant::now()));
    }

    /// A read of the roster's count at `epoch`, by the coordinator at `at` or by the watch.
    pub(super) fn roster_epoch_read(&self, epoch: u64, at: Option<Instant>) {
        let mut seen = self.roster_epoch.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_some() {
            seen.1 = at;
        }
        if seen.0 != Some(epoch) {
            seen.0 = Some(epoch);
            self.roster_moved.store(true, Ordering::SeqCst);
            self.wake.notify_one();
        }
    }

    /// When the coordinator last read the roster's count, if ever.
    pub(super) fn roster_epoch_read_at(&self) -> Option<Instant> {
        self.roster_epoch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
    }

    /// True once after the roster's count moved.
    pub(super) fn take_roster_moved(&self) -> bool {
        self.roster_moved.swap(false, Ordering::SeqCst)
    }

    /// True once since the last call the watcher saw the roster change.
    pub(super) fn take_relist(&self) -> bool {
        self.relist.swap(false, Ordering::SeqCst)
    }

    /// How many members the latest roster listing showed present.
    pub(super) fn members(&self) -> usize {
        self.present.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The present members of the latest roster listing (the watcher lists it as soon as the
    /// roster's count moves, so a member that joined is here within a take interval or so).
    pub(super) fn present(&self) -> BTreeSet<String> {
        self.present
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// True when the latest roster listing shows other present members than `members`: one
    /// not among them (it joined, and its roster bump never landed), or not one of them (it
    /// left or was buried, and the roster bump that said so failed: the janitor, whose watch
    /// learns of departed rows only from its own listings, would never delete its row).
    pub(super) fn differs_from(&self, members: &BTreeSet<String>) -> bool {
        *self.present.lock().unwrap_or_else(|p| p.into_inner()) != *members
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::LeaseKey;
    use std::time::Duration;

    fn member_row(token: &str, counter: u64) -> Lease {
        let mut row = Lease::new(LeaseKey::member("s", "m").expect("key"), Vec::new());
        row.owner = Some("m".to_owned());
        row.token = Some(token.to_owned());
        row.counter = counter;
        row
    }

    /// Review finding: a replica behind answered a glance with the holding a restarted member
    /// had before; recorded, its count started afresh for a holding nobody renews, and the
    /// member looked dead (`Link::stale`) a lease later though alive.
    #[test]
    fn an_eventual_reading_of_an_ended_holding_is_not_recorded() {
        let link = Link::default();
        let t0 = Instant::now();
        let lease = Duration::from_secs(10);
        assert_eq!(link.record(&member_row("new", 7), t0), t0);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(link.record_eventual(&member_row("old", 9), later), None);
        // The recorded holding renews: the count follows it, not the ended one.
        let renewed = t0 + Duration::from_secs(3);
        assert_eq!(
            link.record_eventual(&member_row("new", 8), renewed),
            Some(renewed)
        );
        assert!(link.stale("me", lease, t0 + lease).is_empty());
    }

    /// An older counter of the same holding (a replica behind) says nothing new: the count
    /// goes on from the first reading of the newer one.
    #[test]
    fn an_eventual_reading_of_an_older_counter_keeps_the_count() {
        let link = Link::default();
        let t0 = Instant::now();
        link.record(&member_row("t", 5), t0);
        let later = t0 + Duration::from_secs(2);
        assert_eq!(link.record_eventual(&member_row("t", 4), later), Some(t0));
        assert_eq!(link.record_eventual(&member_row("t", 5), later), Some(t0));
    }

    /// The coordinator's reading of the roster's count wakes the watch once per move, and at
    /// the first reading.
    #[test]
    fn the_roster_count_tells_the_watch_once_per_move() {
        let link = Link::default();
        link.saw_roster_epoch(3);
        assert!(link.take_roster_moved(), "the first reading");
        assert!(!link.take_roster_moved());
        link.saw_roster_epoch(3);
        assert!(!link.take_roster_moved(), "no move");
        link.saw_roster_epoch(4);
        assert!(link.take_roster_moved(), "a move");
        assert!(link.roster_epoch_read_at().is_some());
        // The watch's own reading moves the count too, but is not the coordinator's.
        let other = Link::default();
        other.roster_epoch_read(1, None);
        assert!(other.take_roster_moved());
        assert!(other.roster_epoch_read_at().is_none());
    }
}
