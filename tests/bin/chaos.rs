//! The chaos campaign's runner (`cargo xtask chaos` starts the emulators and runs it): real
//! consumer processes (`chaos-consumer`) on the emulators, each behind fault proxies of its
//! own, a writer putting records all the while, and faults drawn from a seed; then checks,
//! from the processes' logs of handled records and from snapshots of the lease table:
//!
//! - nothing lost: every record the writer had acknowledged was handled;
//! - no two processes handling one shard at once: no process handles a shard's records while
//!   another, which took the shard after it, is handling them too (a frozen process is
//!   allowed its handler in flight and 250 ms after it is thawed);
//! - per-key order within each holding of a shard (serial and by-key processes);
//! - no checkpoint passes a record not yet handled (at each snapshot of the table);
//! - checkpoints never move back;
//! - every shard of a killed process, or of one frozen for longer than the bound, taken or
//!   handled again (by another process, for a freeze) within the crash-takeover bound (13 s)
//!   and 4 s of slack for a loaded machine, while it had records to read; later faults that
//!   keep processes from the table extend that window by their own time;
//! - no duplicate across a planned deploy (SIGTERM): nothing a process handled on the shards
//!   it held when told to stop is handled again by one that took them after (unless its own
//!   DynamoDB proxy was faulty within a lease of it);
//! - every process told to stop exits within its deadline (20 s), and none exits untold.
//!
//! A violation prints the seed, the schedule and the events around it, and the run exits 1.
//! The same seed draws the same schedule (times relative to the start); the report says when
//! each fault fired.
//!
//! Usage: `chaos [--seed N] [--minutes M] [--processes P] [--shards S] [--dir DIR]`;
//! endpoints from the environment (127.0.0.1 only).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::DynamoLeaseStore;
use kinesis_integ::{
    create_stream, endpoint, kinesis_client, unique_account, unique_name, FaultProxy, Service,
};

const KEYS: usize = 24;
/// From a crash to every shard handled again (the documented bound), plus slack for the
/// machine's load.
const TAKEOVER_BOUND: Duration = Duration::from_secs(13 + 4);
/// From SIGTERM to the process's exit: the shutdown deadline (10 s) and the final writes.
const EXIT_DEADLINE: Duration = Duration::from_secs(20);
/// A thawed process may finish what it had in hand, and begin a handler for this long after
/// it is thawed (its tasks wake together; the keeper's stop lands within a few ms).
const THAW_GRACE: u128 = 250;

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[derive(Debug, Clone)]
struct Args {
    seed: u64,
    minutes: f64,
    processes: usize,
    shards: i32,
    dir: PathBuf,
}

fn parse_args() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seed = get("--seed")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..1_000_000));
    Args {
        seed,
        minutes: get("--minutes").and_then(|s| s.parse().ok()).unwrap_or(2.0),
        processes: get("--processes")
            .and_then(|s| s.parse().ok())
            .unwrap_or(3)
            .max(2),
        shards: get("--shards")
            .and_then(|s| s.parse().ok())
            .unwrap_or(8)
            .max(1),
        dir: get("--dir")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("kinesis-chaos")),
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone)]
enum Fault {
    /// SIGKILL, then a restart `down` later, with the same owner id or a new one.
    Kill {
        slot: usize,
        down: Duration,
        same_owner: bool,
    },
    /// SIGSTOP for `frozen`, then SIGCONT.
    Freeze { slot: usize, frozen: Duration },
    /// SIGTERM (a deploy), then a restart once it exited.
    Deploy { slot: usize, same_owner: bool },
    /// The slot's proxy to `service` answers `latency` late for `lasting`.
    Slow {
        slot: usize,
        service: &'static str,
        latency: Duration,
        lasting: Duration,
    },
    /// The slot's proxy to `service` refuses and cuts connections for `lasting`.
    Down {
        slot: usize,
        service: &'static str,
        lasting: Duration,
    },
    /// The slot's proxy answers a share of `service`'s calls with throttling or 500s.
    Errors {
        slot: usize,
        service: &'static str,
        throttle: bool,
        lasting: Duration,
    },
}

