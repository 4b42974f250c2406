//! The checks, run on the consumers' logs, the writer's acknowledgements, what fired, the
//! snapshots of the lease table and the stream's family tree of shards.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::events::{
    checkpoint_place, numeric, record_place, seq_key, split_checkpoint, Event, Kind, SHARD_END,
};
use crate::fired::Fired;
use crate::writer::Put;
use crate::{EXIT_DEADLINE, TAKEOVER_BOUND, THAW_GRACE};

/// A check that failed: what it says, and the shard and time (unix ms) it is about, for the
/// window of events the report prints around it.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) text: String,
    pub(crate) shard: Option<String>,
    pub(crate) at: u128,
}

impl Violation {
    fn on(shard: &str, at: u128, text: String) -> Self {
        Violation {
            text,
            shard: Some(shard.to_owned()),
            at,
        }
    }

    fn at(at: u128, text: String) -> Self {
        Violation {
            text,
            shard: None,
            at,
        }
    }

    /// A failure of the runner itself (a reshard it could not make, ...).
    pub(crate) fn runner(text: String) -> Self {
        Violation {
            text,
            shard: None,
            at: 0,
        }
    }
}

pub(crate) struct Checks<'a> {
    pub(crate) events: &'a [Event],
    pub(crate) puts: &'a [Put],
    pub(crate) fired: &'a [Fired],
    pub(crate) ordered: &'a HashSet<String>,
    pub(crate) checkpoints: &'a [(u128, BTreeMap<String, String>)],
    /// Each shard's parents, from the stream at the end.
    pub(crate) parents: &'a HashMap<String, Vec<String>>,
    pub(crate) start: u128,
}

