//! What the rows say, as an operator reads them: pure, no I/O.
//!
//! - [`state_of`]: a shard row is *held* (owner and token), *handed over* (an owner, no token
//!   yet: the asker takes it next), *free* (no owner), *evicted* (freed by an operator: taken
//!   once it stood still for a lease) or *finished* (`SHARD_END`).
//! - [`is_bookkeeping`]: the table's own rows (`stream:*` index, `stream:*epoch` epoch,
//!   `stream@members:owner` member rows), never shown as shards.
//! - [`Judge`]: whether members are alive, from their member rows' counters over one renew
//!   interval (a live member renews its row every renew interval), never from a wall clock.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kinesis_lease_core::{rules, Checkpoint, Lease, LeaseKey};

/// A shard row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// An owner reads it: owner id and token.
    Held,
    /// Nobody holds it; the next instance to look takes it.
    Free,
    /// Its owner handed it to another instance (the owner field names the new one), which
    /// takes it with a token of its own next.
    HandedOver,
    /// Freed by an operator (`release`, `reset`): held by nobody, and taken by an instance once
    /// its counter has stood still for a lease, when the evicted holder has stopped for sure.
    Evicted,
    /// Read and settled to its end (`SHARD_END`).
    Finished,
}

impl State {
    /// The plain-text name: `held`, `free`, `handed over`, `evicted`, `finished`.
    pub fn text(self) -> &'static str {
        match self {
            State::Held => "held",
            State::Free => "free",
            State::HandedOver => "handed over",
            State::Evicted => "evicted",
            State::Finished => "finished",
        }
    }

    /// The JSON name: `held`, `free`, `handed_over`, `evicted`, `finished`.
    pub fn json(self) -> &'static str {
        match self {
            State::HandedOver => "handed_over",
            other => other.text(),
        }
    }
}

/// The state of a shard row.
pub fn state_of(row: &Lease) -> State {
    if row.checkpoint == Some(Checkpoint::ShardEnd) {
        State::Finished
    } else if rules::is_evicted(row) {
        State::Evicted
    } else if row.owner.is_none() {
        State::Free
    } else if row.token.is_none() {
        State::HandedOver
    } else {
        State::Held
    }
}

/// True for the table's own rows of a stream: its index (`stream:*`) and epoch
/// (`stream:*epoch`) rows, and any row of a pseudo-stream such as `stream@members`. Shard ids
/// never start with `*`, and stream names never contain `@`.
pub fn is_bookkeeping(key: &LeaseKey) -> bool {
    key.shard().starts_with('*') || key.stream().contains('@')
}

/// The shard rows of `stream` among `rows`, sorted by shard id: bookkeeping rows and other
/// streams' rows are left out.
pub fn shard_rows(stream: &str, rows: Vec<Lease>) -> Vec<Lease> {
    let mut rows: Vec<Lease> = rows
        .into_iter()
        .filter(|r| r.key.stream() == stream && !is_bookkeeping(&r.key))
        .collect();
    rows.sort_by(|a, b| a.key.shard().cmp(b.key.shard()));
    rows
}

/// The pseudo-stream of `stream`'s member rows (`stream@members`), as the brokers write them.
pub fn members_stream(stream: &str) -> String {
    format!("{stream}@members")
}

/// What a member row says about its instance, before any liveness is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// Held by the owner id it is keyed by, with a token: a member.
    Present,
    /// Released: the instance left the roster.
    Left,
    /// Held by another id: its watcher found it dead and took the row.
    Buried {
        /// Who buried it.
        by: String,
    },
}

/// The presence a member row shows.
pub fn presence_of(row: &Lease) -> Presence {
    match row.owner.as_deref() {
        Some(owner) if owner == row.key.shard() && row.token.is_some() => Presence::Present,
        // Held by its own id without a token is no holding the roster counts.
        Some(owner) if owner == row.key.shard() => Presence::Left,
        Some(other) => Presence::Buried {
            by: other.to_owned(),
        },
        None => Presence::Left,
    }
}