/// The schedule a seed draws: (seconds after the start, fault), one fault at a time. The kinds
/// come from a shuffled deck, so that a short run meets each kind before any repeats (a run of
/// 2 minutes has room for about six).
fn schedule(seed: u64, minutes: f64, processes: usize) -> Vec<(Duration, Fault)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut deck: Vec<u8> = Vec::new();
    let end = Duration::from_secs_f64(minutes * 60.0);
    let mut at = Duration::from_secs(12);
    let mut out = Vec::new();
    let secs = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_secs(rng.u64(lo..=hi));
    let service = |rng: &mut fastrand::Rng| if rng.bool() { "dynamodb" } else { "kinesis" };
    while at + Duration::from_secs(10) < end {
        let slot = rng.usize(..processes);
        if deck.is_empty() {
            deck = (0..6).collect();
            rng.shuffle(&mut deck);
        }
        let kind = deck.pop().unwrap_or(0);
        let fault = match kind {
            0 => Fault::Kill {
                slot,
                down: secs(&mut rng, 1, 8),
                same_owner: rng.bool(),
            },
            // Half the freezes near the lease (10 s), where a frozen member's shards are
            // taken while it may wake: the stop bound's edge.
            1 => Fault::Freeze {
                slot,
                frozen: if rng.bool() {
                    secs(&mut rng, 9, 16)
                } else {
                    secs(&mut rng, 1, 25)
                },
            },
            2 => Fault::Deploy {
                slot,
                same_owner: rng.bool(),
            },
            3 => Fault::Slow {
                slot,
                service: service(&mut rng),
                latency: Duration::from_millis(rng.u64(200..=3_000)),
                lasting: secs(&mut rng, 5, 20),
            },
            // Long enough, often, for the process's leases to lapse while it cannot reach
            // the store.
            4 => Fault::Down {
                slot,
                service: service(&mut rng),
                lasting: secs(&mut rng, 2, 20),
            },
            _ => Fault::Errors {
                slot,
                service: service(&mut rng),
                throttle: rng.bool(),
                lasting: secs(&mut rng, 5, 15),
            },
        };
        let took = match &fault {
            Fault::Kill { down, .. } => *down + Duration::from_secs(2),
            Fault::Freeze { frozen, .. } => *frozen,
            Fault::Deploy { .. } => Duration::from_secs(12),
            Fault::Slow { lasting, .. }
            | Fault::Down { lasting, .. }
            | Fault::Errors { lasting, .. } => *lasting,
        };
        out.push((at, fault));
        // The next fault once this one is over and the fleet had time to settle.
        at += took + secs(&mut rng, 3, 8);
    }
    out
}

/// What fired, when (unix ms), for the checks and the report.
#[derive(Debug, Clone)]
enum Fired {
    /// A process that exited without being told to (a failed subscription, a panic).
    Died {
        process: String,
        at: u128,
        status: String,
    },
    Killed {
        process: String,
        at: u128,
    },
    Frozen {
        process: String,
        from: u128,
        to: u128,
    },
    Termed {
        process: String,
        at: u128,
        exited: Option<u128>,
    },
    Proxy {
        slot: usize,
        what: String,
        from: u128,
        to: u128,
    },
}

impl Fired {
    /// A line of the report, times relative to the run's start (unix ms `start`).
    fn describe(&self, start: u128) -> String {
        let rel = |t: u128| format!("{:.1} s", t.saturating_sub(start) as f64 / 1e3);
        match self {
            Fired::Died {
                process,
                at,
                status,
            } => format!("{} {process} EXITED on its own: {status}", rel(*at)),
            Fired::Killed { process, at } => format!("{} SIGKILL {process}", rel(*at)),
            Fired::Frozen { process, from, to } => {
                format!("{} SIGSTOP {process} until {}", rel(*from), rel(*to))
            }
            Fired::Termed {
                process,
                at,
                exited,
            } => format!(
                "{} SIGTERM {process}, exited {}",
                rel(*at),
                exited.map_or("NOT within the deadline".to_owned(), |e| format!(
                    "after {:.1} s",
                    (e - at) as f64 / 1e3
                ))
            ),
            Fired::Proxy {
                slot,
                what,
                from,
                to,
            } => format!("{} proxy of p{slot}: {what} until {}", rel(*from), rel(*to)),
        }
    }
}