impl Checks<'_> {
    pub(crate) fn run(&self) -> Vec<Violation> {
        let mut v = Vec::new();
        v.extend(self.nothing_lost());
        v.extend(self.one_handler_at_a_time());
        v.extend(self.key_order());
        v.extend(self.checkpoints_forward());
        v.extend(self.checkpoints_settled());
        v.extend(self.parents_first());
        v.extend(self.takeover_bound());
        v.extend(self.no_duplicate_on_deploy());
        v.extend(self.exits());
        v
    }

    fn rel(&self, t: u128) -> String {
        format!("{:.1} s", (t.saturating_sub(self.start)) as f64 / 1e3)
    }

    fn handled(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.kind == Kind::Handled)
    }

    /// When each record (shard, sequence, subsequence) was first handled: its handler ended.
    fn first_handled(&self) -> HashMap<(&str, &str, Option<u64>), u128> {
        let mut ended = HashMap::new();
        for e in self.handled() {
            let t = ended
                .entry((e.shard.as_str(), e.sequence.as_str(), e.subsequence))
                .or_insert(e.ended);
            *t = (*t).min(e.ended);
        }
        ended
    }

    fn nothing_lost(&self) -> Vec<Violation> {
        let seen: HashSet<(&str, &str, Option<u64>)> = self
            .handled()
            .map(|e| (e.shard.as_str(), e.sequence.as_str(), e.subsequence))
            .collect();
        let lost: Vec<&Put> = self
            .puts
            .iter()
            .filter(|p| !seen.contains(&(p.shard.as_str(), p.sequence.as_str(), p.subsequence)))
            .collect();
        match lost.first() {
            None => Vec::new(),
            Some(first) => vec![Violation::on(&first.shard, first.at, format!(
                "lost: {} of {} acknowledged records never handled; first {} {} (key {}, put at {})",
                lost.len(),
                self.puts.len(),
                first.shard,
                first.sequence,
                first.key,
                self.rel(first.at)
            ))],
        }
    }

    fn frozen_covers(&self, process: &str, began: u128, ended: u128) -> bool {
        self.fired.iter().any(|f| match f {
            Fired::Frozen {
                process: p,
                from,
                to,
            } => p == process && began <= *to + THAW_GRACE && ended + THAW_GRACE >= *from,
            _ => false,
        })
    }

    /// Per shard: once a process took a shard after another process handled it, the other
    /// handles none of its records after that take (beyond a thawed process's grace).
    fn one_handler_at_a_time(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut by_shard: HashMap<&str, Vec<&Event>> = HashMap::new();
        for e in self
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Take | Kind::Handled | Kind::Failed))
        {
            by_shard.entry(e.shard.as_str()).or_default().push(e);
        }
        for (shard, mut list) in by_shard {
            list.sort_by_key(|e| (e.began, e.kind != Kind::Take));
            // The latest take of the shard by each process.
            let mut taken_at: HashMap<&str, u128> = HashMap::new();
            for e in &list {
                if e.kind == Kind::Take {
                    taken_at.insert(e.process.as_str(), e.began);
                    continue;
                }
                let mine = taken_at.get(e.process.as_str()).copied().unwrap_or(0);
                // Another process took the shard after this process's own take, and this
                // record's handler began after that take.
                if let Some((other, at)) = taken_at
                    .iter()
                    .filter(|(p, at)| **p != e.process && **at > mine && **at + 500 < e.began)
                    .max_by_key(|(_, at)| **at)
                {
                    if !self.frozen_covers(&e.process, e.began, e.ended) {
                        out.push(Violation::on(shard, e.began, format!(
                            "two handlers: {} handled {shard} {} at {} after {other} took the shard at {}",
                            e.process,
                            e.sequence,
                            self.rel(e.began),
                            self.rel(*at)
                        )));
                        break;
                    }
                }
            }
        }
        out
    }

    /// Within each holding of a shard by an ordered process (from its take), each key's
    /// records are handled in sequence order.
    fn key_order(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut last: HashMap<(&str, &str, &str), (&str, Option<u64>)> = HashMap::new();
        let mut sorted: Vec<&Event> = self.events.iter().collect();
        sorted.sort_by_key(|e| (e.process.clone(), e.began, e.kind != Kind::Take));
        for e in sorted {
            if !self.ordered.contains(&e.process) {
                continue;
            }
            if matches!(e.kind, Kind::Checkpoint | Kind::Failed) {
                continue;
            }
            if e.kind != Kind::Handled {
                last.retain(|(p, s, _), _| !(*p == e.process && *s == e.shard));
                continue;
            }
            let k = (e.process.as_str(), e.shard.as_str(), e.key.as_str());
            let now = (e.sequence.as_str(), e.subsequence);
            if let Some(prev) = last.get(&k) {
                if (seq_key(now.0), now.1) <= (seq_key(prev.0), prev.1) {
                    out.push(Violation::on(
                        &e.shard,
                        e.began,
                        format!(
                        "key order: {} handled key {} of {} at {} ({}) after {} within one holding",
                        e.process,
                        e.key,
                        e.shard,
                        now.0,
                        self.rel(e.began),
                        prev.0
                    ),
                    ));
                    break;
                }
            }
            last.insert(k, now);
        }
        out
    }

    /// Checkpoints never move back: a sequence number is followed by a higher or equal one or
    /// by `SHARD_END`, never by a lower one or a start position (nothing here resets), and
    /// `SHARD_END` is final. Checked over every checkpoint write that landed, per shard in the
    /// order they were sent (a holder's writes are sent one at a time, and a later holder's
    /// after its take, so two that landed out of that order moved the row back), and over the
    /// table's snapshots.
    fn checkpoints_forward(&self) -> Vec<Violation> {
        let mut writes: Vec<&Event> = self
            .events
            .iter()
            .filter(|e| e.kind == Kind::Checkpoint)
            .collect();
        writes.sort_by_key(|e| (e.began, e.ended));
        let written = writes.iter().map(|e| {
            let cp = match e.subsequence {
                Some(sub) => format!("{}/{sub}", e.sequence),
                None => e.sequence.clone(),
            };
            (
                e.began,
                e.shard.as_str(),
                cp,
                format!(" (written by {})", e.process),
            )
        });
        let snapshots = self.checkpoints.iter().flat_map(|(at, rows)| {
            rows.iter().map(move |(shard, cp)| {
                (
                    *at,
                    shard.as_str(),
                    cp.clone(),
                    " (in the table)".to_owned(),
                )
            })
        });
        let mut out = self.forward(written);
        out.extend(self.forward(snapshots));
        out
    }

    /// The forward rule over one series of (time, shard, checkpoint, where): the first
    /// violation per shard.
    fn forward<'s>(
        &self,
        series: impl Iterator<Item = (u128, &'s str, String, String)>,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut last: HashMap<&str, String> = HashMap::new();
        let mut reported: HashSet<&str> = HashSet::new();
        // A sequence number, with its place in an aggregate (`sequence/subsequence`).
        let number = |c: &str| numeric(split_checkpoint(c).0);
        fn lower(a: &str, b: &str) -> bool {
            let ((s, sub), (t, tub)) = (split_checkpoint(a), split_checkpoint(b));
            checkpoint_place(s, sub) < checkpoint_place(t, tub)
        }
        for (at, shard, cp, source) in series {
            if let Some(prev) = last.get(shard) {
                let back = if prev == SHARD_END {
                    cp != SHARD_END
                } else if number(&cp) {
                    number(prev) && lower(&cp, prev)
                } else {
                    number(prev) && cp != SHARD_END
                };
                if back && reported.insert(shard) {
                    out.push(Violation::on(
                        shard,
                        at,
                        format!(
                            "checkpoint moved back: {shard} from {prev} to {cp} at {}{source}",
                            self.rel(at)
                        ),
                    ));
                }
            }
            // A marker after a number is reported above; the number stays the reference.
            let keep = number(&cp)
                || cp == SHARD_END
                || last.get(shard).is_none_or(|p| !number(p) && p != SHARD_END);
            if keep {
                last.insert(shard, cp);
            }
        }
        out
    }

    /// After a kill or a freeze, each shard the process was the last to handle is handled
    /// again within the bound (plus the freeze's own time), when it had records to read.
    fn takeover_bound(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for f in self.fired {
            // A kill: anyone (the restarted process too) handles the shards again in time. A
            // freeze longer than the bound: the others must have taken them meanwhile.
            let (process, at, others_only) = match f {
                Fired::Killed { process, at } => (process, *at, false),
                Fired::Frozen { process, from, to } if to - from > TAKEOVER_BOUND.as_millis() => {
                    (process, *from, true)
                }
                _ => continue,
            };
            // The shards this process handled last before the fault.
            let mut last_by_shard: HashMap<&str, &Event> = HashMap::new();
            for e in self.handled().filter(|e| e.began <= at) {
                let slot = last_by_shard.entry(e.shard.as_str()).or_insert(e);
                if e.began >= slot.began {
                    *slot = e;
                }
            }
            // A later fault that keeps processes from the table (a DynamoDB proxy down, slow or
            // failing, a freeze) within the window extends it by its own time.
            let mut bound = TAKEOVER_BOUND.as_millis();
            for g in self.fired {
                let (from, to) = match g {
                    Fired::Proxy { what, from, to, .. } if what.starts_with("dynamodb") => {
                        (*from, *to)
                    }
                    Fired::Frozen { from, to, .. } => (*from, *to),
                    _ => continue,
                };
                if from > at && from < at + bound {
                    bound += to - from;
                }
            }
            for (shard, e) in last_by_shard {
                if e.process != *process {
                    continue;
                }
                // Only when records of the shard were put early enough to be read in time.
                let waiting = self
                    .puts
                    .iter()
                    .any(|p| p.shard == shard && p.at > at && p.at + 2_000 < at + bound);
                // A shard finished within the window needs no taker (a put to a parent before
                // its split can be acknowledged after the parent ended).
                let finished = self.events.iter().any(|x| {
                    x.kind == Kind::Checkpoint
                        && x.shard == shard
                        && x.sequence == SHARD_END
                        && x.began < at + bound
                });
                if !waiting || finished {
                    continue;
                }
                // Taken over: another process (or the restarted one) took the shard or handled
                // one of its records. A later fault on the taker (its Kinesis proxy down, say)
                // delays the first record legitimately, not the take.
                let next = self
                    .events
                    .iter()
                    .filter(|x| x.shard == shard && x.began > at)
                    .filter(|x| {
                        x.kind == Kind::Handled || (x.kind == Kind::Take && x.process != *process)
                    })
                    .filter(|x| !others_only || x.process != *process)
                    .map(|x| x.began)
                    .min();
                if next.is_none_or(|n| n > at + bound) {
                    out.push(Violation::on(shard, at, format!(
                        "takeover: {shard} of {process} neither taken nor handled within {:.0} s of the fault at {} (next at {})",
                        bound as f64 / 1e3,
                        self.rel(at),
                        next.map_or("never".to_owned(), |n| self.rel(n))
                    )));
                }
            }
        }
        out
    }

    fn no_duplicate_on_deploy(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for f in self.fired {
            let Fired::Termed { process, at, .. } = f else {
                continue;
            };
            // A DynamoDB fault on the process's proxy within a lease of the deploy allows the
            // redelivery at-least-once promises (its final checkpoints may not land).
            let slot = process
                .strip_prefix('p')
                .and_then(|p| p.split('.').next())
                .and_then(|p| p.parse::<usize>().ok());
            if self.fired.iter().any(|g| {
                matches!(g, Fired::Proxy { slot: s, what, from, to }
                    if Some(*s) == slot && what.starts_with("dynamodb")
                        && *from <= *at && *to + 10_000 >= *at)
            }) {
                continue;
            }
            // The shards it held when told to stop: its last take of each came after its last
            // loss, before the SIGTERM.
            let mut last: HashMap<&str, Kind> = HashMap::new();
            let mut mine: Vec<&Event> = self
                .events
                .iter()
                .filter(|e| {
                    e.process == *process
                        && e.began <= *at
                        && matches!(e.kind, Kind::Take | Kind::Lost)
                })
                .collect();
            mine.sort_by_key(|e| e.began);
            for e in mine {
                last.insert(e.shard.as_str(), e.kind);
            }
            let held: HashSet<&str> = last
                .iter()
                .filter(|(_, k)| **k == Kind::Take)
                .map(|(s, _)| *s)
                .collect();
            let before: HashSet<(&str, &str, Option<u64>)> = self
                .handled()
                .filter(|e| e.process == *process && held.contains(e.shard.as_str()))
                .map(|e| (e.shard.as_str(), e.sequence.as_str(), e.subsequence))
                .collect();
            // Handled again by a process that took the shard after the SIGTERM.
            let taken_after: HashSet<(&str, &str)> = self
                .events
                .iter()
                .filter(|e| e.kind == Kind::Take && e.process != *process && e.began > *at)
                .map(|e| (e.process.as_str(), e.shard.as_str()))
                .collect();
            if let Some(dup) = self.handled().find(|e| {
                e.began > *at
                    && taken_after.contains(&(e.process.as_str(), e.shard.as_str()))
                    && before.contains(&(e.shard.as_str(), e.sequence.as_str(), e.subsequence))
            }) {
                out.push(Violation::on(&dup.shard, dup.began, format!(
                    "duplicate across a deploy: {} {} handled by {process} and again by {} at {} (SIGTERM at {})",
                    dup.shard,
                    dup.sequence,
                    dup.process,
                    self.rel(dup.began),
                    self.rel(*at)
                )));
            }
        }
        out
    }

    /// No checkpoint passes a record that was not handled: at each snapshot of the table,
    /// every acknowledged record of the shard up to its checkpoint had been handled (its
    /// handler ended) by then.
    fn checkpoints_settled(&self) -> Vec<Violation> {
        let ended = self.first_handled();
        let mut puts: HashMap<&str, Vec<&Put>> = HashMap::new();
        for p in self.puts {
            puts.entry(p.shard.as_str()).or_default().push(p);
        }
        // The first acknowledged record of `shard` at or below the checkpoint that was not
        // handled by `by`.
        // `SHARD_END` covers every record of the shard.
        let unsettled = |shard: &str, sequence: &str, subsequence: Option<u64>, by: u128| {
            let end = sequence == SHARD_END;
            let cp = checkpoint_place(sequence, subsequence);
            puts.get(shard).into_iter().flatten().copied().find(|p| {
                (end || record_place(&p.sequence, p.subsequence) <= cp)
                    && ended
                        .get(&(p.shard.as_str(), p.sequence.as_str(), p.subsequence))
                        .is_none_or(|t| *t > by)
            })
        };
        let shown = |p: &Put| match p.subsequence {
            Some(sub) => format!("{}/{sub}", p.sequence),
            None => p.sequence.clone(),
        };
        // Each checkpoint write that landed, as its process sent it: every record up to it
        // handled before the send (both times from this machine's clock, to the ms).
        for w in self.events.iter().filter(|e| {
            e.kind == Kind::Checkpoint && (numeric(&e.sequence) || e.sequence == SHARD_END)
        }) {
            if let Some(p) = unsettled(&w.shard, &w.sequence, w.subsequence, w.began + 5) {
                return vec![Violation::on(&w.shard, w.began, format!(
                    "checkpoint before settlement: {} wrote {}{} on {} at {} while {} (key {}) was not handled yet",
                    w.process,
                    w.sequence,
                    w.subsequence.map_or(String::new(), |s| format!("/{s}")),
                    w.shard,
                    self.rel(w.began),
                    shown(p),
                    p.key
                ))];
            }
        }
        for (at, rows) in self.checkpoints {
            for (shard, cp) in rows {
                let (sequence, subsequence) = split_checkpoint(cp);
                if !numeric(sequence) && sequence != SHARD_END {
                    continue;
                }
                if let Some(p) = unsettled(shard, sequence, subsequence, *at + 200) {
                    return vec![Violation::on(shard, *at, format!(
                        "checkpoint before settlement: {shard} checkpointed at {cp} at {} while {} (key {}) was not handled yet",
                        self.rel(*at),
                        shown(p),
                        p.key
                    ))];
                }
            }
        }
        Vec::new()
    }

    /// Parents first: no record of a child shard entered a handler before every record of
    /// each of its ancestors (parents, theirs, ...) was handled, in every mode.
    fn parents_first(&self) -> Vec<Violation> {
        // Per shard: when its last record was first handled, and when its first record began.
        let first_done = self.first_handled();
        let mut first_began: HashMap<&str, &Event> = HashMap::new();
        // A failed attempt began a handler too.
        for e in self
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Handled | Kind::Failed))
        {
            let b = first_began.entry(e.shard.as_str()).or_insert(e);
            if e.began < b.began {
                *b = e;
            }
        }
        let mut done: HashMap<&str, (u128, (&str, Option<u64>))> = HashMap::new();
        for ((shard, sequence, sub), t) in &first_done {
            let d = done.entry(shard).or_insert((*t, (sequence, *sub)));
            if *t > d.0 {
                *d = (*t, (sequence, *sub));
            }
        }
        let mut out = Vec::new();
        for (child, first) in &first_began {
            // Every ancestor, each once.
            let mut ancestors: Vec<&str> = Vec::new();
            let mut queue: Vec<&str> = vec![child];
            while let Some(s) = queue.pop() {
                for p in self.parents.get(s).into_iter().flatten() {
                    if !ancestors.contains(&p.as_str()) {
                        ancestors.push(p);
                        queue.push(p);
                    }
                }
            }
            for ancestor in ancestors {
                if let Some((t, (sequence, _))) = done.get(ancestor) {
                    if first.began < *t {
                        out.push(Violation::on(child, first.began, format!(
                            "parents first: {} handled {child} {} at {} before {ancestor} {sequence} (an ancestor's record) was handled at {}",
                            first.process,
                            first.sequence,
                            self.rel(first.began),
                            self.rel(*t)
                        )));
                    }
                }
            }
        }
        out
    }

    fn exits(&self) -> Vec<Violation> {
        self.fired
            .iter()
            .filter_map(|f| match f {
                Fired::Died {
                    process,
                    at,
                    status,
                } => Some(Violation::at(
                    *at,
                    format!(
                        "exit: {process} exited on its own at {} ({status})",
                        self.rel(*at)
                    ),
                )),
                Fired::Termed {
                    process,
                    at,
                    exited: None,
                } => Some(Violation::at(
                    *at,
                    format!(
                        "exit: {process} did not exit within {EXIT_DEADLINE:?} of SIGTERM at {}",
                        self.rel(*at)
                    ),
                )),
                _ => None,
            })
            .collect()
    }
}