/// One member's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The owner id.
    pub owner: String,
    /// True when its member row is present and its counter moved while watched.
    pub alive: bool,
    /// `present`, `left`, `buried` or `no member row`.
    pub presence: &'static str,
    /// How it was judged, for people.
    pub judged: String,
    /// The member row's counter at the first and the last look (`None`: no member row).
    pub counters: Option<(u64, u64)>,
    /// The load and capacity its member row published at the last look, if any.
    pub load: Option<kinesis_lease_core::Load>,
}

/// Judges liveness from counter movement: the first look at the member rows, then later looks
/// until every present member moved or the window (one renew interval plus a margin) passed.
#[derive(Debug, Clone)]
pub struct Judge {
    window: Duration,
    first: BTreeMap<String, Lease>,
    last: HashMap<String, Lease>,
    elapsed: Duration,
}

impl Judge {
    /// The margin added to the renew interval: a renewal due at the end of the interval may
    /// take this long to land.
    pub const MARGIN: Duration = Duration::from_secs(1);

    /// A judge for members renewing every `renew_interval`, from the first look at their rows.
    pub fn new(renew_interval: Duration, first: Vec<Lease>) -> Self {
        let first: BTreeMap<String, Lease> = first
            .into_iter()
            .map(|r| (r.key.shard().to_owned(), r))
            .collect();
        let last = first.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Self {
            window: renew_interval + Self::MARGIN,
            first,
            last,
            elapsed: Duration::ZERO,
        }
    }

    /// How long to watch at most.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Takes a later look, `elapsed` after the first.
    pub fn look(&mut self, rows: Vec<Lease>, elapsed: Duration) {
        self.elapsed = elapsed;
        for row in rows {
            self.last.insert(row.key.shard().to_owned(), row);
        }
    }

    /// True once watching longer can change nothing: every present member moved, or the
    /// window has passed.
    pub fn is_done(&self) -> bool {
        self.elapsed >= self.window
            || self
                .first
                .iter()
                .filter(|(_, row)| presence_of(row) == Presence::Present)
                .all(|(id, row)| self.moved(id, row))
    }

    fn moved(&self, id: &str, first: &Lease) -> bool {
        self.last
            .get(id)
            .is_some_and(|last| last.counter != first.counter || last.token != first.token)
    }

    /// The verdict on every member row seen at the first look, by owner id.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        self.first
            .iter()
            .map(|(id, first)| {
                let last = self.last.get(id).unwrap_or(first);
                let counters = Some((first.counter, last.counter));
                let (alive, presence, judged) = match presence_of(last) {
                    Presence::Present if self.moved(id, first) => (
                        true,
                        "present",
                        format!(
                            "counter {} -> {} within {}",
                            first.counter,
                            last.counter,
                            secs(self.elapsed)
                        ),
                    ),
                    Presence::Present => (
                        false,
                        "present",
                        format!(
                            "counter {} not renewed for {} (renews every {}): stopped or cut off, \
                             buried once it stood still for a lease",
                            first.counter,
                            secs(self.elapsed),
                            secs(self.window - Self::MARGIN)
                        ),
                    ),
                    Presence::Left => (false, "left", "member row released: it left".to_owned()),
                    Presence::Buried { by } => {
                        (false, "buried", format!("found dead and buried by `{by}`"))
                    }
                };
                Verdict {
                    owner: id.clone(),
                    alive,
                    presence,
                    judged,
                    counters,
                    load: last.load,
                }
            })
            .collect()
    }
}

