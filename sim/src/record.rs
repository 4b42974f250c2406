//! `Recorder`: what happened, and the invariants checked as it happens.
//!
//! - Handlers: never two instances running handlers on one shard's records at once (checked
//!   at every handler entry).
//! - Checkpoints (sampled from the table every 250 ms): never move back, and never pass an
//!   expected record that no handler completed.
//! - Order (serial, lanes by key, serial batches): each partition key's expected records
//!   complete in put order; a redelivery may repeat a prefix, never reorder (checked at every
//!   completion). Parents first (every mode): no record of a child shard enters a handler
//!   before every expected record of its parents completed (checked at every entry).
//! - Liveness (see `liveness`): every readable shard with unhandled records makes progress
//!   within its bound (checked at every sample).
//! - At the end: every expected record completed at least once; in calm seeds, none twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_broker::{lease::Lease, Checkpoint, SequenceNumber};

use crate::liveness::{Liveness, ShardNow, Stall, OPERATOR_HOLD};

/// One record put into the stream.
#[derive(Debug, Clone)]
pub struct Put {
    /// The shard it landed on.
    pub shard: String,
    /// Its sequence number.
    pub sequence: SequenceNumber,
    /// The global event number of the put (opens and puts share the numbering).
    pub event: u64,
    /// Simulated ms since the start when it was put.
    pub at_ms: u64,
    /// Its partition key.
    pub key: String,
    /// True when it must be handled (put after the subscription's start position).
    pub expected: bool,
}

/// What the recorder keeps of one expected record.
#[derive(Debug, Clone)]
struct Expected {
    key: String,
    /// Its place among its key's expected records, in put order.
    place: usize,
    at_ms: u64,
}

/// One key's expected records in put order, and how many of the first have completed.
#[derive(Debug, Default)]
struct KeyOrder {
    records: Vec<(String, SequenceNumber)>,
    done: Vec<bool>,
    /// Every record before this place has completed.
    prefix: usize,
}

#[derive(Debug, Default)]
struct State {
    history: Vec<String>,
    violations: Vec<String>,
    puts: Vec<Put>,
    /// Records expected to be handled, by shard, as sequence numbers.
    expected: BTreeMap<String, BTreeSet<SequenceNumber>>,
    /// Completions per (shard, sequence): the instances, in order.
    completed: BTreeMap<(String, SequenceNumber), Vec<String>>,
    /// Handler attempts so far per (shard, sequence).
    attempts: BTreeMap<(String, SequenceNumber), u32>,
    /// Instances running handlers now, per shard, with how many attempts each.
    running: BTreeMap<String, BTreeMap<String, u32>>,
    /// The last checkpoint seen per shard.
    checkpoints: BTreeMap<String, Checkpoint>,
    handled: u64,
    /// Per expected record: its key, place and put time.
    info: BTreeMap<(String, SequenceNumber), Expected>,
    /// Per key: the order of its expected records.
    keys: BTreeMap<String, KeyOrder>,
    /// Per shard: expected records not completed yet.
    outstanding: BTreeMap<String, BTreeSet<SequenceNumber>>,
    /// Per shard: when its last outstanding record completed (its children may start).
    drained_at: BTreeMap<String, u64>,
    /// Per shard: its parents, as the stream lists them.
    parents: BTreeMap<String, Vec<String>>,
    /// Check per-key order (serial, lanes by key, serial batches).
    ordered: bool,
    /// Per shard: its last handler entry or completion.
    progress: BTreeMap<String, u64>,
    /// Slow handler units (a record or a batch taking a second or more) running now, per
    /// instance.
    slow: BTreeMap<String, u32>,
    /// When a slow unit that left every loop of its instance busy ended: until then those
    /// loops were held.
    slow_ended: BTreeMap<String, u64>,
    /// How many slow units hold every loop of an instance: 1 where one slow unit holds what
    /// a shard's records wait for (one loop; a lane by key, whose queue fills and holds its
    /// readers), the loop count where loops take records in no order (a slow unit holds one
    /// loop, the others go on: simulation seed 145969 hid 10 s of a record queued behind
    /// another loop's slow batch while that batch ran, excused as if every loop were held).
    loops: u32,
    /// The handlers run in one lane per instance (serial, serial batches).
    single_lane: bool,
    /// Per instance, in a single-lane mode: when its lane ran a handler (ms), and when the
    /// record it ran was put.
    lane_busy: BTreeMap<String, Vec<(u64, u64, u64)>>,
    /// Per shard: when a slow hook (`on_taken`, `before_final_checkpoint`) ran on it (ms).
    /// Its children wait for it: the time is excused for them (each level of a lineage read
    /// to its end may run both; the bound allows one hook, the shard's own `on_taken`).
    hooks_ran: BTreeMap<String, Vec<(u64, u64)>>,
    /// Per shard: its holder at the last sample, and since when it holds it (ms).
    held_by: BTreeMap<String, (String, u64)>,
    liveness: Liveness,
    /// Tags of violations reported once.
    reported: BTreeSet<String>,
    /// Expected records an operator's reset put back before the shard's new position, with
    /// the reset's time (ms): each must be handled again by an attempt that entered at least
    /// [`OPERATOR_HOLD`] later (the next holding's, not the evicted one's).
    redo: BTreeMap<(String, SequenceNumber), u64>,
    /// When the last attempt of each instance on a record in `redo` entered (ms).
    redo_entered: BTreeMap<(String, String, SequenceNumber), u64>,
    /// The last operator's move of each shard: who held the row, and its counter after the
    /// move.
    operator_moves: BTreeMap<String, (Option<String>, u64)>,
}

