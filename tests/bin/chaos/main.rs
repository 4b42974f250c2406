//! The chaos campaign's runner (`cargo xtask chaos` starts the emulators and runs it): real
//! consumer processes (`chaos-consumer`, polling or by fan-out) on the emulators, each behind
//! fault proxies of its own, a writer putting records (some KPL-aggregated) all the while,
//! faults and reshards drawn from a seed (`schedule`, `reshard`); then checks (`checks`), from
//! the processes' logs of handled records, failed attempts, takes, losses and checkpoint
//! writes, from snapshots of the lease table and from the stream's shards at the end:
//!
//! - nothing lost: every record the writer had acknowledged was handled;
//! - no two processes handling one shard at once (a frozen process is allowed its handler in
//!   flight and 250 ms after it is thawed);
//! - per-key order within each holding of a shard (serial and by-key processes);
//! - no checkpoint passes a record not yet handled (as each write was sent, and at each
//!   snapshot of the table);
//! - checkpoints never move back, and `SHARD_END` is final;
//! - parents first: no record of a child shard entered a handler before every record of its
//!   ancestors was handled;
//! - every shard of a killed process, or of one frozen for longer than the bound, taken or
//!   handled again (by another process, for a freeze) within the crash-takeover bound (13 s)
//!   and 4 s of slack for a loaded machine, while it had records to read; later faults that
//!   keep processes from the table extend that window by their own time;
//! - no duplicate across a planned deploy (SIGTERM): nothing a process handled on the shards
//!   it held when told to stop is handled again by one that took them after (unless its own
//!   DynamoDB proxy was faulty within a lease of it);
//! - every process told to stop exits within its deadline (20 s), and none exits untold.
//!
//! A violation prints the seed, the schedule and the faults as they fired, and the run fails.
//! The same seed draws the same schedule (times relative to the start); the report says when
//! each fault fired, and which shard each reshard took (the one furthest behind then).
//!
//! Usage: `chaos [--seed N] [--minutes M] [--processes P] [--shards S] [--dir DIR]`;
//! endpoints from the environment (127.0.0.1 only).
//!
//! With `CHAOS_PREVIOUS=<path of the previous release's chaos-consumer>` (`cargo xtask chaos
//! --previous REV` builds it), the run is a rolling deploy: every slot's first process is the
//! previous release, each slot is deployed in turn over the first 60 % of the run (SIGTERM,
//! then this release's consumer, every other one under the same owner id), and every process
//! of this release runs with quiet idle shards: the option turned on by the deploy, in a fleet
//! where both releases share the table. The checks are the same.

#[cfg(test)]
mod check_tests;
mod checks;
mod events;
mod fired;
mod reshard;
mod schedule;
mod window;
mod writer;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::DynamoLeaseStore;
use kinesis_integ::{
    create_stream, endpoint, kinesis_client, unique_account, unique_name, FaultProxy, Service,
};

use crate::checks::{Checks, Violation};
use crate::events::{read_events, Event, Kind};
use crate::fired::Fired;
use crate::schedule::{fan_out, reshards, rolling, schedule, Fault};
use crate::writer::{writer, Put, KEYS};

/// The stream consumer fan-out processes read through.
const FAN_OUT_CONSUMER: &str = "chaos-fan-out";
/// From a crash to every shard handled again (the documented bound), plus slack for the
/// machine's load.
pub(crate) const TAKEOVER_BOUND: Duration = Duration::from_secs(13 + 4);
/// From SIGTERM to the process's exit: the shutdown deadline (10 s) and the final writes.
pub(crate) const EXIT_DEADLINE: Duration = Duration::from_secs(20);
/// A thawed process may finish what it had in hand, and begin a handler for this long after
/// it is thawed (its tasks wake together; the keeper's stop lands within a few ms).
pub(crate) const THAW_GRACE: u128 = 250;