/// One consumer process slot: its proxies, its current process and its incarnations.
struct Slot {
    index: usize,
    mode: &'static str,
    owner: String,
    incarnation: usize,
    child: Option<Child>,
    dynamo: FaultProxy,
    kinesis: FaultProxy,
}

struct Campaign {
    args: Args,
    account: String,
    table: String,
    stream: String,
    slow_key: String,
    flaky_key: String,
    slots: Vec<Slot>,
    fired: Vec<Fired>,
}

impl Campaign {
    /// A process's name in logs and reports: slot, incarnation, owner.
    fn process_name(slot: &Slot) -> String {
        format!("p{}.{}", slot.index, slot.incarnation)
    }

    fn spawn(&mut self, i: usize) {
        let exe = std::env::current_exe()
            .expect("own path")
            .with_file_name("chaos-consumer");
        let slot = &mut self.slots[i];
        slot.incarnation += 1;
        let name = Self::process_name(slot);
        let log = self.args.dir.join(format!("{name}.log"));
        let err =
            std::fs::File::create(self.args.dir.join(format!("{name}.err"))).expect("stderr file");
        let child = Command::new(&exe)
            .args([
                &self.account,
                &self.table,
                &self.stream,
                &slot.owner,
                log.to_str().expect("utf-8 path"),
                slot.mode,
                &self.slow_key,
                &self.flaky_key,
            ])
            .env("AWS_ENDPOINT_URL_DYNAMODB", slot.dynamo.endpoint())
            .env("AWS_ENDPOINT_URL_KINESIS", slot.kinesis.endpoint())
            .env_remove("AWS_ENDPOINT_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        slot.child = Some(child);
    }

    /// Notes every process that exited without being told to, since the last look.
    fn reap_unexpected(&mut self) {
        for slot in &mut self.slots {
            let exited = slot
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                slot.child = None;
                self.fired.push(Fired::Died {
                    process: Self::process_name(slot),
                    at: unix_ms(),
                    status: status.to_string(),
                });
            }
        }
    }

    fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.slots[i].child {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status();
        }
    }

    /// Waits up to `deadline` for slot `i`'s process to exit: when it did (unix ms).
    async fn wait_exit(&mut self, i: usize, deadline: Duration) -> Option<u128> {
        let until = Instant::now() + deadline;
        loop {
            if let Some(child) = self.slots[i].child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.slots[i].child = None;
                    return Some(unix_ms());
                }
            } else {
                return Some(unix_ms());
            }
            if Instant::now() >= until {
                return None;
            }
            // Orchestration, not synchronisation: polling a child process's exit.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn proxy(&self, slot: usize, service: &str) -> &FaultProxy {
        if service == "dynamodb" {
            &self.slots[slot].dynamo
        } else {
            &self.slots[slot].kinesis
        }
    }

    async fn fire(&mut self, fault: &Fault) {
        self.reap_unexpected();
        match fault {
            Fault::Kill {
                slot,
                down,
                same_owner,
            } => {
                let process = Self::process_name(&self.slots[*slot]);
                self.signal(*slot, "KILL");
                let at = unix_ms();
                self.wait_exit(*slot, Duration::from_secs(5)).await;
                self.fired.push(Fired::Killed { process, at });
                tokio::time::sleep(*down).await;
                if !same_owner {
                    self.slots[*slot].owner = unique_name(&format!("chaos-{slot}"));
                }
                self.spawn(*slot);
            }
            Fault::Freeze { slot, frozen } => {
                let process = Self::process_name(&self.slots[*slot]);
                self.signal(*slot, "STOP");
                let from = unix_ms();
                tokio::time::sleep(*frozen).await;
                self.signal(*slot, "CONT");
                self.fired.push(Fired::Frozen {
                    process,
                    from,
                    to: unix_ms(),
                });
            }
            Fault::Deploy { slot, same_owner } => {
                let process = Self::process_name(&self.slots[*slot]);
                self.signal(*slot, "TERM");
                let at = unix_ms();
                let exited = self.wait_exit(*slot, EXIT_DEADLINE).await;
                if exited.is_none() {
                    self.signal(*slot, "KILL");
                    self.wait_exit(*slot, Duration::from_secs(5)).await;
                }
                self.fired.push(Fired::Termed {
                    process,
                    at,
                    exited,
                });
                if !same_owner {
                    self.slots[*slot].owner = unique_name(&format!("chaos-{slot}"));
                }
                self.spawn(*slot);
            }
            Fault::Slow {
                slot,
                service,
                latency,
                lasting,
            } => {
                let from = unix_ms();
                self.proxy(*slot, service).set_latency(*latency);
                tokio::time::sleep(*lasting).await;
                self.proxy(*slot, service).set_latency(Duration::ZERO);
                self.fired.push(Fired::Proxy {
                    slot: *slot,
                    what: format!("{service} {latency:?} late"),
                    from,
                    to: unix_ms(),
                });
            }
            Fault::Down {
                slot,
                service,
                lasting,
            } => {
                let from = unix_ms();
                self.proxy(*slot, service).set_down(true);
                tokio::time::sleep(*lasting).await;
                self.proxy(*slot, service).set_down(false);
                self.fired.push(Fired::Proxy {
                    slot: *slot,
                    what: format!("{service} down"),
                    from,
                    to: unix_ms(),
                });
            }
            Fault::Errors {
                slot,
                service,
                throttle,
                lasting,
            } => {
                let from = unix_ms();
                let target = if *service == "dynamodb" {
                    "DynamoDB"
                } else {
                    "Kinesis"
                };
                if *throttle {
                    self.proxy(*slot, service).throttle(target, 0.3);
                } else {
                    self.proxy(*slot, service).fail(target, 0.3);
                }
                tokio::time::sleep(*lasting).await;
                self.proxy(*slot, service).clear_errors();
                self.fired.push(Fired::Proxy {
                    slot: *slot,
                    what: format!(
                        "{service} {} on 30 % of calls",
                        if *throttle { "throttled" } else { "failing" }
                    ),
                    from,
                    to: unix_ms(),
                });
            }
        }
    }
}

/// A record the writer had acknowledged: (shard, sequence), with its key, payload and the
/// time of the acknowledgement.
#[derive(Debug, Clone)]
struct Put {
    shard: String,
    sequence: String,
    key: String,
    at: u128,
}