/// The shared recorder of one run.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    state: Arc<Mutex<State>>,
    clock_start: Arc<Mutex<Option<tokio::time::Instant>>>,
}

/// Counts one handler attempt as running while it lives (also when the attempt is aborted).
#[derive(Debug)]
pub struct Running {
    recorder: Recorder,
    instance: String,
    shard: String,
    slow: bool,
    /// When the attempt started (ms).
    entered: u64,
    /// When its record was put (ms), for an expected record.
    put: Option<u64>,
}

impl Running {
    /// Marks this attempt as a slow unit (a second or more): it holds one loop of its
    /// instance; when slow units hold every loop, that counts as progress for every shard the
    /// instance holds.
    pub fn slow(&mut self) {
        if !self.slow {
            self.slow = true;
            *self
                .recorder
                .lock()
                .slow
                .entry(self.instance.clone())
                .or_default() += 1;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let now = self.recorder.now_ms();
        let mut state = self.recorder.lock();
        state.progress.insert(self.shard.clone(), now);
        if let (true, Some(put)) = (state.single_lane, self.put) {
            state
                .lane_busy
                .entry(self.instance.clone())
                .or_default()
                .push((self.entered, now, put));
        }
        if self.slow {
            let loops = state.loops.max(1);
            if let Some(n) = state.slow.get_mut(&self.instance) {
                if *n >= loops {
                    state.slow_ended.insert(self.instance.clone(), now);
                }
                let n = state.slow.get_mut(&self.instance).map(|n| {
                    *n -= 1;
                    *n
                });
                if n == Some(0) {
                    state.slow.remove(&self.instance);
                }
            }
        }
        if let Some(by) = state.running.get_mut(&self.shard) {
            if let Some(n) = by.get_mut(&self.instance) {
                *n -= 1;
                if *n == 0 {
                    by.remove(&self.instance);
                }
            }
        }
    }
}

impl Recorder {
    /// A recorder whose times count from now.
    pub fn new() -> Self {
        let r = Self::default();
        *r.clock_start.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(tokio::time::Instant::now());
        r
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Simulated ms since the start.
    pub fn now_ms(&self) -> u64 {
        self.clock_start
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(0, |s| s.elapsed().as_millis() as u64)
    }

    /// Notes an event in the history.
    pub fn note(&self, what: impl AsRef<str>) {
        let line = format!("{:>9.3}s {}", self.now_ms() as f64 / 1000.0, what.as_ref());
        if std::env::var_os("SIM_LIVE").is_some() {
            eprintln!("{line}");
        }
        self.lock().history.push(line);
    }

    /// Fault time within `[from, to]` ms (see `liveness`).
    pub fn excused(&self, from: u64, to: u64) -> u64 {
        self.lock().liveness.excused(from, to)
    }

    /// Records a broken invariant once per `tag`.
    pub fn violate_once(&self, tag: &str, what: impl AsRef<str>) {
        if self.lock().reported.insert(tag.to_owned()) {
            self.violate(what);
        }
    }

    /// Records a broken invariant (and notes it).
    pub fn violate(&self, what: impl AsRef<str>) {
        let line = format!(
            "{:>9.3}s VIOLATION {}",
            self.now_ms() as f64 / 1000.0,
            what.as_ref()
        );
        let mut state = self.lock();
        state.history.push(line.clone());
        state.violations.push(line);
    }

    /// Records a put (and, when it is expected, that it must be handled).
    pub fn put(&self, put: Put) {
        let mut state = self.lock();
        if put.expected {
            let record = (put.shard.clone(), put.sequence.clone());
            let order = state.keys.entry(put.key.clone()).or_default();
            let place = order.records.len();
            order.records.push(record.clone());
            order.done.push(false);
            state.info.insert(
                record,
                Expected {
                    key: put.key.clone(),
                    place,
                    at_ms: put.at_ms,
                },
            );
            state
                .expected
                .entry(put.shard.clone())
                .or_default()
                .insert(put.sequence.clone());
            state
                .outstanding
                .entry(put.shard.clone())
                .or_default()
                .insert(put.sequence.clone());
        }
        state.puts.push(put);
    }

    /// Checks per-key order from now on (serial, lanes by key, serial batches).
    pub fn check_order(&self) {
        self.lock().ordered = true;
    }

    /// The handlers run in one lane per instance: a shard's records wait while its holder's
    /// lane handles other shards' records, and the stall check excuses that time.
    pub fn single_lane(&self) {
        self.lock().single_lane = true;
    }

    /// `n` loops take records in no order: a slow unit holds one of them, and only `n` slow
    /// units at once excuse a shard's stall on their instance (1 otherwise).
    pub fn loops_in_no_order(&self, n: u32) {
        self.lock().loops = n;
    }

    /// The stream lists `shard` with these parents.
    pub fn parents(&self, shard: &str, parents: Vec<String>) {
        self.lock().parents.insert(shard.to_owned(), parents);
    }

    /// A fault that legitimately delays reading runs from now for `ms`.
    pub fn delaying_fault(&self, ms: u64) {
        let now = self.now_ms();
        self.lock().liveness.fault(now, now.saturating_add(ms));
    }

    /// A fault that legitimately delayed reading ran from `from` to `to` (ms since the start).
    pub fn delaying_fault_between(&self, from: u64, to: u64) {
        self.lock().liveness.fault(from, to);
    }

    /// `shard`'s holder `by` began a graceful shutdown.
    pub fn draining(&self, shard: &str, by: &str) {
        self.lock().liveness.draining(shard, by);
    }

    /// `shard` was handed over from one running instance to another now: the leave bound
    /// counts from here.
    pub fn handed_over(&self, shard: &str) {
        let now = self.now_ms();
        self.lock().liveness.left(shard, None, now, true);
    }

    /// A hook ran on `shard` from `from` ms until now.
    pub fn hook_ran(&self, shard: &str, from: u64) {
        let now = self.now_ms();
        if now > from {
            self.lock()
                .hooks_ran
                .entry(shard.to_owned())
                .or_default()
                .push((from, now));
        }
    }

    /// A process crashed now: see `Liveness::member_crashed`.
    pub fn member_crashed(&self) {
        let now = self.now_ms();
        self.lock().liveness.member_crashed(now);
    }

    /// `shard` waits for a takeover whose clock starts at `at` ms (its holder crashed, or the
    /// crashed holder's watcher changed then).
    pub fn hold_back(&self, shard: &str, at: u64) {
        self.lock().liveness.hold_back(shard, at);
    }

    /// `shard`'s holder `by` finished its graceful shutdown now; `quick`: the leave bound
    /// applies (see `Liveness::left`).
    pub fn left(&self, shard: &str, by: &str, quick: bool) {
        let now = self.now_ms();
        self.lock().liveness.left(shard, Some(by), now, quick);
    }

    /// The shards that stall now beyond `bound` ms (see `liveness`), given which instance
    /// holds which shard at this sample.
    pub fn stalls(
        &self,
        bound: u64,
        leave_bound: u64,
        holders: &BTreeMap<String, String>,
    ) -> Vec<Stall> {
        let now = self.now_ms();
        let mut state = self.lock();
        let state = &mut *state;
        state
            .held_by
            .retain(|shard, (holder, _)| holders.get(shard) == Some(holder));
        for (shard, holder) in holders {
            state
                .held_by
                .entry(shard.clone())
                .or_insert_with(|| (holder.clone(), now));
        }
        let mut shards = BTreeMap::new();
        for (shard, open) in &state.outstanding {
            let Some(oldest) = open.first() else {
                continue;
            };
            // Every ancestor, not just the parents: a parent that got no records still waits
            // for its own parents, and is read to its end only after them.
            let parents = ancestors(&state.parents, shard);
            if parents
                .iter()
                .any(|p| state.outstanding.get(p).is_some_and(|o| !o.is_empty()))
            {
                continue; // not readable yet
            }
            let parents_done = parents
                .iter()
                .filter_map(|p| state.drained_at.get(p))
                .max()
                .copied()
                .unwrap_or(0);
            let put = state
                .info
                .get(&(shard.clone(), oldest.clone()))
                .map_or(0, |e| e.at_ms);
            let loops = state.loops.max(1);
            let busy = state.running.get(shard).is_some_and(|by| !by.is_empty())
                || holders
                    .get(shard)
                    .is_some_and(|h| state.slow.get(h).is_some_and(|n| *n >= loops));
            let lanes_freed = holders
                .get(shard)
                .and_then(|h| state.slow_ended.get(h))
                .copied();
            // Single lane: while it holds the shard, its holder's lane busy with records of its
            // other shards put before this one's oldest unhandled record (ahead of it in the one
            // loop; this shard's own count as progress).
            let lane_busy: Vec<(u64, u64)> = state
                .held_by
                .get(shard)
                .and_then(|(holder, since)| {
                    let busy = state.lane_busy.get(holder)?;
                    Some(
                        busy.iter()
                            .filter(|(_, end, at)| end > since && *at <= put)
                            .map(|(start, end, _)| ((*start).max(*since), *end))
                            .collect(),
                    )
                })
                .unwrap_or_default();
            // Hooks that ran on its ancestors, each level read to its end in turn.
            let lane_busy = lane_busy
                .into_iter()
                .chain(
                    parents
                        .iter()
                        .filter_map(|p| state.hooks_ran.get(p))
                        .flatten()
                        .copied(),
                )
                .collect();
            shards.insert(
                shard.clone(),
                ShardNow {
                    due: put.max(parents_done),
                    progress: state.progress.get(shard).copied().max(lanes_freed),
                    busy,
                    parents,
                    lane_busy,
                },
            );
        }
        state.liveness.check(now, bound, leave_bound, &shards)
    }

    /// Every put so far.
    pub fn puts(&self) -> Vec<Put> {
        self.lock().puts.clone()
    }

    /// A handler attempt starts on `instance` for a record of `shard`; returns its attempt
    /// number (1 for the first) and the guard that ends it.
    pub fn enter(&self, instance: &str, shard: &str, sequence: &SequenceNumber) -> (u32, Running) {
        let mut state = self.lock();
        let others: Vec<String> = state
            .running
            .get(shard)
            .map(|by| by.keys().filter(|i| *i != instance).cloned().collect())
            .unwrap_or_default();
        *state
            .running
            .entry(shard.to_owned())
            .or_default()
            .entry(instance.to_owned())
            .or_default() += 1;
        let attempt = state
            .attempts
            .entry((shard.to_owned(), sequence.clone()))
            .or_default();
        *attempt += 1;
        let attempt = *attempt;
        let now = self.now_ms();
        if state
            .redo
            .contains_key(&(shard.to_owned(), sequence.clone()))
        {
            state.redo_entered.insert(
                (instance.to_owned(), shard.to_owned(), sequence.clone()),
                now,
            );
        }
        state.progress.insert(shard.to_owned(), now);
        state.liveness.progressed(shard, now);
        let put = state
            .info
            .get(&(shard.to_owned(), sequence.clone()))
            .map(|e| e.at_ms);
        let early: Vec<String> = state
            .parents
            .get(shard)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let open = state.outstanding.get(p)?;
                open.first()
                    .map(|first| format!("{p} ({} unhandled, first {first})", open.len()))
            })
            .collect();
        drop(state);
        if !early.is_empty() {
            self.violate(format!(
                "{instance} entered record {sequence} of child {shard} before its parents were handled: {}",
                early.join(", ")
            ));
        }
        if !others.is_empty() {
            self.violate(format!(
                "two instances run handlers on {shard}: {instance} (record {sequence}) while {others:?} still run"
            ));
        }
        (
            attempt,
            Running {
                recorder: self.clone(),
                instance: instance.to_owned(),
                shard: shard.to_owned(),
                slow: false,
                entered: now,
                put,
            },
        )
    }

