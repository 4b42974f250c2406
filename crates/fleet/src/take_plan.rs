//! The take planner: from one listing of a stream's rows, which rows a take round may take,
//! in what order and how many, and whom to ask for a shard when none is free.
//!
//! Pure: no store, no clock, no tokio. The coordinator measures how long each row's counter
//! has stood still on its own clock and does every read and write; this module only decides,
//! so the fair-share and expiry rules are unit-tested on plain values.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kinesis_lease_core::{rules, Lease};

/// What a take round knows besides the rows.
#[derive(Debug)]
pub(crate) struct View<'a> {
    /// This instance's owner id.
    pub(crate) me: &'a str,
    /// Per shard, how long its row's counter has stood still on this instance's clock;
    /// absent for a row not observed before.
    pub(crate) still: &'a HashMap<String, Duration>,
    /// Shards this instance reads now.
    pub(crate) held: &'a HashSet<String>,
    /// Shards whose take's outcome is still unknown.
    pub(crate) pending: &'a HashSet<String>,
    /// The lease duration.
    pub(crate) lease: Duration,
    /// This instance's first take round since it started.
    pub(crate) first_round: bool,
    /// Free or expired rows this instance's last round left to the others.
    pub(crate) left: &'a HashSet<String>,
    /// The owner ids the roster lists as members (read after the rows; see `roster`).
    pub(crate) members: &'a HashSet<String>,
    /// The owner ids whose member row the roster lists as not held by them (left or buried).
    pub(crate) departed: &'a HashSet<String>,
    /// Members whose member row this instance has seen stand still for a lease (dead or cut
    /// off, not buried yet): they do not count in the fair share and are not asked for rows,
    /// but their rows are still never taken.
    pub(crate) stale: &'a HashSet<String>,
    /// The list interval.
    pub(crate) list_interval: Duration,
}

/// Why a row may be taken, in the order rows are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// Handed over to this instance: always taken, even past the fair share.
    HandedToMe,
    /// Held under the roster by this owner id, but no longer read here (its keeper ended):
    /// always taken back, even past the fair share, because no other member takes a member's
    /// row. The balance is restored by asks.
    Orphan,
    /// No owner.
    Free,
    /// Its owner stopped renewing (the counter stood still for a lease), or it was handed to
    /// another instance that has not taken it for a list interval.
    Expired,
}

impl Rank {
    /// True for rows taken even past the fair share.
    pub(crate) fn past_share(self) -> bool {
        matches!(self, Rank::HandedToMe | Rank::Orphan)
    }
}

/// What one round decided.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    /// Rows of unfinished shards whose parents are done.
    pub(crate) readable: Vec<&'a Lease>,
    /// Shards whose owner renewed within a lease, as this instance saw it.
    pub(crate) live: HashSet<String>,
    /// The fair share: readable rows over live owners (this one included), rounded up.
    pub(crate) target: usize,
    /// How many rows this round may take besides those handed to this instance: up to its own
    /// share (`target` or one less, by owner id).
    pub(crate) room: usize,
    /// Rows to try, best first.
    pub(crate) candidates: Vec<(Rank, &'a Lease)>,
    /// How long until the first live row held elsewhere would expire, if none renews it.
    pub(crate) next_expiry: Option<Duration>,
}

/// The rows whose shard is unfinished and whose parents are finished or gone from the stream
/// (`listed(parent)` says whether a parent without a row may still be in the stream: true
/// unless a listing of the stream's shards proves it gone).
pub(crate) fn readable(rows: &[Lease], listed: impl Fn(&str) -> bool) -> Vec<&Lease> {
    let by_shard: HashMap<&str, &Lease> = rows.iter().map(|r| (r.key.shard(), r)).collect();
    rows.iter()
        .filter(|row| !row.is_finished())
        .filter(|row| {
            row.parents
                .iter()
                .all(|parent| match by_shard.get(parent.as_str()) {
                    Some(p) => p.is_finished(),
                    None => !listed(parent),
                })
        })
        .collect()
}