pub(crate) fn unix_ms() -> u128 {
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

/// One consumer process slot: its proxies, its current process and its incarnations.
struct Slot {
    index: usize,
    mode: &'static str,
    /// Reads by enhanced fan-out rather than polling.
    fan_out: bool,
    owner: String,
    incarnation: usize,
    child: Option<Child>,
    dynamo: FaultProxy,
    kinesis: FaultProxy,
}

impl Drop for Slot {
    /// A runner that fails on its way out leaves no consumer behind (SIGKILL ends a frozen
    /// process too).
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
    /// `CHAOS_PREVIOUS`: the previous release's consumer, run as every slot's first process.
    previous: Option<PathBuf>,
}

impl Campaign {
    /// A process's name in logs and reports: slot, incarnation, owner.
    fn process_name(slot: &Slot) -> String {
        format!("p{}.{}", slot.index, slot.incarnation)
    }

    fn spawn(&mut self, i: usize) {
        let current = std::env::current_exe()
            .expect("own path")
            .with_file_name("chaos-consumer");
        let slot = &mut self.slots[i];
        // A rolling deploy: the previous release first, this one (with quiet idle shards,
        // the option turned on by the deploy) for every process started after.
        let (exe, quiet) = match &self.previous {
            Some(previous) if slot.incarnation == 0 => (previous.clone(), false),
            Some(_) => (current, true),
            None => (
                current,
                std::env::var("CHAOS_QUIET").is_ok_and(|v| v == "1"),
            ),
        };
        slot.incarnation += 1;
        let name = Self::process_name(slot);
        let log = self.args.dir.join(format!("{name}.log"));
        let err =
            std::fs::File::create(self.args.dir.join(format!("{name}.err"))).expect("stderr file");
        let child = Command::new(&exe)
            .args([
                self.account.as_str(),
                &self.table,
                &self.stream,
                &slot.owner,
                log.to_str().expect("utf-8 path"),
                slot.mode,
                &self.slow_key,
                &self.flaky_key,
                if slot.fan_out { FAN_OUT_CONSUMER } else { "-" },
            ])
            .env("AWS_ENDPOINT_URL_DYNAMODB", slot.dynamo.endpoint())
            .env("AWS_ENDPOINT_URL_KINESIS", slot.kinesis.endpoint())
            .env("CHAOS_QUIET", if quiet { "1" } else { "0" })
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

/// Per shard, how many acknowledged records no process has handled yet (from the logs as
/// they stand).
fn behind(puts: &[Put], dir: &std::path::Path) -> std::collections::HashMap<String, usize> {
    let mut handled = HashSet::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(process) = name.strip_suffix(".log") {
            for e in read_events(&entry.path(), process) {
                if e.kind == Kind::Handled {
                    handled.insert((e.shard, e.sequence, e.subsequence));
                }
            }
        }
    }
    let mut out = std::collections::HashMap::new();
    for p in puts {
        if !handled.contains(&(p.shard.clone(), p.sequence.clone(), p.subsequence)) {
            *out.entry(p.shard.clone()).or_insert(0) += 1;
        }
    }
    out
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
    let previous = std::env::var_os("CHAOS_PREVIOUS").map(PathBuf::from);
    let plan = schedule(args.seed, args.minutes, args.processes);
    let plan = match &previous {
        Some(_) => rolling(args.minutes, args.processes, plan),
        None => plan,
    };
    let fan_out = fan_out(args.seed, args.processes);
    let resharding = reshards(args.seed, args.minutes, &plan, &fan_out);
    if let Some(previous) = &previous {
        println!(
            "chaos: a rolling deploy from the previous release ({}) to this one, quiet idle shards on with it",
            previous.display()
        );
    }
    println!(
        "chaos: seed {}, {} min, {} processes, {} shards, {} faults, {} reshards; logs in {}",
        args.seed,
        args.minutes,
        args.processes,
        args.shards,
        plan.len(),
        resharding.len(),
        args.dir.display()
    );
    for (at, fault) in &plan {
        println!("  at {:>5.1} s: {fault:?}", at.as_secs_f64());
    }
    for (at, r) in &resharding {
        println!("  at {:>5.1} s: {r:?}", at.as_secs_f64());
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
    for (index, reads_by_fan_out) in fan_out.iter().enumerate() {
        let mode = ["serial", "workers", "bykey"][rng.usize(..3)];
        slots.push(Slot {
            index,
            mode,
            fan_out: *reads_by_fan_out,
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
        slots
            .iter()
            .map(|s| format!("{}{}", s.mode, if s.fan_out { " fan-out" } else { "" }))
            .collect::<Vec<_>>()
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
        previous: previous.clone(),
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
    // The resharding runs on its own timeline, faults going on meanwhile. A reshard that
    // failed (or the task's panic) is reported as a violation: the seed checked less than it
    // drew.
    let resharded: Arc<Mutex<Vec<Fired>>> = Arc::default();
    let runner_failures: Arc<Mutex<Vec<Violation>>> = Arc::default();
    let resharder = {
        let (client, stream, puts, dir) = (
            client.clone(),
            stream.clone(),
            puts.clone(),
            args.dir.clone(),
        );
        let (fired, failures) = (resharded.clone(), runner_failures.clone());
        tokio::spawn(async move {
            for (at, drawn) in resharding {
                tokio::time::sleep_until(tokio::time::Instant::from_std(began + at)).await;
                let acknowledged = puts.lock().expect("puts").clone();
                let behind = behind(&acknowledged, &dir);
                let what = match reshard::reshard(&client, &stream, &drawn, &behind).await {
                    Ok(what) => what,
                    Err(e) => {
                        failures
                            .lock()
                            .expect("failures")
                            .push(Violation::runner(format!("runner: {e}")));
                        format!("reshard FAILED: {e}")
                    }
                };
                println!("  {:>5.1} s: {what}", began.elapsed().as_secs_f64());
                fired.lock().expect("fired").push(Fired::Resharded {
                    what,
                    at: unix_ms(),
                });
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
    // The last reshard was drawn 20 s before the end.
    if let Err(e) = resharder.await {
        runner_failures
            .lock()
            .expect("failures")
            .push(Violation::runner(format!(
                "runner: the resharding task failed: {e}"
            )));
    }
    campaign
        .fired
        .extend(resharded.lock().expect("fired").drain(..));
    campaign.fired.sort_by_key(Fired::at);
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
        let seen: HashSet<(String, String, Option<u64>)> = read_all(&names)
            .into_iter()
            .filter(|e| e.kind == Kind::Handled)
            .map(|e| (e.shard, e.sequence, e.subsequence))
            .collect();
        let missing = all
            .iter()
            .filter(|p| !seen.contains(&(p.shard.clone(), p.sequence.clone(), p.subsequence)))
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
    // The family tree of shards, for the parents-first check.
    let parents = match reshard::all_shards(&client, &stream).await {
        Ok(shards) => reshard::parents(&shards),
        Err(e) => {
            runner_failures
                .lock()
                .expect("failures")
                .push(Violation::runner(format!(
                    "runner: cannot check parents first: {e}"
                )));
            Default::default()
        }
    };
    let violations = Checks {
        events: &events,
        puts: &all,
        fired: &campaign.fired,
        ordered: &ordered,
        checkpoints: &checkpoints,
        parents: &parents,
        start,
    }
    .run();
    let violations: Vec<Violation> = runner_failures
        .lock()
        .expect("failures")
        .drain(..)
        .chain(violations)
        .collect();
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
    // The first few with the window of events around them.
    for (i, v) in violations.iter().enumerate() {
        println!("VIOLATION (seed {}): {}", args.seed, v.text);
        if i < 3 {
            for line in window::window(v, &events, &campaign.fired, start) {
                println!("    {line}");
            }
        }
    }
    i32::from(!violations.is_empty())
}