    /// A handler completed a record.
    pub fn completed(&self, instance: &str, shard: &str, sequence: &SequenceNumber) {
        let now = self.now_ms();
        let mut state = self.lock();
        state.handled += 1;
        state.progress.insert(shard.to_owned(), now);
        state.liveness.progressed(shard, now);
        let record = (shard.to_owned(), sequence.clone());
        state
            .completed
            .entry(record.clone())
            .or_default()
            .push(instance.to_owned());
        let Some(info) = state.info.get(&record).cloned() else {
            return; // not expected: no order or liveness duty
        };
        // Put back by an operator's reset: only an attempt of the next holding counts.
        let redo_pending = match state.redo.get(&record).copied() {
            Some(reset) => {
                let entered = state.redo_entered.remove(&(
                    instance.to_owned(),
                    shard.to_owned(),
                    sequence.clone(),
                ));
                if entered.is_some_and(|e| e >= reset + OPERATOR_HOLD) {
                    state.redo.remove(&record);
                    false
                } else {
                    true
                }
            }
            None => false,
        };
        if !redo_pending {
            if let Some(open) = state.outstanding.get_mut(shard) {
                if open.remove(sequence) && open.is_empty() {
                    state.drained_at.insert(shard.to_owned(), now);
                }
            }
        }
        let ordered = state.ordered;
        let Some(order) = state.keys.get_mut(&info.key) else {
            return;
        };
        let broken = (ordered && order.prefix < info.place).then(|| {
            let (s, q) = &order.records[order.prefix];
            format!(
                "key {}: {instance} completed {shard}/{sequence} (its #{}) before {s}/{q} (its #{}), which no handler completed",
                info.key, info.place, order.prefix
            )
        });
        order.done[info.place] = true;
        while order.prefix < order.done.len() && order.done[order.prefix] {
            order.prefix += 1;
        }
        drop(state);
        if let Some(broken) = broken {
            self.violate(broken);
        }
    }

