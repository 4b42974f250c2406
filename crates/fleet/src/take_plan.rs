//! The take planner: from one listing of a stream's rows, which rows a take round may take,
//! in what order and how many, and whom to ask for a shard when none is free.
//!
//! Pure: no store, no clock, no tokio. The coordinator measures how long each row's counter
//! has stood still on its own clock and does every read and write; this module only decides,
//! so the fair-share and expiry rules are unit-tested on plain values.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kinesis_lease_core::{rules, Lease};

/// What a take round knows besides the rows.
#[derive(Debug)]
pub(crate) struct View<'a> {
    /// This instance's owner id.
    pub(crate) me: &'a str,
    /// Per shard, how long its row's counter has stood still on this instance's clock;
    /// absent for a row not observed before.
    pub(crate) still: &'a BTreeMap<String, Duration>,
    /// Shards this instance reads now.
    pub(crate) held: &'a BTreeSet<String>,
    /// Shards whose take's outcome is still unknown.
    pub(crate) pending: &'a BTreeSet<String>,
    /// The lease duration.
    pub(crate) lease: Duration,
    /// This instance's first take round since it started.
    pub(crate) first_round: bool,
    /// Free or expired rows this instance's last round left to the others.
    pub(crate) left: &'a BTreeSet<String>,
    /// The owner ids the roster lists as members (read after the rows; see `roster`).
    pub(crate) members: &'a BTreeSet<String>,
    /// The owner ids whose member row the roster lists as not held by them (left or buried).
    pub(crate) departed: &'a BTreeSet<String>,
    /// Members whose member row this instance has seen stand still for a lease (dead or cut
    /// off, not buried yet): they do not count in the fair share and are not asked for rows,
    /// but their rows are still never taken.
    pub(crate) stale: &'a BTreeSet<String>,
    /// The list interval.
    pub(crate) list_interval: Duration,
    /// Less than a list interval since this instance's first take round.
    pub(crate) starting: bool,
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
    pub(crate) live: BTreeSet<String>,
    /// The fair share: readable rows over live owners (this one included), rounded up.
    pub(crate) target: usize,
    /// How many rows this round may take besides those handed to this instance: up to its own
    /// share (`target` or one less, by owner id).
    pub(crate) room: usize,
    /// Rows to try, best first.
    pub(crate) candidates: Vec<(Rank, &'a Lease)>,
    /// How long until the first live row held elsewhere would expire, if none renews it.
    pub(crate) next_expiry: Option<Duration>,
    /// Rows left free by the last round and still free were not taken past the share, for
    /// now (this instance is starting, or another owner is still taking): look again soon.
    pub(crate) held_back: bool,
}

