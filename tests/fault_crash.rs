//! Multi-process crash: 3 broker processes share one DynamoDB lease table on a 16-shard stream
//! while 40,000 records over 50 keys are put; one process is killed with SIGKILL mid-stream.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use kinesis_broker::{lease::LeaseStore, DynamoLeaseStore};
use kinesis_integ::*;

const SHARDS: i32 = 16;
const RECORDS: usize = 40_000;
const KEYS: usize = 50;

/// Per shard of `shards`, how long after `killed_ms` a survivor's handler first began on one
/// of its records: the time the shard went unprocessed (`None` when nothing was handled).
fn resumed_after(
    logs: &HashMap<&str, Vec<Line>>,
    survivors: &[&str],
    shards: &HashSet<String>,
    killed_ms: u128,
) -> BTreeMap<String, Option<u128>> {
    shards
        .iter()
        .map(|shard| {
            let first = survivors
                .iter()
                .flat_map(|o| &logs[o])
                .filter(|l| &l.0 == shard && l.4 >= killed_ms)
                .map(|l| l.4 - killed_ms)
                .min();
            (shard.clone(), first)
        })
        .collect()
}

fn seq_key(seq: &str) -> (usize, String) {
    (seq.len(), seq.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_one_of_three_processes_loses_nothing() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("crash");
    create_stream(&client, &stream, SHARDS).await;
    let table = unique_name("crash-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let dir = std::env::temp_dir().join(unique_name("kinesis-crash"));
    std::fs::create_dir_all(&dir).unwrap();
    let owners = ["p0", "p1", "p2"];
    let mut children = Reaper(HashMap::new());
    for owner in owners {
        let child = spawn_crash_broker(
            env!("CARGO_BIN_EXE_crash-broker"),
            [&account, &table, &stream],
            &dir,
            owner,
            &[],
        );
        children.0.insert(owner, child);
    }
    let producer = {
        let (client, stream) = (client.clone(), stream.clone());
        tokio::spawn(async move {
            for start in (0..RECORDS).step_by(2_000) {
                put_records(&client, &stream, KEYS, start, 2_000).await;
            }
        })
    };
    // Wait until the three processes balance (each holds at least 5 of 16).
    let owned = |rows: &[kinesis_broker::lease::Lease]| {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for row in rows {
            if let Some(o) = &row.owner {
                *by.entry(o.clone()).or_default() += 1;
            }
        }
        by
    };
    let started = Instant::now();
    loop {
        let by = owned(&store.list(&stream).await.unwrap());
        if owners.iter().all(|o| by.get(*o).copied().unwrap_or(0) >= 5) {
            eprintln!("balanced after {:.1?}: {by:?}", started.elapsed());
            break;
        }
        assert!(
            started.elapsed() < patience(Duration::from_secs(90)),
            "not balanced: {by:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Mid-stream: kill p1.
    while read_log(&dir.join("p0")).len()
        + read_log(&dir.join("p1")).len()
        + read_log(&dir.join("p2")).len()
        < RECORDS / 3
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut victim = children.0.remove("p1").unwrap();
    let killed_ms = unix_ms();
    victim.kill().expect("SIGKILL");
    let killed = Instant::now();
    victim.wait().unwrap();
    let victim_shards: HashSet<String> = store
        .list(&stream)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.owner.as_deref() == Some("p1"))
        .map(|r| r.key.shard().to_owned())
        .collect();
    let takeover = loop {
        let by = owned(&store.list(&stream).await.unwrap());
        let survivors = by.get("p0").copied().unwrap_or(0) + by.get("p2").copied().unwrap_or(0);
        if survivors == SHARDS as usize {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < patience(Duration::from_secs(30)),
            "survivors own {survivors} of {SHARDS}: {by:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "survivors owned all {SHARDS} shards {takeover:.2?} after the SIGKILL (p1 held {})",
        victim_shards.len()
    );
    producer.await.unwrap();
    // Every record handled at least once.
    wait_all_handled(&dir, &owners, RECORDS, Duration::from_secs(120)).await;
    // Graceful stop of the survivors (SIGTERM).
    children.stop_all();
    let logs: HashMap<&str, Vec<Line>> = owners
        .iter()
        .map(|o| (*o, read_log(&dir.join(o))))
        .collect();
    // From the kill to the first record a survivor handled on each of p1's shards: printed, not
    // asserted (a test asserts behaviour; paused-time tests and the takeover benchmark check
    // the bound). Every one of them was handled again: that is asserted.
    let resumed = resumed_after(&logs, &["p0", "p2"], &victim_shards, killed_ms);
    let mut gaps: Vec<u128> = resumed
        .iter()
        .map(|(shard, at)| at.unwrap_or_else(|| panic!("{shard}: never handled after the kill")))
        .collect();
    gaps.sort_unstable();
    if let (Some(max), false) = (gaps.last(), gaps.is_empty()) {
        eprintln!(
            "kill -> first handled record on p1's {} shards: median {:.2} s, max {:.2} s ({:?} ms)",
            gaps.len(),
            gaps[gaps.len() / 2] as f64 / 1_000.0,
            *max as f64 / 1_000.0,
            gaps
        );
    }
    // Where the survivors' time after each take of p1's shards went (their readers' logs).
    for owner in ["p0", "p2"] {
        let log = std::fs::read_to_string(dir.join(format!("{owner}.log"))).unwrap_or_default();
        for line in log.lines().filter(|l| {
            l.contains("first read since the take")
                && victim_shards.iter().any(|s| l.contains(s.as_str()))
        }) {
            eprintln!("{line}");
        }
    }
    // Per key, each process handled its records in order.
    for (owner, lines) in &logs {
        let mut last: HashMap<&str, (usize, String)> = HashMap::new();
        for (_, seq, key, _, _) in lines {
            let k = seq_key(seq);
            if let Some(prev) = last.get(key.as_str()) {
                assert!(*prev < k, "{owner}: key {key} out of order");
            }
            last.insert(key, k);
        }
    }
    // Duplicates: only records of p1's shards that p1 handled after its last checkpoint, i.e. a
    // suffix of what p1 handled on each of those shards.
    let mut count: HashMap<usize, usize> = HashMap::new();
    for lines in logs.values() {
        for l in lines {
            *count.entry(l.3).or_default() += 1;
        }
    }
    let duplicates: HashSet<usize> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(i, _)| *i)
        .collect();
    let mut p1_by_shard: HashMap<&str, Vec<&Line>> = HashMap::new();
    for l in &logs["p1"] {
        p1_by_shard.entry(l.0.as_str()).or_default().push(l);
    }
    for (shard, lines) in &p1_by_shard {
        let first_dup = lines.iter().position(|l| duplicates.contains(&l.3));
        if let Some(first) = first_dup {
            assert!(
                victim_shards.contains(*shard),
                "duplicates on {shard}, which p1 did not hold at the kill"
            );
            assert!(
                lines[first..].iter().all(|l| duplicates.contains(&l.3)),
                "duplicates on {shard} are not a suffix of p1's records"
            );
        }
    }
    let p1_records: HashSet<usize> = logs["p1"].iter().map(|l| l.3).collect();
    assert!(
        duplicates.iter().all(|d| p1_records.contains(d)),
        "a duplicate not handled by p1"
    );
    eprintln!(
        "records {RECORDS}, lost 0, duplicates {}, takeover {:.2} s",
        duplicates.len(),
        takeover.as_secs_f64()
    );
    // Lease (10 s) + list interval (2 s) + take tick (1 s) is the design bound, printed above
    // (10.5 s to 13.3 s seen on an idle 2-core machine). It is not asserted here: real
    // processes under CI's load miss it by scheduling delay alone (a test asserts behaviour,
    // not speed). Paused-time tests check it exactly (crates/fleet/tests/reader_leases.rs,
    // crates/broker/tests/liveness_watch.rs), and the simulation checks its crash bound
    // (15 s, and 2 s more until the shard is read) under every fault.
    let _ = std::fs::remove_dir_all(&dir);
}