    /// Checks the table's rows against what was handled: checkpoints never move back and
    /// never pass an expected record nobody completed.
    pub fn check_rows(&self, rows: &[Lease]) {
        let mut broken = Vec::new();
        {
            let mut state = self.lock();
            for row in rows {
                let shard = row.key.shard().to_owned();
                let Some(now) = row.checkpoint.clone() else {
                    continue;
                };
                if let Some(before) = state.checkpoints.get(&shard) {
                    let back = match (before, &now) {
                        (Checkpoint::Sequence(a), Checkpoint::Sequence(b)) => b < a,
                        (Checkpoint::ShardEnd, other) => *other != Checkpoint::ShardEnd,
                        (Checkpoint::Sequence(_), other) => *other != Checkpoint::ShardEnd,
                        _ => false,
                    };
                    if back {
                        broken.push(format!(
                            "checkpoint of {shard} moved back: {before} -> {now}"
                        ));
                    }
                }
                let limit = match &now {
                    Checkpoint::Sequence(seq) => Some(seq.clone()),
                    Checkpoint::ShardEnd => None,
                    _ => {
                        state.checkpoints.insert(shard, now);
                        continue;
                    }
                };
                if let Some(expected) = state.expected.get(&shard) {
                    let unsettled = expected
                        .iter()
                        .take_while(|s| limit.as_ref().is_none_or(|l| *s <= l))
                        .find(|s| {
                            let record = (shard.clone(), (*s).clone());
                            !state.completed.contains_key(&record)
                                || state.redo.contains_key(&record)
                        });
                    if let Some(missing) = unsettled {
                        broken.push(format!(
                            "checkpoint {now} of {shard} passes record {missing}, which no handler completed"
                        ));
                    }
                }
                state.checkpoints.insert(shard, now);
            }
        }
        for b in broken {
            self.violate(b);
        }
    }