/// Puts records over `KEYS` keys, about 40 a second, until `stop`; each key's payloads count
/// up (`key#n`).
async fn writer(
    client: aws_sdk_kinesis::Client,
    stream: String,
    puts: Arc<Mutex<Vec<Put>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut counts = [0u64; KEYS];
    let mut n = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !*stop.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let mut entries = Vec::new();
        let mut keys = Vec::new();
        for _ in 0..4 {
            let k = n % KEYS;
            n += 1;
            let key = format!("k{k}");
            let payload = format!("{key}#{}", counts[k]);
            counts[k] += 1;
            entries.push(
                aws_sdk_kinesis::types::PutRecordsRequestEntry::builder()
                    .partition_key(&key)
                    .data(aws_sdk_kinesis::primitives::Blob::new(payload))
                    .build()
                    .expect("entry"),
            );
            keys.push(key);
        }
        // Retried until every entry landed, in order, so each key's payloads stay in order.
        loop {
            match client
                .put_records()
                .stream_name(&stream)
                .set_records(Some(entries.clone()))
                .send()
                .await
            {
                Ok(out) if out.failed_record_count().unwrap_or(0) == 0 => {
                    let at = unix_ms();
                    let mut puts = puts.lock().expect("puts");
                    for (r, key) in out.records().iter().zip(&keys) {
                        puts.push(Put {
                            shard: r.shard_id().unwrap_or_default().to_owned(),
                            sequence: r.sequence_number().unwrap_or_default().to_owned(),
                            key: key.clone(),
                            at,
                        });
                    }
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// One line of a consumer's log.
#[derive(Debug, Clone)]
struct Event {
    process: String,
    kind: Kind,
    shard: String,
    sequence: String,
    subsequence: Option<u64>,
    key: String,
    began: u128,
    ended: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Handled,
    Take,
    Lost,
    /// A checkpoint write that landed: `sequence` is the checkpoint, `began` when it was sent.
    Checkpoint,
}

fn read_events(path: &Path, process: &str) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split('\t').collect();
            if p.len() < 7 {
                return None;
            }
            let (kind, shard) = match p[0] {
                "TAKE" => (Kind::Take, p[1]),
                "LOST" => (Kind::Lost, p[1]),
                "CKPT" => (Kind::Checkpoint, p[1]),
                shard => (Kind::Handled, shard),
            };
            Some(Event {
                process: process.to_owned(),
                kind,
                shard: shard.to_owned(),
                sequence: match kind {
                    Kind::Handled => p[1].to_owned(),
                    Kind::Checkpoint => p[2].to_owned(),
                    _ => String::new(),
                },
                subsequence: p[2].parse().ok(),
                key: p[3].to_owned(),
                began: p[5].parse().ok()?,
                ended: p[6].parse().ok()?,
            })
        })
        .collect()
}

/// Sequence numbers compared as numbers (they are up to 129 digits).
fn seq_key(s: &str) -> (usize, &str) {
    let t = s.trim_start_matches('0');
    (t.len(), t)
}

struct Checks<'a> {
    events: &'a [Event],
    puts: &'a [Put],
    fired: &'a [Fired],
    ordered: &'a HashSet<String>,
    checkpoints: &'a [(u128, BTreeMap<String, String>)],
    start: u128,
}

