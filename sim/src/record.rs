//! `Recorder`: what happened, and the invariants checked as it happens.
//!
//! - Handlers: never two instances running handlers on one shard's records at once (checked
//!   at every handler entry).
//! - Checkpoints (sampled from the table every 250 ms): never move back, and never pass an
//!   expected record that no handler completed.
//! - At the end: every expected record completed at least once; in calm seeds, none twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_broker::{lease::Lease, Checkpoint, SequenceNumber};

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
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.recorder.lock();
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

    /// Records a put.
    pub fn put(&self, put: Put) {
        self.lock().puts.push(put);
    }

    /// Every put so far.
    pub fn puts(&self) -> Vec<Put> {
        self.lock().puts.clone()
    }

    /// Marks which records must be handled.
    pub fn expect(&self, shard: &str, sequence: SequenceNumber) {
        self.lock()
            .expected
            .entry(shard.to_owned())
            .or_default()
            .insert(sequence);
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
        drop(state);
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
            },
        )
    }

    /// A handler completed a record.
    pub fn completed(&self, instance: &str, shard: &str, sequence: &SequenceNumber) {
        let mut state = self.lock();
        state.handled += 1;
        state
            .completed
            .entry((shard.to_owned(), sequence.clone()))
            .or_default()
            .push(instance.to_owned());
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
                        .find(|s| !state.completed.contains_key(&(shard.clone(), (*s).clone())));
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

    /// Expected records not completed yet.
    pub fn missing(&self) -> Vec<(String, SequenceNumber)> {
        let state = self.lock();
        state
            .expected
            .iter()
            .flat_map(|(shard, seqs)| seqs.iter().map(move |s| (shard.clone(), s.clone())))
            .filter(|k| !state.completed.contains_key(k))
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