    /// An operator's write left `shard`'s checkpoint at `to` now: the next one seen is compared
    /// with it, not with the library's last (call [`check_rows`](Self::check_rows) on the rows
    /// read just before the write first, so that nothing the library wrote goes unchecked).
    pub fn checkpoint_moved(&self, shard: &str, to: Option<Checkpoint>) {
        let mut state = self.lock();
        match to {
            Some(to) => state.checkpoints.insert(shard.to_owned(), to),
            None => state.checkpoints.remove(shard),
        };
    }

    /// An operator moved `shard`'s row from under `held_by`, leaving it at `counter`.
    pub fn operator_moved(&self, shard: &str, held_by: Option<String>, counter: u64) {
        self.lock()
            .operator_moves
            .insert(shard.to_owned(), (held_by, counter));
    }

    /// Whether `row` (of `shard`) stands as an operator's move of it from under `owner` left it,
    /// with no write since: no other holding between.
    pub fn moved_from_under(&self, shard: &str, owner: &str, row: &Lease) -> bool {
        self.lock()
            .operator_moves
            .get(shard)
            .is_some_and(|(held_by, counter)| {
                held_by.as_deref() == Some(owner) && *counter == row.counter
            })
    }

    /// An operator reset `shard` to `to` now: every expected record after `to` must be handled
    /// again, by an attempt that entered at least [`OPERATOR_HOLD`] from now (the evicted
    /// holder's own attempts do not count), before the shard's checkpoint passes it and before
    /// the run ends. A later reset of the shard replaces this one.
    pub fn reset(&self, shard: &str, to: &Checkpoint) {
        let now = self.now_ms();
        let mut state = self.lock();
        let state = &mut *state;
        state.redo.retain(|(s, _), _| s != shard);
        let again: Vec<SequenceNumber> = state
            .expected
            .get(shard)
            .into_iter()
            .flatten()
            .filter(|seq| match to {
                Checkpoint::TrimHorizon => true,
                Checkpoint::Sequence(at) => *seq > at,
                _ => false,
            })
            .cloned()
            .collect();
        for seq in again {
            state
                .outstanding
                .entry(shard.to_owned())
                .or_default()
                .insert(seq.clone());
            state.redo.insert((shard.to_owned(), seq), now);
        }
    }