impl Checks<'_> {
    fn run(&self) -> Vec<String> {
        let mut v = Vec::new();
        v.extend(self.nothing_lost());
        v.extend(self.one_handler_at_a_time());
        v.extend(self.key_order());
        v.extend(self.checkpoints_forward());
        v.extend(self.checkpoints_settled());
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

    fn nothing_lost(&self) -> Vec<String> {
        let seen: HashSet<(&str, &str)> = self
            .handled()
            .map(|e| (e.shard.as_str(), e.sequence.as_str()))
            .collect();
        let lost: Vec<&Put> = self
            .puts
            .iter()
            .filter(|p| !seen.contains(&(p.shard.as_str(), p.sequence.as_str())))
            .collect();
        match lost.first() {
            None => Vec::new(),
            Some(first) => vec![format!(
                "lost: {} of {} acknowledged records never handled; first {} {} (key {}, put at {})",
                lost.len(),
                self.puts.len(),
                first.shard,
                first.sequence,
                first.key,
                self.rel(first.at)
            )],
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
    fn one_handler_at_a_time(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut by_shard: HashMap<&str, Vec<&Event>> = HashMap::new();
        for e in self
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Take | Kind::Handled))
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
                        out.push(format!(
                            "two handlers: {} handled {shard} {} at {} after {other} took the shard at {}",
                            e.process,
                            e.sequence,
                            self.rel(e.began),
                            self.rel(*at)
                        ));
                        break;
                    }
                }
            }
        }
        out
    }

    /// Within each holding of a shard by an ordered process (from its take), each key's
    /// records are handled in sequence order.
    fn key_order(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut last: HashMap<(&str, &str, &str), (&str, Option<u64>)> = HashMap::new();
        let mut sorted: Vec<&Event> = self.events.iter().collect();
        sorted.sort_by_key(|e| (e.process.clone(), e.began, e.kind != Kind::Take));
        for e in sorted {
            if !self.ordered.contains(&e.process) {
                continue;
            }
            if e.kind == Kind::Checkpoint {
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
                    out.push(format!(
                        "key order: {} handled key {} of {} at {} ({}) after {} within one holding",
                        e.process,
                        e.key,
                        e.shard,
                        now.0,
                        self.rel(e.began),
                        prev.0
                    ));
                    break;
                }
            }
            last.insert(k, now);
        }
        out
    }

    /// Checkpoints never move back: a sequence number is followed by a higher or equal one or
    /// by `SHARD_END`, never by a lower one or a start position (nothing here resets).
    fn checkpoints_forward(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut last: HashMap<&str, &str> = HashMap::new();
        let numeric = |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit());
        for (at, rows) in self.checkpoints {
            for (shard, cp) in rows {
                if let Some(prev) = last.get(shard.as_str()) {
                    let back = if numeric(cp) {
                        numeric(prev) && seq_key(cp) < seq_key(prev)
                    } else {
                        numeric(prev) && cp != "SHARD_END"
                    };
                    if back {
                        out.push(format!(
                            "checkpoint moved back: {shard} from {prev} to {cp} at {}",
                            self.rel(*at)
                        ));
                    }
                }
                // A marker after a number is reported above; the number stays the reference.
                if numeric(cp) || last.get(shard.as_str()).is_none_or(|p| !numeric(p)) {
                    last.insert(shard, cp);
                }
            }
        }
        out
    }

    /// After a kill or a freeze, each shard the process was the last to handle is handled
    /// again within the bound (plus the freeze's own time), when it had records to read.
    fn takeover_bound(&self) -> Vec<String> {
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
                if !waiting {
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
                    out.push(format!(
                        "takeover: {shard} of {process} neither taken nor handled within {:.0} s of the fault at {} (next at {})",
                        bound as f64 / 1e3,
                        self.rel(at),
                        next.map_or("never".to_owned(), |n| self.rel(n))
                    ));
                }
            }
        }
        out
    }

    fn no_duplicate_on_deploy(&self) -> Vec<String> {
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
                out.push(format!(
                    "duplicate across a deploy: {} {} handled by {process} and again by {} at {} (SIGTERM at {})",
                    dup.shard,
                    dup.sequence,
                    dup.process,
                    self.rel(dup.began),
                    self.rel(*at)
                ));
            }
        }
        out
    }

    /// No checkpoint passes a record that was not handled: at each snapshot of the table,
    /// every acknowledged record of the shard up to its checkpoint had been handled (its
    /// handler ended) by then.
    fn checkpoints_settled(&self) -> Vec<String> {
        let mut ended: HashMap<(&str, &str), u128> = HashMap::new();
        for e in self.handled() {
            let t = ended
                .entry((e.shard.as_str(), e.sequence.as_str()))
                .or_insert(e.ended);
            *t = (*t).min(e.ended);
        }
        let mut puts: HashMap<&str, Vec<&Put>> = HashMap::new();
        for p in self.puts {
            puts.entry(p.shard.as_str()).or_default().push(p);
        }
        let numeric = |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit());
        // Each checkpoint write that landed, as its process sent it: every record up to it
        // handled before the send (both times from this machine's clock, to the ms).
        for w in self
            .events
            .iter()
            .filter(|e| e.kind == Kind::Checkpoint && numeric(&e.sequence))
        {
            let passed = puts.get(w.shard.as_str()).into_iter().flatten().find(|p| {
                seq_key(&p.sequence) <= seq_key(&w.sequence)
                    && ended
                        .get(&(p.shard.as_str(), p.sequence.as_str()))
                        .is_none_or(|t| *t > w.began + 5)
            });
            if let Some(p) = passed {
                return vec![format!(
                    "checkpoint before settlement: {} wrote {} on {} at {} while {} (key {}) was not handled yet",
                    w.process,
                    w.sequence,
                    w.shard,
                    self.rel(w.began),
                    p.sequence,
                    p.key
                )];
            }
        }
        for (at, rows) in self.checkpoints {
            for (shard, cp) in rows {
                if cp.is_empty() || !cp.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let passed = puts.get(shard.as_str()).into_iter().flatten().find(|p| {
                    seq_key(&p.sequence) <= seq_key(cp)
                        && ended
                            .get(&(p.shard.as_str(), p.sequence.as_str()))
                            .is_none_or(|t| *t > *at + 200)
                });
                if let Some(p) = passed {
                    return vec![format!(
                        "checkpoint before settlement: {shard} checkpointed at {cp} at {} while {} (key {}) was not handled yet",
                        self.rel(*at),
                        p.sequence,
                        p.key
                    )];
                }
            }
        }
        Vec::new()
    }

    fn exits(&self) -> Vec<String> {
        self.fired
            .iter()
            .filter_map(|f| match f {
                Fired::Died {
                    process,
                    at,
                    status,
                } => Some(format!(
                    "exit: {process} exited on its own at {} ({status})",
                    self.rel(*at)
                )),
                Fired::Termed {
                    process,
                    at,
                    exited: None,
                } => Some(format!(
                    "exit: {process} did not exit within {EXIT_DEADLINE:?} of SIGTERM at {}",
                    self.rel(*at)
                )),
                _ => None,
            })
            .collect()
    }
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let code = runtime.block_on(run(args));
    std::process::exit(code);
}