/// Plans one take round over `readable` rows.
pub(crate) fn plan<'a>(readable: Vec<&'a Lease>, view: &View<'_>) -> Plan<'a> {
    let still = |row: &Lease| view.still.get(row.key.shard()).copied();
    let legacy_live = |row: &Lease| still(row).is_some_and(|s| s < view.lease);
    let live: HashSet<String> = readable
        .iter()
        .filter(|r| match liveness(r, view) {
            Liveness::Member => r.owner.as_deref().is_none_or(|o| !view.stale.contains(o)),
            Liveness::Legacy => legacy_live(r),
            Liveness::Orphan | Liveness::Absent | Liveness::Free | Liveness::HandedElsewhere => {
                false
            }
        })
        .map(|r| r.key.shard().to_owned())
        .collect();
    let is_live = |row: &Lease| live.contains(row.key.shard());
    // Only rows written before the roster expire by standing still (see `roster`).
    let next_expiry = readable
        .iter()
        .filter(|r| liveness(r, view) == Liveness::Legacy && is_live(r))
        .filter_map(|r| still(r).map(|s| view.lease - s))
        .min();
    // The members of the roster but those seen standing still for a lease, this instance, and
    // the owners of live rows written before the roster. A row handed over and not taken yet
    // says nothing of its new owner's life; an operator's hold is nobody's.
    let mut owners: HashSet<&str> = view
        .members
        .iter()
        .filter(|m| !view.stale.contains(*m))
        .map(String::as_str)
        .collect();
    owners.extend(
        readable
            .iter()
            .filter(|r| liveness(r, view) == Liveness::Legacy && is_live(r))
            .filter(|r| !rules::is_evicted(r))
            .filter_map(|r| r.owner.as_deref()),
    );
    owners.insert(view.me);
    let target = readable.len().div_ceil(owners.len());
    // This owner's own share: the rows over the owners, rounded down, plus one for the first
    // `rows mod owners` owners by id. Owners that take free rows at the same time, seeing
    // the same owners, then end 6 + 5 + 5 on 16 shards, not 6 + 6 + 4 (which the last would
    // have to ask to even out).
    let mut sorted: Vec<&str> = owners.iter().copied().collect();
    sorted.sort_unstable();
    let rank = sorted.iter().position(|o| *o == view.me).unwrap_or(0);
    let share = readable.len() / owners.len() + usize::from(rank < readable.len() % owners.len());
    let mut room = share.saturating_sub(view.held.len());
    // Instances that start together see every row free and few or none of the others yet:
    // each would take far more than its share. In its first round an instance takes one row,
    // which makes it visible; at its next round (a list interval later) every instance that
    // started within that interval sees the others and takes its fair share at once, with no
    // hand-over needed. A lone instance takes the rest a round later. Rows handed over to it
    // are taken regardless.
    if view.first_round {
        room = room.min(1);
    }
    // Rows the last round left to the others and still free a round later: nobody below its
    // share took them in a whole round, so their share went unused (an owner that crashed and
    // is not buried yet, or is draining in a shutdown, still counts among the owners but takes
    // nothing). Take them, past the share if need be, rather than leave them unread; asks even
    // the shares out later (a hand-over re-delivers nothing).
    let waited = |row: &Lease| view.left.contains(row.key.shard());
    let mut candidates: Vec<(Rank, &Lease)> = readable
        .iter()
        .filter(|r| !view.held.contains(r.key.shard()) && !view.pending.contains(r.key.shard()))
        .filter_map(|&row| {
            let rank = match row.owner.as_deref() {
                Some(owner) if owner == view.me && row.token.is_none() => Rank::HandedToMe,
                None => Rank::Free,
                Some(_) => match liveness(row, view) {
                    // Held by this owner id under the roster and not read by this instance:
                    // its keeper has ended (or belonged to a dead earlier membership).
                    Liveness::Orphan => Rank::Orphan,
                    // Its owner is not a member: nothing of it still acts on the row.
                    Liveness::Absent => Rank::Expired,
                    Liveness::Legacy if !is_live(row) => Rank::Expired,
                    // Handed to an instance that never had a member row (one of an earlier
                    // release, during an upgrade): its to take, unless it has not within a list
                    // interval (it may have shut down since it asked).
                    Liveness::HandedElsewhere
                        if still(row).is_some_and(|s| s >= view.list_interval) =>
                    {
                        Rank::Expired
                    }
                    // Handed to a member seen standing still for a lease: every keeper of it
                    // has stopped, and nobody reads a row that carries no token. Its
                    // recipient may never take it, nor be buried soon: one that joined again
                    // and died before the others listed it is not watched.
                    Liveness::Member
                        if row.token.is_none()
                            && row.owner.as_deref().is_some_and(|o| view.stale.contains(o)) =>
                    {
                        Rank::Expired
                    }
                    Liveness::Legacy
                    | Liveness::Member
                    | Liveness::Free
                    | Liveness::HandedElsewhere => return None,
                },
            };
            Some((rank, row))
        })
        .collect();
    candidates.sort_by(|a, b| (a.0, a.1.key.shard()).cmp(&(b.0, b.1.key.shard())));
    spread(&mut candidates, view.me);
    let waited_rows = candidates
        .iter()
        .filter(|(rank, row)| !rank.past_share() && waited(row))
        .count();
    if !view.first_round && waited_rows > 0 {
        room = room
            .max(target.saturating_sub(view.held.len()))
            .max(waited_rows);
    }
    Plan {
        readable,
        live,
        target,
        room,
        candidates,
        next_expiry,
    }
}