    /// The expected records of `shard` before `at` that a handler completed, in order.
    pub fn completed_before(&self, shard: &str, at: &SequenceNumber) -> Vec<SequenceNumber> {
        let state = self.lock();
        state
            .expected
            .get(shard)
            .into_iter()
            .flatten()
            .filter(|s| *s < at)
            .filter(|s| {
                state
                    .completed
                    .contains_key(&(shard.to_owned(), (*s).clone()))
            })
            .cloned()
            .collect()
    }

    /// Expected records not completed yet, or put back by a reset and not handled again.
    pub fn missing(&self) -> Vec<(String, SequenceNumber)> {
        let state = self.lock();
        state
            .expected
            .iter()
            .flat_map(|(shard, seqs)| seqs.iter().map(move |s| (shard.clone(), s.clone())))
            .filter(|k| !state.completed.contains_key(k) || state.redo.contains_key(k))
            .collect()
    }

    /// Records completed more than once, with the instances that completed them.
    pub fn duplicates(&self) -> Vec<((String, SequenceNumber), Vec<String>)> {
        self.lock()
            .completed
            .iter()
            .filter(|(_, by)| by.len() > 1)
            .map(|(k, by)| (k.clone(), by.clone()))
            .collect()
    }

    /// Attempts so far of a record.
    pub fn attempts(&self, shard: &str, sequence: &SequenceNumber) -> u32 {
        self.lock()
            .attempts
            .get(&(shard.to_owned(), sequence.clone()))
            .copied()
            .unwrap_or(0)
    }

    /// Handler attempts running now, per shard and instance.
    pub fn running_now(&self) -> BTreeMap<String, BTreeMap<String, u32>> {
        self.lock().running.clone()
    }

    /// Completions in all.
    pub fn handled(&self) -> u64 {
        self.lock().handled
    }

    /// Expected records in all.
    pub fn expected_count(&self) -> usize {
        self.lock().expected.values().map(BTreeSet::len).sum()
    }

    /// The broken invariants.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// The whole history.
    pub fn history(&self) -> Vec<String> {
        self.lock().history.clone()
    }
}

/// Every ancestor of `shard` in `parents` (its parents, theirs, and so on), each once.
fn ancestors(parents: &BTreeMap<String, Vec<String>>, shard: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut next: Vec<&str> = vec![shard];
    while let Some(s) = next.pop() {
        for p in parents.get(s).into_iter().flatten() {
            if !found.contains(p) {
                found.push(p.clone());
                next.push(p);
            }
        }
    }
    found
}