/// The shards each owner holds (owner and token) among `shards`, by owner id, sorted.
pub fn holdings(shards: &[Lease]) -> BTreeMap<String, Vec<String>> {
    let mut by_owner: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in shards {
        if state_of(row) == State::Held {
            if let Some(owner) = &row.owner {
                by_owner
                    .entry(owner.clone())
                    .or_default()
                    .push(row.key.shard().to_owned());
            }
        }
    }
    for held in by_owner.values_mut() {
        held.sort();
    }
    by_owner
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(stream: &str, shard: &str, owner: Option<&str>, token: Option<&str>) -> Lease {
        let mut row = Lease::new(LeaseKey::new(stream, shard).unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row.counter = 1;
        row
    }

    #[test]
    fn rows_are_held_free_handed_over_or_finished() {
        assert_eq!(state_of(&row("s", "a", Some("x"), Some("t"))), State::Held);
        assert_eq!(state_of(&row("s", "a", None, None)), State::Free);
        assert_eq!(state_of(&row("s", "a", Some("y"), None)), State::HandedOver);
        let mut done = row("s", "a", None, None);
        done.checkpoint = Some(Checkpoint::ShardEnd);
        assert_eq!(state_of(&done), State::Finished);
        let mut evicted = row("s", "a", Some("x"), Some("t"));
        rules::evicted(&mut evicted, None);
        assert_eq!(state_of(&evicted), State::Evicted);
        assert_eq!(State::HandedOver.text(), "handed over");
        assert_eq!(State::HandedOver.json(), "handed_over");
    }

    #[test]
    fn bookkeeping_rows_are_never_shards() {
        let rows = vec![
            row("s", "shardId-2", None, None),
            row("s", "*", None, None),
            row("s", "*epoch", None, None),
            row("s@members", "owner-1", Some("owner-1"), Some("t")),
            row("other", "shardId-0", None, None),
            row("s", "shardId-1", None, None),
        ];
        let shards: Vec<String> = shard_rows("s", rows)
            .iter()
            .map(|r| r.key.shard().to_owned())
            .collect();
        assert_eq!(shards, ["shardId-1", "shardId-2"]);
        assert_eq!(members_stream("s"), "s@members");
    }

    fn member(id: &str, owner: Option<&str>, token: Option<&str>, counter: u64) -> Lease {
        let mut r = row("s@members", id, owner, token);
        r.counter = counter;
        r
    }

    #[test]
    fn liveness_is_judged_by_counter_movement_within_one_renew_interval() {
        let renew = Duration::from_secs(3);
        let first = vec![
            member("a", Some("a"), Some("t"), 10),
            member("b", Some("b"), Some("t"), 20),
            member("c", None, None, 30),
            member("d", Some("a"), Some("u"), 40),
        ];
        let mut judge = Judge::new(renew, first.clone());
        assert_eq!(judge.window(), Duration::from_secs(4));
        assert!(!judge.is_done(), "nobody moved yet");
        judge.look(
            vec![member("a", Some("a"), Some("t"), 11), first[1].clone()],
            Duration::from_secs(2),
        );
        assert!(!judge.is_done(), "b may still renew");
        judge.look(vec![first[1].clone()], Duration::from_secs(4));
        assert!(judge.is_done(), "the window passed");
        let verdicts = judge.verdicts();
        let by: HashMap<&str, &Verdict> = verdicts.iter().map(|v| (v.owner.as_str(), v)).collect();
        assert!(by["a"].alive);
        assert_eq!(by["a"].judged, "counter 10 -> 11 within 4.0 s");
        assert!(!by["b"].alive);
        assert!(
            by["b"].judged.contains("not renewed for 4.0 s"),
            "{}",
            by["b"].judged
        );
        assert_eq!((by["c"].alive, by["c"].presence), (false, "left"));
        assert_eq!((by["d"].alive, by["d"].presence), (false, "buried"));
        assert!(by["d"].judged.contains("`a`"));
    }

    #[test]
    fn watching_ends_once_every_present_member_moved() {
        let mut judge = Judge::new(
            Duration::from_secs(3),
            vec![
                member("a", Some("a"), Some("t"), 1),
                member("c", None, None, 3),
            ],
        );
        judge.look(
            vec![member("a", Some("a"), Some("t"), 2)],
            Duration::from_millis(500),
        );
        assert!(judge.is_done(), "the member that left needs no watching");
        // A member row taken again (a restart) with a new token counts as a move too.
        let mut judge = Judge::new(
            Duration::from_secs(3),
            vec![member("a", Some("a"), Some("t"), 1)],
        );
        judge.look(
            vec![member("a", Some("a"), Some("u"), 1)],
            Duration::from_millis(500),
        );
        assert!(judge.is_done());
    }

    #[test]
    fn holdings_count_held_rows_only() {
        let shards = vec![
            row("s", "b", Some("x"), Some("t")),
            row("s", "a", Some("x"), Some("t")),
            row("s", "c", Some("y"), None),
            row("s", "d", None, None),
        ];
        let held = holdings(&shards);
        assert_eq!(held.len(), 1);
        assert_eq!(held["x"], ["a", "b"]);
    }
}
