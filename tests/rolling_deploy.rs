//! A rolling deploy at the default start position (`LATEST`) on kinesis-local and moto.
//!
//! Three brokers share one DynamoDB lease table on a 4-shard stream; none calls `start_at`.
//! Once every shard is held and every shard's reader has handled a probe record (so each
//! reader's `LATEST` iterator is open), a publisher puts uniquely numbered records without
//! pause. Each broker in turn is shut down gracefully and replaced by a new broker with a new
//! owner id; the next is replaced only once the fleet holds all 4 shards again and the
//! replacement has been handed its share (2 + 1 + 1).
//! After the last replacement the publisher stops and the test waits until every record put has
//! been handled. Graceful shutdowns and hand-overs are planned moves: every record is handled
//! exactly once (0 lost, 0 duplicates).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, RunningBroker, SequenceNumber};
use kinesis_integ::*;
use tokio::time::Instant;

const SHARDS: usize = 4;
/// Partition keys of the numbered records, spread over every shard.
const KEYS: usize = 64;
/// Records per PutRecords call, and the pause between calls.
const BATCH: usize = 20;
const PUT_EVERY: Duration = Duration::from_millis(100);

/// One handled record.
#[derive(Debug, Clone)]
struct Entry {
    owner: String,
    shard: String,
    key: String,
    payload: String,
    sequence: SequenceNumber,
}

type Handled = Arc<Mutex<Vec<Entry>>>;