/// The rows whose shard is unfinished and whose parents are finished or gone from the stream
/// (`listed(parent)` says whether a parent without a row may still be in the stream: true
/// unless a listing of the stream's shards proves it gone).
pub(crate) fn readable(rows: &[Lease], listed: impl Fn(&str) -> bool) -> Vec<&Lease> {
    let by_shard: BTreeMap<&str, &Lease> = rows.iter().map(|r| (r.key.shard(), r)).collect();
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
    let live: BTreeSet<String> = readable
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
    let mut owners: BTreeSet<&str> = view
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
    let share = own_share(readable.len(), owners.len(), rank);
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
    //
    // Not while this instance is starting (less than a list interval since its first round):
    // instances that start together begin their full rounds up to a list interval apart (each
    // at the first take tick its listing shows a change), and the first to begin must not take
    // the rows the others are about to take (found on a table answering in tens of
    // milliseconds).
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
    spread(&mut candidates, &readable, rank, sorted.len());
    let waited_rows = candidates
        .iter()
        .filter(|(rank, row)| !rank.past_share() && waited(row))
        .count();
    // A row the last round left, taken since by an owner still below its own share: that
    // owner is still taking (a round on a slow table, or of many rows, outlasts a take
    // interval), so the shares are not unused yet. Wait a round more; the rows still free
    // then are taken.
    let share_of = |owner: &str| {
        sorted
            .iter()
            .position(|o| *o == owner)
            .map(|place| own_share(readable.len(), sorted.len(), place))
    };
    let mut holds: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &readable {
        if let (Some(owner), Some(_)) = (row.owner.as_deref(), row.token.as_deref()) {
            *holds.entry(owner).or_default() += 1;
        }
    }
    let others_taking = readable.iter().any(|r| {
        let Some(owner) = r.owner.as_deref().filter(|o| *o != view.me) else {
            return false;
        };
        view.left.contains(r.key.shard())
            && r.token.is_some()
            && share_of(owner).is_some_and(|share| holds.get(owner).copied().unwrap_or(0) < share)
    });
    let held_back = waited_rows > 0 && (view.starting || others_taking);
    if !view.first_round && waited_rows > 0 && !held_back {
        room = room
            .max(target.saturating_sub(view.held.len()))
            .max(waited_rows);
        // The rows that waited first: the room past the share is theirs, not that of rows
        // freed since in another owner's stretch.
        candidates.sort_by_key(|(rank, row)| (*rank, !waited(row)));
    }
    Plan {
        readable,
        live,
        target,
        room,
        candidates,
        next_expiry,
        held_back,
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

/// The own share of the owner at `place` of `owners` (sorted by id) in `rows` rows: the rows
/// over the owners, rounded down, plus one for the first `rows mod owners` owners.
fn own_share(rows: usize, owners: usize, place: usize) -> usize {
    rows / owners + usize::from(place < rows % owners)
}

/// Orders the candidates by rank, and within each rank from a stretch of its own for each
/// owner: of the readable rows sorted by shard id, the owner at `place` of `owners` (sorted by
/// id, as every instance sorts them) begins where the shares of the owners before it end, and
/// goes on round from there. Instances taking free rows at the same moment and seeing the same
/// owners and rows then each take from their own stretch, instead of racing for the same rows:
/// each race costs the loser a refused conditional write, and on a table answering in tens of
/// milliseconds an instance that starts just behind another loses nearly every take of its
/// round (found on moto: 3 instances on 64 shards, one took 5 of its 21). The stretches are
/// placed on the readable rows, not on the rows still free, which differ between instances
/// that list a moment apart; placed by a hash of the owner id, they fell close by chance.
fn spread(candidates: &mut [(Rank, &Lease)], readable: &[&Lease], place: usize, owners: usize) {
    let mut order: Vec<&str> = readable.iter().map(|r| r.key.shard()).collect();
    order.sort_unstable();
    let len = order.len().max(1);
    // Each stretch as long as its owner's share: it begins after the shares of those before.
    let owners = owners.max(1);
    let home: usize = (0..place % owners)
        .map(|before| own_share(len, owners, before))
        .sum();
    let along = |shard: &str| {
        let at = order.binary_search(&shard).unwrap_or_else(|at| at);
        (at + len - home) % len
    };
    candidates.sort_by(|a, b| {
        (a.0, along(a.1.key.shard()), a.1.key.shard()).cmp(&(
            b.0,
            along(b.1.key.shard()),
            b.1.key.shard(),
        ))
    });
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
    live: &BTreeSet<String>,
    me: &str,
    mine: usize,
    target: usize,
) -> Option<Ask<'a>> {
    if mine >= target {
        return None;
    }
    let mut counts: BTreeMap<&'a str, Vec<&'a Lease>> = BTreeMap::new();
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

/// Of the rows an ask may name (`open`), those this instance has seen their holder hold the
/// longest, and for at least `at_least` (the caller passes half a lease): each row's
/// `held_for` (how long since this instance saw it take its token; `None`, first listed with
/// it, counts as the longest) equal to the longest.
/// A row its holder has only just taken is likely not read yet (its iterator, its `on_taken`
/// hook): asked for then, it is handed over before a record of it is handled, and a shard asked
/// for at two joins in a row went unread for 8 s (the simulation's seed 7878 before it balanced
/// by load: taken, handed over, taken, handed over, 18.6 s after its last progress against a
/// bound of 18.5 s). When every row open was taken that recently, none is named and the ask
/// waits (seed 198673: a joiner saw a shard freed by an operator's reset, then taken; it asked
/// for it 1.5 s after the take, the longest held of its holder's rows, all taken since: 18.8 s
/// without progress). Rows at an instance's first listing count as held long: it cannot tell
/// when they were taken, one taken just before it too.
pub(crate) fn longest_held<'a>(
    open: &[&'a Lease],
    held_for: impl Fn(&Lease) -> Option<Duration>,
    at_least: Duration,
) -> Vec<&'a Lease> {
    let longest = open
        .iter()
        .map(|r| held_for(r).unwrap_or(Duration::MAX))
        .max()
        .unwrap_or(Duration::MAX);
    if longest < at_least {
        return Vec::new();
    }
    open.iter()
        .copied()
        .filter(|r| held_for(r).is_none_or(|d| d >= longest))
        .collect()
}

#[cfg(test)]
mod tests;