/// What a row's owner field says of who acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// No owner.
    Free,
    /// Held under the roster by this owner id but not read by this instance: its keeper has
    /// ended (or belonged to a membership of this id that is gone).
    Orphan,
    /// Read by this instance, or held (or handed) under the roster by a member: live.
    Member,
    /// Held (or handed) under the roster by an owner that is not a member: nothing of it acts.
    Absent,
    /// Held with a token written before the roster: live while its counter moves.
    Legacy,
    /// Handed over to an owner that has no member row at all (an instance of an earlier
    /// release): taken by it, or by anyone once it stood still for a list interval.
    HandedElsewhere,
}

fn liveness(row: &Lease, view: &View<'_>) -> Liveness {
    let Some(owner) = row.owner.as_deref() else {
        return Liveness::Free;
    };
    let roster = row
        .token
        .as_deref()
        .is_none_or(crate::roster::is_roster_token);
    if !roster {
        return Liveness::Legacy;
    }
    if owner == view.me {
        if view.held.contains(row.key.shard()) || row.token.is_none() {
            Liveness::Member
        } else {
            Liveness::Orphan
        }
    } else if view.members.contains(owner) {
        Liveness::Member
    } else if row.token.is_none() && !view.departed.contains(owner) {
        Liveness::HandedElsewhere
    } else {
        Liveness::Absent
    }
}

/// Within each rank, starts at a place of its own for each owner id: instances taking free
/// rows at the same moment then mostly try different rows, instead of all racing for the
/// first (each race costs the losers a refused conditional write).
fn spread(candidates: &mut [(Rank, &Lease)], me: &str) {
    // FNV-1a: stable across runs and platforms.
    let offset = me.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut start = 0;
    while start < candidates.len() {
        let rank = candidates[start].0;
        let len = candidates[start..]
            .iter()
            .take_while(|(r, _)| *r == rank)
            .count();
        let group = &mut candidates[start..start + len];
        group.rotate_left((offset % len as u64) as usize);
        start += len;
    }
}

/// The instance to ask for one shard, and the rows it could give.
#[derive(Debug)]
pub(crate) struct Ask<'a> {
    /// Its owner id.
    pub(crate) owner: &'a str,
    /// How many live rows it holds.
    pub(crate) holds: usize,
    /// Its rows not already wanted by someone.
    pub(crate) open: Vec<&'a Lease>,
}