async fn run(args: Args) -> i32 {
    std::fs::create_dir_all(&args.dir).expect("campaign directory");
    // Logs of an earlier run in the same directory would be read as this run's.
    for entry in std::fs::read_dir(&args.dir)
        .expect("campaign directory")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('p') && (name.ends_with(".log") || name.ends_with(".err")) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let plan = schedule(args.seed, args.minutes, args.processes);
    println!(
        "chaos: seed {}, {} min, {} processes, {} shards, {} faults; logs in {}",
        args.seed,
        args.minutes,
        args.processes,
        args.shards,
        plan.len(),
        args.dir.display()
    );
    for (at, fault) in &plan {
        println!("  at {:>5.1} s: {fault:?}", at.as_secs_f64());
    }
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("chaos");
    create_stream(&client, &stream, args.shards).await;
    let table = unique_name("chaos-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("lease table");
    let mut rng = fastrand::Rng::with_seed(args.seed ^ 0x5eed);
    let dynamo_up = endpoint(Service::Dynamodb);
    let kinesis_up = endpoint(Service::Kinesis);
    let mut slots = Vec::new();
    for index in 0..args.processes {
        let mode = ["serial", "workers", "bykey"][rng.usize(..3)];
        slots.push(Slot {
            index,
            mode,
            owner: unique_name(&format!("chaos-{index}")),
            incarnation: 0,
            child: None,
            dynamo: FaultProxy::start(&dynamo_up).await,
            kinesis: FaultProxy::start(&kinesis_up).await,
        });
    }
    let slow_key = format!("k{}", rng.usize(..KEYS));
    let flaky_key = format!("k{}", rng.usize(..KEYS));
    println!(
        "  modes: {:?}; slow key {slow_key}, flaky key {flaky_key}",
        slots.iter().map(|s| s.mode).collect::<Vec<_>>()
    );
    let mut campaign = Campaign {
        args: args.clone(),
        account,
        table,
        stream: stream.clone(),
        slow_key,
        flaky_key,
        slots,
        fired: Vec::new(),
    };
    for i in 0..args.processes {
        campaign.spawn(i);
    }
    let start = unix_ms();
    let began = Instant::now();
    let puts = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let writing = tokio::spawn(writer(
        client.clone(),
        stream.clone(),
        puts.clone(),
        stop_rx.clone(),
    ));
    // Snapshots of the lease table's checkpoints, every 2 s.
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    // The snapshots go on through the drain and the final stops, and end with one more.
    let (snap_stop_tx, snap_stop_rx) = tokio::sync::watch::channel(false);
    let snapping = {
        let (store, stream, snapshots, mut stop) = (
            DynamoLeaseStore::new(&config, &campaign.table),
            stream.clone(),
            snapshots.clone(),
            snap_stop_rx,
        );
        tokio::spawn(async move {
            loop {
                let last = *stop.borrow();
                if let Ok(rows) = store.list(&stream).await {
                    let map: BTreeMap<String, String> = rows
                        .iter()
                        .filter_map(|r| {
                            Some((r.key.shard().to_owned(), r.checkpoint.as_ref()?.to_string()))
                        })
                        .collect();
                    snapshots.lock().expect("snapshots").push((unix_ms(), map));
                }
                if last {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stop.changed() => {}
                }
            }
        })
    };
    for (at, fault) in &plan {
        tokio::time::sleep_until(tokio::time::Instant::from_std(began + *at)).await;
        println!(
            "  {:>5.1} s: firing {fault:?}",
            began.elapsed().as_secs_f64()
        );
        campaign.fire(fault).await;
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(
        began + Duration::from_secs_f64(args.minutes * 60.0),
    ))
    .await;
    let _ = stop_tx.send(true);
    let _ = writing.await;
    // Drain: every acknowledged record handled, or 60 s.
    let all: Vec<Put> = puts.lock().expect("puts").clone();
    let names: Vec<String> = campaign
        .slots
        .iter()
        .flat_map(|s| (1..=s.incarnation).map(move |n| format!("p{}.{n}", s.index)))
        .collect();
    let dir = campaign.args.dir.clone();
    let read_all = |names: &[String]| -> Vec<Event> {
        names
            .iter()
            .flat_map(|n| read_events(&dir.join(format!("{n}.log")), n))
            .collect()
    };
    let drain_until = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: HashSet<(String, String)> = read_all(&names)
            .into_iter()
            .filter(|e| e.kind == Kind::Handled)
            .map(|e| (e.shard, e.sequence))
            .collect();
        let missing = all
            .iter()
            .filter(|p| !seen.contains(&(p.shard.clone(), p.sequence.clone())))
            .count();
        if missing == 0 || Instant::now() >= drain_until {
            println!("  drained: {missing} of {} records unhandled", all.len());
            break;
        }
        // Orchestration: the processes' logs are polled while they drain.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    campaign.reap_unexpected();
    // Stop every process, each told to stop and given its deadline.
    for i in 0..campaign.slots.len() {
        let process = Campaign::process_name(&campaign.slots[i]);
        campaign.signal(i, "TERM");
        let at = unix_ms();
        let exited = campaign.wait_exit(i, EXIT_DEADLINE).await;
        if exited.is_none() {
            campaign.signal(i, "KILL");
            campaign.wait_exit(i, Duration::from_secs(5)).await;
        }
        campaign.fired.push(Fired::Termed {
            process,
            at,
            exited,
        });
    }
    let _ = snap_stop_tx.send(true);
    let _ = snapping.await;
    let events = read_all(&names);
    let ordered: HashSet<String> = campaign
        .slots
        .iter()
        .filter(|s| s.mode != "workers")
        .flat_map(|s| (1..=s.incarnation).map(move |n| format!("p{}.{n}", s.index)))
        .collect();
    let checkpoints = snapshots.lock().expect("snapshots").clone();
    let violations = Checks {
        events: &events,
        puts: &all,
        fired: &campaign.fired,
        ordered: &ordered,
        checkpoints: &checkpoints,
        start,
    }
    .run();
    println!("fired:");
    for f in &campaign.fired {
        println!("  {}", f.describe(start));
    }
    let handled = events.iter().filter(|e| e.kind == Kind::Handled).count();
    println!(
        "chaos: seed {}: {} records put, {handled} handled ({} again), {} faults fired, {} violations",
        args.seed,
        all.len(),
        handled.saturating_sub(all.len()),
        campaign.fired.len(),
        violations.len()
    );
    for v in &violations {
        println!("VIOLATION (seed {}): {v}", args.seed);
    }
    i32::from(!violations.is_empty())
}