/// A broker at the default start position with shortened (valid) lease timings.
fn broker(
    config: &aws_config::SdkConfig,
    table: &str,
    owner: &str,
    stream: &str,
    log: &Handled,
) -> Broker {
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store(DynamoLeaseStore::new(config, table))
        .owner_id(owner)
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .take_interval(Duration::from_millis(500))
        .list_interval(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
        .build()
        .expect("broker");
    let (l, o) = (log.clone(), owner.to_owned());
    broker
        .subscribe(stream)
        .workers(4)
        .by_key()
        .handle(move |d: Delivery| {
            let (l, o) = (l.clone(), o.clone());
            async move {
                l.lock().expect("log").push(Entry {
                    owner: o,
                    shard: d.shard().to_owned(),
                    key: d.partition_key().to_owned(),
                    payload: String::from_utf8_lossy(d.payload()).into_owned(),
                    sequence: d.sequence().clone(),
                });
                Ok::<(), std::io::Error>(())
            }
        })
        .expect("subscribe");
    broker
}

/// Who holds what, by `stats()`: shard -> holders, and each broker's count.
fn holdings(fleet: &[RunningBroker], stream: &str) -> (BTreeMap<String, Vec<String>>, Vec<usize>) {
    let mut by_shard: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut counts = Vec::new();
    for b in fleet {
        let shards = b.stats().shards(stream).to_vec();
        counts.push(shards.len());
        for s in shards {
            by_shard
                .entry(s.shard)
                .or_default()
                .push(b.owner_id().to_owned());
        }
    }
    (by_shard, counts)
}

/// Waits until every shard is held by exactly one broker of `fleet` and, when `balanced`, the
/// counts differ by at most one (a broker below its fair share asks one that holds two more for
/// a shard, so the fleet converges there: with 3 brokers on 4 shards each holds at least one,
/// the newest included). Returns the time it took; `overlaps` counts samples (every 50 ms) in
/// which `stats()` showed one shard at two brokers.
async fn wait_fleet(
    fleet: &[RunningBroker],
    stream: &str,
    balanced: bool,
    limit: Duration,
    overlaps: &mut usize,
    what: &str,
) -> Duration {
    let limit = patience(limit);
    let started = Instant::now();
    loop {
        let (by_shard, counts) = holdings(fleet, stream);
        if by_shard.values().any(|owners| owners.len() > 1) {
            *overlaps += 1;
            eprintln!("  {what}: a shard shows two holders in stats(): {by_shard:?}");
        }
        let once = by_shard.len() == SHARDS && by_shard.values().all(|o| o.len() == 1);
        let (min, max) = (counts.iter().min(), counts.iter().max());
        if once && (!balanced || max.zip(min).is_some_and(|(max, min)| max - min <= 1)) {
            let owners: Vec<String> = fleet.iter().map(|b| b.owner_id().to_owned()).collect();
            eprintln!(
                "  {what}: {counts:?} held by {owners:?} after {:.2?}",
                started.elapsed()
            );
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not settled within {limit:?}: {by_shard:?}, counts {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts one probe record into every shard whose reader has not handled a probe yet, until
/// each has: then every shard's reader is open (it opened at `LATEST` before the probe).
async fn probe_every_reader(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    log: &Handled,
    limit: Duration,
) -> usize {
    let limit = patience(limit);
    let shards = shard_ids(client, stream).await;
    assert_eq!(shards.len(), SHARDS);
    let started = Instant::now();
    let mut sent = 0;
    loop {
        let seen: HashSet<String> = log
            .lock()
            .expect("log")
            .iter()
            .filter(|e| e.payload.starts_with("probe#"))
            .map(|e| e.shard.clone())
            .collect();
        let missing: Vec<_> = shards
            .iter()
            .filter(|s| !seen.contains(s.shard_id()))
            .collect();
        if missing.is_empty() {
            eprintln!(
                "  every reader open: {sent} probes handled or sent in {:.2?}",
                started.elapsed()
            );
            return sent;
        }
        assert!(
            started.elapsed() < limit,
            "readers of {:?} handled no probe within {limit:?}",
            missing.iter().map(|s| s.shard_id()).collect::<Vec<_>>()
        );
        for shard in missing {
            let hash = shard
                .hash_key_range()
                .expect("hash key range")
                .starting_hash_key();
            client
                .put_record()
                .stream_name(stream)
                .partition_key("probe")
                .explicit_hash_key(hash)
                .data(Blob::new(format!("probe#{}#{sent}", shard.shard_id())))
                .send()
                .await
                .expect("put probe");
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the publisher did.
#[derive(Debug, Default)]
struct Published {
    /// Records `0..put` are in the stream (each at least once).
    put: usize,
    /// Records of PutRecords calls that failed as a whole and were sent again: they may be in
    /// the stream twice, so a second handling of them is not the broker's duplicate.
    ambiguous: HashSet<usize>,
}

/// Puts records `0, 1, ..` (payload `rd#i`, key `key-{i % KEYS}`) until `stop`.
fn publisher(
    client: aws_sdk_kinesis::Client,
    stream: String,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Published> {
    tokio::spawn(async move {
        let mut out = Published::default();
        while !stop.load(Ordering::Relaxed) {
            let mut pending: Vec<usize> = (out.put..out.put + BATCH).collect();
            for attempt in 1.. {
                assert!(
                    attempt <= 50,
                    "records {pending:?} not stored in 50 attempts"
                );
                let entries = pending.iter().map(|i| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(format!("key-{}", i % KEYS))
                        .data(Blob::new(format!("rd#{i}")))
                        .build()
                        .expect("entry")
                });
                match client
                    .put_records()
                    .stream_name(&stream)
                    .set_records(Some(entries.collect()))
                    .send()
                    .await
                {
                    Ok(result) => {
                        pending = pending
                            .iter()
                            .zip(result.records())
                            .filter(|(_, r)| r.error_code().is_some())
                            .map(|(i, _)| *i)
                            .collect();
                    }
                    Err(e) => {
                        eprintln!(
                            "  put failed, retrying: {}",
                            aws_sdk_kinesis::error::DisplayErrorContext(e)
                        );
                        out.ambiguous.extend(pending.iter().copied());
                    }
                }
                if pending.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            out.put += BATCH;
            progress.store(out.put, Ordering::Relaxed);
            tokio::time::sleep(PUT_EVERY).await;
        }
        out
    })
}

/// The numbered records in `log`: index -> how many times handled.
fn numbered(log: &Handled) -> HashMap<usize, usize> {
    let mut count = HashMap::new();
    for e in log.lock().expect("log").iter() {
        if let Some(i) = e.payload.strip_prefix("rd#") {
            *count
                .entry(i.parse::<usize>().expect("payload"))
                .or_default() += 1;
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_deploy_at_latest_loses_nothing_and_duplicates_nothing() {
    tokio::time::timeout(patience(Duration::from_secs(240)), scenario())
        .await
        .expect("the scenario took longer than its hang guard (patience of 240 s)");
}

async fn scenario() {
    let began = Instant::now();
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("rolling");
    create_stream(&client, &stream, SHARDS as i32).await;
    let table = unique_name("rolling-leases");
    DynamoLeaseStore::new(&config, &table)
        .ensure_table()
        .await
        .expect("table");
    let log = Handled::default();
    let mut overlaps = 0;

    // Three brokers at the default start position.
    let mut fleet = Vec::new();
    for owner in ["a", "b", "c"] {
        fleet.push(
            broker(&config, &table, owner, &stream, &log)
                .start()
                .await
                .expect("start"),
        );
    }
    wait_fleet(
        &fleet,
        &stream,
        true,
        Duration::from_secs(30),
        &mut overlaps,
        "initial fleet",
    )
    .await;
    let probes = probe_every_reader(&client, &stream, &log, Duration::from_secs(30)).await;

    // Records put without pause from here on.
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let publishing = publisher(
        client.clone(),
        stream.clone(),
        stop.clone(),
        progress.clone(),
    );
    let put_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Rolling deploy: replace a, b, c in turn.
    let mut handovers = Vec::new();
    for (old, new) in [("a", "a2"), ("b", "b2"), ("c", "c2")] {
        let at = fleet
            .iter()
            .position(|b| b.owner_id() == old)
            .expect("old broker");
        let leaving = fleet.remove(at);
        let held = leaving.stats().shards(&stream).len();
        let put_before = progress.load(Ordering::Relaxed);
        let t = Instant::now();
        let report = leaving.shutdown().await;
        let shutdown_took = t.elapsed();
        assert!(report.handlers_finished, "{old}: handlers did not finish");
        let taken = wait_fleet(
            &fleet,
            &stream,
            false,
            Duration::from_secs(15),
            &mut overlaps,
            &format!("after {old} left"),
        )
        .await;
        let t = Instant::now();
        fleet.push(
            broker(&config, &table, new, &stream, &log)
                .start()
                .await
                .expect("start replacement"),
        );
        let started_in = t.elapsed();
        let settled = wait_fleet(
            &fleet,
            &stream,
            true,
            Duration::from_secs(30),
            &mut overlaps,
            &format!("after {new} joined"),
        )
        .await;
        eprintln!(
            "{old} (held {held}, {put_before} records put) shut down in {shutdown_took:.2?}; \
             survivors held all {SHARDS} {taken:.2?} later; {new} started in {started_in:.2?}, \
             fleet settled {settled:.2?} later"
        );
        handovers.push((old, held, shutdown_took, taken, settled));
        tokio::time::sleep(Duration::from_secs(4)).await;
    }

    // Stop putting and wait until every record put has been handled.
    stop.store(true, Ordering::Relaxed);
    let published = tokio::time::timeout(patience(Duration::from_secs(30)), publishing)
        .await
        .expect("publisher did not stop")
        .expect("publisher");
    let put_for = put_from.elapsed();
    let n = published.put;
    assert!(n > 0, "nothing put");
    let drain_from = Instant::now();
    loop {
        let count = numbered(&log);
        let handled = (0..n).filter(|i| count.contains_key(i)).count();
        if handled == n {
            break;
        }
        assert!(
            drain_from.elapsed() < patience(Duration::from_secs(60)),
            "only {handled} of {n} records handled within {:?} of the last put; \
             first missing: {:?}",
            patience(Duration::from_secs(60)),
            (0..n)
                .filter(|i| !count.contains_key(i))
                .take(20)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = drain_from.elapsed();
    // A while longer, for late duplicates.
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_fleet(
        &fleet,
        &stream,
        true,
        Duration::from_secs(5),
        &mut overlaps,
        "final fleet",
    )
    .await;
    for b in fleet {
        assert!(b.shutdown().await.handlers_finished);
    }

    // Analysis.
    let entries = log.lock().expect("log").clone();
    let count = numbered(&log);
    let lost: Vec<usize> = (0..n).filter(|i| !count.contains_key(i)).collect();
    let extra: Vec<usize> = count.keys().copied().filter(|&i| i >= n).collect();
    let mut duplicated: Vec<(usize, usize)> = count
        .iter()
        .filter(|(i, c)| **c > 1 && !published.ambiguous.contains(i))
        .map(|(i, c)| (*i, *c))
        .collect();
    duplicated.sort_unstable();
    let duplicates: usize = duplicated.iter().map(|(_, c)| c - 1).sum();
    let ambiguous_twice = count
        .iter()
        .filter(|(i, c)| **c > 1 && published.ambiguous.contains(i))
        .count();
    let handled = entries
        .iter()
        .filter(|e| e.payload.starts_with("rd#"))
        .count();
    let mut by_owner: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_shard: BTreeMap<&str, usize> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.payload.starts_with("rd#")) {
        *by_owner.entry(e.owner.as_str()).or_default() += 1;
        *by_shard.entry(e.shard.as_str()).or_default() += 1;
    }
    // Per key, handled in sequence order (reported, not asserted).
    let mut last: HashMap<&str, &SequenceNumber> = HashMap::new();
    let mut out_of_order = 0;
    for e in entries.iter().filter(|e| e.payload.starts_with("rd#")) {
        if let Some(prev) = last.get(e.key.as_str()) {
            if **prev >= e.sequence {
                out_of_order += 1;
            }
        }
        last.insert(&e.key, &e.sequence);
    }
    let detail = |i: usize| -> Vec<String> {
        entries
            .iter()
            .filter(|e| e.payload == format!("rd#{i}"))
            .map(|e| format!("{}@{} seq {}", e.owner, e.shard, e.sequence))
            .collect()
    };
    eprintln!("handled per owner: {by_owner:?}; per shard: {by_shard:?}; probes sent {probes}");
    eprintln!(
        "rolling deploy summary: put {n} records over {put_for:.1?}, handled {handled} \
         ({} distinct), lost {}, duplicates {duplicates}, ambiguous puts {} ({ambiguous_twice} \
         handled twice), out of key order {out_of_order}, stats overlaps {overlaps}, \
         drained {drained:.2?} after the last put, elapsed {:.1?}",
        count.len(),
        lost.len(),
        published.ambiguous.len(),
        began.elapsed()
    );
    for (old, held, shutdown, taken, settled) in &handovers {
        eprintln!(
            "  {old}: held {held}, shutdown {shutdown:.2?}, survivors took all {taken:.2?}, \
             settled {settled:.2?}"
        );
    }
    assert!(extra.is_empty(), "handled records never put: {extra:?}");
    assert!(
        lost.is_empty(),
        "{} of {n} records lost, first: {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
    assert_eq!(
        duplicates,
        0,
        "{} records handled more than once, first: {:?}",
        duplicated.len(),
        duplicated
            .iter()
            .take(10)
            .map(|(i, c)| (*i, *c, detail(*i)))
            .collect::<Vec<_>>()
    );
}