/// Below the fair share with nothing left to take: the most-loaded live owner, if it holds at
/// least two more than this instance (`mine`). Owners one apart do not move (hysteresis);
/// every move narrows the spread, so shares converge (16 over 3: 6 + 5 + 5). An operator's
/// hold is never asked: nobody would hand its rows over, and the request's write would
/// restart the hold.
pub(crate) fn ask<'a>(
    readable: &[&'a Lease],
    live: &HashSet<String>,
    me: &str,
    mine: usize,
    target: usize,
) -> Option<Ask<'a>> {
    if mine >= target {
        return None;
    }
    let mut counts: HashMap<&'a str, Vec<&'a Lease>> = HashMap::new();
    for &row in readable
        .iter()
        .filter(|r| live.contains(r.key.shard()) && !rules::is_evicted(r))
    {
        if let Some(owner) = row.owner.as_deref().filter(|o| *o != me) {
            counts.entry(owner).or_default().push(row);
        }
    }
    let (owner, rows) = counts
        .into_iter()
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(a.0)))?;
    if rows.len() < mine + 2 {
        return None;
    }
    let holds = rows.len();
    let open: Vec<&Lease> = rows.into_iter().filter(|r| r.wanted_by.is_none()).collect();
    (!open.is_empty()).then_some(Ask { owner, holds, open })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::{Checkpoint, LeaseKey};

    const LEASE: Duration = Duration::from_secs(10);
    const LIST: Duration = Duration::from_secs(2);

    fn row(shard: &str, owner: Option<&str>, token: Option<&str>) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s", shard).unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row
    }

    fn shards(n: usize, owner: impl Fn(usize) -> Option<&'static str>) -> Vec<Lease> {
        (0..n)
            .map(|i| {
                let owner = owner(i);
                row(&format!("shard-{i:02}"), owner, owner.map(|_| "t"))
            })
            .collect()
    }

    struct Fixture {
        still: HashMap<String, Duration>,
        held: HashSet<String>,
        pending: HashSet<String>,
        left: HashSet<String>,
        members: HashSet<String>,
        departed: HashSet<String>,
        stale: HashSet<String>,
    }

    impl Fixture {
        fn new(rows: &[Lease], still: Duration) -> Self {
            Self {
                still: rows
                    .iter()
                    .map(|r| (r.key.shard().to_owned(), still))
                    .collect(),
                held: HashSet::new(),
                pending: HashSet::new(),
                left: HashSet::new(),
                members: HashSet::new(),
                departed: HashSet::new(),
                stale: HashSet::new(),
            }
        }

        fn view<'a>(&'a self, me: &'a str) -> View<'a> {
            View {
                me,
                still: &self.still,
                held: &self.held,
                pending: &self.pending,
                lease: LEASE,
                first_round: false,
                left: &self.left,
                members: &self.members,
                departed: &self.departed,
                stale: &self.stale,
                list_interval: LIST,
            }
        }
    }

    fn names(plan: &Plan<'_>) -> Vec<(Rank, String)> {
        let mut names: Vec<(Rank, String)> = plan
            .candidates
            .iter()
            .map(|(rank, r)| (*rank, r.key.shard().to_owned()))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_lone_instance_may_take_every_free_row() {
        let rows = shards(4, |_| None);
        let fixture = Fixture::new(&rows, Duration::ZERO);
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!((plan.target, plan.room), (4, 4));
        assert_eq!(plan.candidates.len(), 4);
        assert!(plan.candidates.iter().all(|(rank, _)| *rank == Rank::Free));
        assert_eq!(plan.next_expiry, None);
    }

    #[test]
    fn the_fair_share_counts_live_owners_and_rounds_up() {
        // 16 rows: b holds 10, c holds 6, both renewing; a holds none.
        let rows = shards(16, |i| Some(if i < 10 { "b" } else { "c" }));
        let fixture = Fixture::new(&rows, Duration::from_secs(1));
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(plan.target, 6, "16 over 3, rounded up");
        assert!(plan.candidates.is_empty(), "live rows are not taken");
        assert_eq!(plan.next_expiry, Some(Duration::from_secs(9)));
        let ask = ask(&plan.readable, &plan.live, "a", 0, plan.target).expect("ask b");
        assert_eq!((ask.owner, ask.holds, ask.open.len()), ("b", 10, 10));
    }

    #[test]
    fn a_member_seen_standing_still_for_a_lease_does_not_count_in_the_share() {
        // Six rows over members a (this instance, 2 held) and b (2 rows, its member row still
        // for a lease, not buried yet); 2 rows free (left by a third that shut down).
        let rows: Vec<Lease> = (0..6)
            .map(|i| {
                let owner = [Some("a"), Some("a"), Some("b"), Some("b"), None, None][i];
                let token = owner.map(|_| "r1.t");
                row(&format!("shard-{i:02}"), owner, token)
            })
            .collect();
        let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
        fixture.held = ["shard-00", "shard-01"].map(String::from).into();
        fixture.members = ["a", "b"].map(String::from).into();
        let counted = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!((counted.target, counted.room), (3, 1), "b counted");
        fixture.stale = ["b"].map(String::from).into();
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!((plan.target, plan.room), (6, 4), "b not counted");
        assert_eq!(
            names(&plan),
            [
                (Rank::Free, "shard-04".into()),
                (Rank::Free, "shard-05".into())
            ],
            "the free rows, never b's: it is still a member"
        );
        // Holding nothing, a would ask b for a row while b counts, and not once it stood still.
        assert_eq!(
            ask(&counted.readable, &counted.live, "a", 0, counted.target).map(|a| a.owner),
            Some("b")
        );
        assert!(
            ask(&plan.readable, &plan.live, "a", 0, plan.target).is_none(),
            "a member standing still is not asked for a row"
        );
    }

    #[test]
    fn an_operators_hold_is_neither_asked_for_a_row_nor_counted_as_an_owner() {
        // Five rows: three in the operator's hold (an evict, standing still for less than a
        // lease), two held by b; a holds none. Asking the hold marks its row wanted, a write
        // that restarts the hold, and nobody ever hands it over (seen in the simulation,
        // seed 50: a shard unread for 19 s).
        use kinesis_lease_core::rules::{EVICTED_OWNER, EVICTED_TOKEN};
        let rows: Vec<Lease> = (0..5)
            .map(|i| {
                let (owner, token) = if i < 3 {
                    (EVICTED_OWNER, EVICTED_TOKEN)
                } else {
                    ("b", "r1.t")
                };
                row(&format!("shard-{i:02}"), Some(owner), Some(token))
            })
            .collect();
        let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
        fixture.members = ["a", "b"].map(String::from).into();
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(plan.target, 3, "5 rows over a and b: the hold is no owner");
        assert!(plan.candidates.is_empty(), "the hold is not over yet");
        let asked = ask(&plan.readable, &plan.live, "a", 0, plan.target).map(|a| a.owner);
        assert_eq!(asked, Some("b"), "b is asked, never the operator's hold");
    }

    #[test]
    fn a_row_expires_only_after_its_counter_stood_still_for_a_whole_lease() {
        let rows = shards(2, |_| Some("b"));
        let mut fixture = Fixture::new(&rows, LEASE - Duration::from_millis(1));
        let just_before = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(just_before.candidates.is_empty());
        assert_eq!(just_before.next_expiry, Some(Duration::from_millis(1)));
        fixture.still.insert("shard-00".into(), LEASE);
        let at = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(names(&at), vec![(Rank::Expired, "shard-00".to_owned())]);
        // A row never observed before is not expired: nothing is known of its counter.
        fixture.still.clear();
        let unseen = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(unseen.candidates.len(), 2);
        assert!(unseen.live.is_empty());
    }

    #[test]
    fn rows_handed_to_me_come_first_and_past_the_fair_share() {
        let mut rows = shards(3, |_| None);
        rows.push(row("shard-03", Some("a"), None)); // handed over to a
        rows.push(row("shard-04", Some("b"), None)); // handed over to b, not taken yet
        let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
        fixture.held = ["shard-09".to_owned(), "shard-08".into(), "shard-07".into()]
            .into_iter()
            .collect();
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        // Five readable rows and no member but a: a's share is 5, and it holds 3 elsewhere.
        assert_eq!((plan.target, plan.room), (5, 2));
        assert_eq!(names(&plan)[0], (Rank::HandedToMe, "shard-03".to_owned()));
        assert!(
            !names(&plan).iter().any(|(_, s)| s == "shard-04"),
            "handed to b, which never had a member row (an earlier release): b's to take"
        );
        fixture.still.insert("shard-04".into(), LIST);
        let later = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(
            names(&later).contains(&(Rank::Expired, "shard-04".to_owned())),
            "not taken by b within a list interval: anyone's"
        );
        fixture.still.insert("shard-04".into(), Duration::ZERO);
        fixture.departed.insert("b".into());
        let left = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(
            names(&left).contains(&(Rank::Expired, "shard-04".to_owned())),
            "handed to b, which left the roster: taken at once"
        );
        fixture.members.insert("b".into());
        let member = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(
            !names(&member).iter().any(|(_, s)| s == "shard-04"),
            "handed to b, a member: b's to take"
        );
        fixture.stale.insert("b".into());
        let stale = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(
            names(&stale).contains(&(Rank::Expired, "shard-04".to_owned())),
            "handed to b, a member seen standing still for a lease: anyone's, though not buried"
        );
    }

    fn roster_rows(n: usize, owner: impl Fn(usize) -> Option<&'static str>) -> Vec<Lease> {
        let mut rows = shards(n, owner);
        for row in rows.iter_mut().filter(|r| r.token.is_some()) {
            row.token = Some(crate::roster::new_token());
        }
        rows
    }

    #[test]
    fn under_the_roster_a_members_rows_never_expire_and_an_absent_owners_go_at_once() {
        let rows = roster_rows(4, |i| Some(if i < 2 { "b" } else { "c" }));
        // Standing still for ages says nothing: b and c are members.
        let mut fixture = Fixture::new(&rows, LEASE * 10);
        fixture.members = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(plan.candidates.is_empty());
        assert_eq!(plan.live.len(), 4);
        assert_eq!(plan.next_expiry, None, "no roster row expires by time");
        // c left the roster (its member row was taken or released): its rows go at once,
        // even seen for the first time.
        fixture.members.remove("c");
        fixture.still.clear();
        let plan = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(
            names(&plan),
            vec![
                (Rank::Expired, "shard-02".to_owned()),
                (Rank::Expired, "shard-03".to_owned())
            ]
        );
        assert_eq!(plan.target, 2, "4 rows over the members a and b");
    }

    #[test]
    fn members_holding_nothing_count_in_the_fair_share() {
        let rows = roster_rows(12, |_| None);
        let mut fixture = Fixture::new(&rows, Duration::ZERO);
        fixture.members = ["a", "b", "c", "d"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let plan = plan(readable(&rows, |_| false), &fixture.view("b"));
        assert_eq!((plan.target, plan.room), (3, 3));
    }

    #[test]
    fn rows_of_this_owner_id_not_read_here_are_taken_at_once_under_the_roster_only() {
        let mut rows = roster_rows(2, |_| Some("a"));
        let mut fixture = Fixture::new(&rows, Duration::ZERO);
        fixture.members = ["a".to_owned()].into_iter().collect();
        fixture.held.insert("shard-00".into());
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(names(&plan), vec![(Rank::Orphan, "shard-01".to_owned())]);
        assert!(Rank::Orphan.past_share(), "nobody else would take it");
        // Written before the roster (by a process that ignores it): only by standing still.
        rows[1].token = Some("0123".into());
        let legacy = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(legacy.candidates.is_empty());
        fixture.still.insert("shard-01".into(), LEASE);
        let later = super::plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(names(&later), vec![(Rank::Expired, "shard-01".to_owned())]);
    }

    #[test]
    fn held_and_pending_rows_are_not_candidates() {
        let rows = shards(3, |_| None);
        let mut fixture = Fixture::new(&rows, Duration::ZERO);
        fixture.held.insert("shard-00".into());
        fixture.pending.insert("shard-01".into());
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(names(&plan), vec![(Rank::Free, "shard-02".to_owned())]);
    }

    #[test]
    fn children_wait_for_their_parents() {
        let mut parent = row("p", Some("b"), Some("t"));
        let mut child = Lease::new(LeaseKey::new("s", "c").unwrap(), vec!["p".into()]);
        child.checkpoint = Some(Checkpoint::TrimHorizon);
        let rows = vec![parent.clone(), child.clone()];
        let open: Vec<&str> = readable(&rows, |_| true)
            .iter()
            .map(|r| r.key.shard())
            .collect();
        assert_eq!(open, vec!["p"]);
        parent.checkpoint = Some(Checkpoint::ShardEnd);
        let rows = vec![parent, child.clone()];
        let open: Vec<&str> = readable(&rows, |_| true)
            .iter()
            .map(|r| r.key.shard())
            .collect();
        assert_eq!(open, vec!["c"], "the finished parent is not readable");
        // A parent whose row is gone: readable once the stream no longer lists it.
        let rows = vec![child];
        assert!(readable(&rows, |_| true).is_empty());
        assert_eq!(readable(&rows, |_| false).len(), 1);
    }

    #[test]
    fn owners_one_apart_do_not_move() {
        // a holds 5, b holds 6: no ask (16 over 3 settles at 6 + 5 + 5).
        let rows = shards(11, |i| Some(if i < 6 { "b" } else { "a" }));
        let fixture = Fixture::new(&rows, Duration::from_secs(1));
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert!(ask(&plan.readable, &plan.live, "a", 5, 6).is_none());
        assert!(ask(&plan.readable, &plan.live, "a", 4, 6).is_some());
        // Rows already wanted by someone are not offered.
        let mut wanted = rows.clone();
        for r in wanted.iter_mut().filter(|r| r.is_held_by("b")) {
            r.wanted_by = Some("c".into());
        }
        let plan = super::plan(readable(&wanted, |_| false), &fixture.view("a"));
        assert!(ask(&plan.readable, &plan.live, "a", 0, 6).is_none());
    }

    #[test]
    fn a_first_round_alone_takes_one_row_then_the_share() {
        let rows = shards(16, |_| None);
        let fixture = Fixture::new(&rows, Duration::ZERO);
        let mut view = fixture.view("a");
        view.first_round = true;
        let first = plan(readable(&rows, |_| false), &view);
        assert_eq!(
            (first.target, first.room),
            (16, 1),
            "one row makes a visible"
        );
        view.first_round = false;
        let next = plan(readable(&rows, |_| false), &view);
        assert_eq!(
            next.room, 16,
            "a lone instance takes the rest a round later"
        );
    }

    #[test]
    fn instances_started_together_take_their_share_at_their_second_round() {
        // Three instances each took one row in their first round; a is at its second round.
        let mut rows = shards(16, |_| None);
        rows[3] = row("shard-03", Some("a"), Some("t"));
        rows[7] = row("shard-07", Some("b"), Some("t"));
        rows[11] = row("shard-11", Some("c"), Some("t"));
        let mut fixture = Fixture::new(&rows, Duration::from_millis(500));
        fixture.held.insert("shard-03".into());
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(
            (plan.target, plan.room),
            (6, 5),
            "a is first by id: the extra row is its"
        );
        let mut b = Fixture::new(&rows, Duration::from_millis(500));
        b.held = ["shard-07".to_owned()].into_iter().collect();
        let plan_b = super::plan(readable(&rows, |_| false), &b.view("b"));
        assert_eq!((plan_b.target, plan_b.room), (6, 4), "b's share is 5");
        // A first round takes one row even when it already sees some of the others: those
        // that start a moment later would not be counted yet.
        let mut fixture = Fixture::new(&rows, Duration::from_millis(500));
        fixture.held.clear();
        let mut view = fixture.view("d");
        view.first_round = true;
        let first = super::plan(readable(&rows, |_| false), &view);
        assert_eq!((first.target, first.room), (4, 1));
    }

    #[test]
    fn owners_start_at_different_free_rows() {
        let rows = shards(64, |_| None);
        let fixture = Fixture::new(&rows, Duration::ZERO);
        let firsts: HashSet<String> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|me| {
                let plan = plan(readable(&rows, |_| false), &fixture.view(me));
                plan.candidates[0].1.key.shard().to_owned()
            })
            .collect();
        assert!(firsts.len() >= 4, "{firsts:?}");
        // Every free row is still a candidate, once.
        let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
        assert_eq!(names(&plan).len(), 64);
    }

    #[test]
    fn rows_left_free_for_a_round_are_taken_even_past_the_share() {
        // 16 rows: c holds 4, b holds 5, d (crashed, still counted as live) holds 4; 3 rows
        // are free. Owners b, c, d: c's own share is 5 (16 / 3, the extra row is b's).
        let mut rows = shards(16, |i| match i {
            0..=3 => Some("c"),
            4..=8 => Some("b"),
            9..=12 => Some("d"),
            _ => None,
        });
        rows.iter_mut().for_each(|r| {
            if r.owner.is_some() {
                r.token = Some("t".into());
            }
        });
        let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
        fixture.held = (0..4).map(|i| format!("shard-{i:02}")).collect();
        let first = plan(readable(&rows, |_| false), &fixture.view("c"));
        assert_eq!((first.target, first.room), (6, 1), "own share 5, held 4");
        // The two rows c left are still free a round later: up to the fair share (6).
        fixture.left = ["shard-14".to_owned(), "shard-15".to_owned()]
            .into_iter()
            .collect();
        let later = plan(readable(&rows, |_| false), &fixture.view("c"));
        assert_eq!(later.room, 2);
        // At its share already (6 held): the rows that waited a whole round are still taken.
        fixture.held = (0..6).map(|i| format!("shard-{i:02}")).collect();
        let full = plan(readable(&rows, |_| false), &fixture.view("c"));
        assert_eq!(
            full.room, 2,
            "rows free for a whole round are taken past the share"
        );
        // Rows nobody left yet are not: a row freed since the last round waits its turn.
        fixture.left = HashSet::new();
        let fresh = plan(readable(&rows, |_| false), &fixture.view("c"));
        assert_eq!(fresh.room, 0);
    }
}
