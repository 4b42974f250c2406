//! KPL aggregated records: every read delivers each sub-record as its own delivery, with its
//! own partition key and a (sequence, subsequence) position; checkpoints sit inside
//! aggregates, and a new owner resumes after the last settled sub-record. On paused time.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kinesis_dispatch::{channel, Delivery, DispatchConfig, Dispatcher, Handler, Workers};
use kinesis_fleet::{Coordinator, ReaderConfig};
use kinesis_kpl::Aggregator;
use kinesis_lease_core::{Checkpoint, Lease, LeaseKey, LeaseStore, SequenceNumber};
use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
use kinesis_stream_core::{KinesisApi, PutEntry, StartAt};
use kinesis_stream_memory::{MemoryStream, Op};

const SHARD: &str = "shardId-000000000000";

#[tokio::test(start_paused = true)]
async fn sub_records_are_delivered_from_the_default_start_with_their_own_keys() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    // The default start: LATEST.
    let config = ReaderConfig::new("s", "a");
    let consumer = start(&kinesis, store, config, Workers::ByKey(4));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(consumer.coordinator.held().len(), 2);
    put_aggregated(&kinesis, 7, 0, 300, 25, Some(0)).await;
    // Plain records after them, on the same shard.
    let plain: Vec<PutEntry> = (300..320)
        .map(|i| {
            PutEntry::new(
                Bytes::from(format!("key-{}#{i}", i % 7)),
                format!("key-{}", i % 7),
            )
            .with_hash_key(0)
        })
        .collect();
    kinesis.put_records("s", &plain).await.unwrap();
    wait_for_count(&consumer.log, 320, Duration::from_secs(30)).await;
    assert_exactly_once(&consumer.log, 320);
    // Every record under its own key (the lanes used it), each key in order (the aggregates
    // all went to the shard of hash key 0, where a producer's map would send those keys).
    for (key, ns) in per_key(&consumer.log) {
        assert!(
            ns.iter().all(|n| format!("key-{}", n % 7) == key),
            "{key}: {ns:?}"
        );
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {ns:?}"
        );
    }
    // Sub-records carry the aggregate's sequence number and their position in it.
    let log = consumer.log.lock().unwrap().clone();
    let first = log.iter().find(|s| s.payload == "key-0#0").unwrap();
    assert!(first.sequence.ends_with("/0"), "{}", first.sequence);
    let plain = log.iter().find(|s| s.payload == "key-6#300").unwrap();
    assert!(!plain.sequence.contains('/'), "{}", plain.sequence);
    let stats = consumer.coordinator.stats();
    let aggregates: u64 = stats.iter().map(|s| s.kpl.aggregates).sum();
    let subs: u64 = stats.iter().map(|s| s.kpl.sub_records).sum();
    assert_eq!((aggregates, subs), (12, 300));
    assert_eq!(stats.iter().map(|s| s.kpl.malformed).sum::<u64>(), 0);
    consumer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_inside_an_aggregate_resumes_after_it() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let seqs = put_aggregated(&kinesis, 3, 0, 30, 10, None).await;
    // An earlier owner settled the second aggregate up to its sub-record 3.
    let store = Arc::new(MemoryLeaseStore::new());
    let key = LeaseKey::new("s", SHARD).unwrap();
    let checkpoint = Checkpoint::Sequence(SequenceNumber::new(seqs[1].clone(), Some(3)).unwrap());
    let mut row = Lease::new(key.clone(), vec![]).starting_at(Some(checkpoint));
    row.counter = 5; // taken and written before: not a fresh subscription
    assert!(store.create(&row).await.unwrap());
    let consumer = start(
        &kinesis,
        store,
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    wait_for_count(&consumer.log, 16, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let payloads: Vec<String> = consumer
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    let expected: Vec<String> = (14..30).map(|i| format!("key-{}#{i}", i % 3)).collect();
    assert_eq!(payloads, expected);
    consumer.stop().await;
}

/// A handler that records what it handles, and never returns from `block`'s payload.
fn blocking_consumer(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    block: Option<&'static str>,
    log: Log,
) -> Consumer {
    let (sender, receiver) = channel(64);
    let l = log.clone();
    let who = owner.to_owned();
    let handler = Handler::one(move |d: Delivery| {
        let (l, who) = (l.clone(), who.clone());
        async move {
            let payload = String::from_utf8_lossy(d.payload()).into_owned();
            if Some(payload.as_str()) == block {
                std::future::pending::<()>().await;
            }
            l.lock().unwrap().push(Seen {
                owner: who,
                shard: d.shard().to_owned(),
                key: d.partition_key().to_owned(),
                sequence: d.sequence().to_string(),
                payload,
            });
            Ok::<(), std::io::Error>(())
        }
    });
    let dispatch = Dispatcher::spawn(receiver, handler, DispatchConfig::default()).unwrap();
    let coordinator = Coordinator::spawn(
        config("s", owner, StartAt::TrimHorizon),
        Arc::new(kinesis.clone()),
        Arc::new(MemoryLeaseStore::over(table)),
        sender,
    );
    Consumer {
        coordinator,
        dispatch,
        log,
    }
}

#[tokio::test(start_paused = true)]
async fn a_consumer_killed_mid_aggregate_loses_nothing_and_repeats_nothing_settled() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let seqs = put_aggregated(&kinesis, 4, 0, 40, 20, None).await;
    let table = MemoryLeaseTable::new();
    // `a` stops at sub-record 7 of the second aggregate (record 27): 27 settled before it.
    let a_log = Log::default();
    let a = blocking_consumer(&kinesis, &table, "a", Some("key-3#27"), a_log.clone());
    wait_for_count(&a_log, 27, Duration::from_secs(30)).await;
    // A renewal carries the checkpoint: inside the second aggregate.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let store = MemoryLeaseStore::over(&table);
    let row = store
        .read(&LeaseKey::new("s", SHARD).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.checkpoint,
        Some(Checkpoint::Sequence(
            SequenceNumber::new(seqs[1].clone(), Some(6)).unwrap()
        ))
    );
    a.crash();
    let b_log = Log::default();
    let b = blocking_consumer(&kinesis, &table, "b", None, b_log.clone());
    wait_for_count(&b_log, 13, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b_payloads: Vec<String> = b_log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    // b starts exactly after the checkpoint: nothing lost, nothing settled repeated.
    let expected: Vec<String> = (27..40).map(|i| format!("key-{}#{i}", i % 4)).collect();
    assert_eq!(b_payloads, expected);
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn expired_iterators_between_aggregates_repeat_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let mut cfg = config("s", "a", StartAt::TrimHorizon);
    cfg.records_per_call = 1; // one aggregate per read
    let consumer = start(&kinesis, store, cfg, Workers::Serial);
    put_aggregated(&kinesis, 5, 0, 100, 10, None).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        kinesis.expire_iterators();
    }
    wait_for_count(&consumer.log, 100, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_exactly_once(&consumer.log, 100);
    consumer.stop().await;
}

/// Pages that mix plain records and aggregates, seven records a call, with every iterator
/// expiring every 150 ms: each reopen starts after the last record delivered, a plain record
/// before an aggregate or at a page's end, or a sub-record. (The reader keeps only the last
/// plain record of a run as the one to reopen after; planted, a reader that keeps no plain
/// record handles 7 records of 280 twice here.)
#[tokio::test(start_paused = true)]
async fn expired_iterators_in_pages_of_plain_records_and_aggregates_repeat_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let mut cfg = config("s", "a", StartAt::TrimHorizon);
    cfg.records_per_call = 7;
    let consumer = start(&kinesis, store, cfg, Workers::Serial);
    // Runs of plain records longer than a page between aggregates of 1 to 3 sub-records:
    // pages end in plain records and in aggregates. 20 rounds of 9 + 5.
    for round in 0..20 {
        let from = round * 14;
        put_many(&kinesis, "s", 5, from, 9);
        put_aggregated(&kinesis, 5, from + 9, 5, 1 + round % 3, None).await;
    }
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        kinesis.expire_iterators();
    }
    wait_for_count(&consumer.log, 280, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(kinesis.calls(Op::ShardIterator) > 20, "reopened often");
    assert_exactly_once(&consumer.log, 280);
    consumer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn malformed_aggregates_are_delivered_as_they_are_and_counted() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store,
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    let mut agg = Aggregator::new();
    let _ = agg.push("k", None, Bytes::from_static(b"inside")).unwrap();
    let good = agg.finish().unwrap().data;
    let mut bad = good.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff; // the MD5 trailer no longer matches
    kinesis.put("s", "k", Bytes::from(bad.clone())).unwrap();
    kinesis.put("s", "k", good).unwrap();
    wait_for_count(&consumer.log, 2, Duration::from_secs(30)).await;
    let log = consumer.log.lock().unwrap().clone();
    assert_eq!(log[0].payload, String::from_utf8_lossy(&bad));
    assert!(!log[0].sequence.contains('/'));
    assert_eq!(log[1].payload, "inside");
    let stats = consumer.coordinator.stats();
    assert_eq!(
        (
            stats[0].kpl.malformed,
            stats[0].kpl.aggregates,
            stats[0].kpl.sub_records
        ),
        (1, 1, 1)
    );
    consumer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn sub_records_outside_the_shard_after_a_split_are_delivered_and_counted() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let consumer = start_with_log(
        &kinesis,
        store,
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
        log.clone(),
    );
    kinesis.split_evenly("s", SHARD).unwrap();
    // A producer with a stale map aggregates for the parent: its keys span both children, and
    // the aggregate lands on the child of its first sub-record.
    put_aggregated(&kinesis, 16, 0, 64, 64, None).await;
    wait_for_count(&log, 64, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_exactly_once(&log, 64);
    let outside: u64 = consumer
        .coordinator
        .stats()
        .iter()
        .map(|s| s.kpl.out_of_range)
        .sum();
    let half = u128::MAX / 2;
    let first_low = kinesis_kpl::partition_key_hash("key-0") <= half;
    let expected = (0..64)
        .filter(|i| {
            (kinesis_kpl::partition_key_hash(&format!("key-{}", i % 16)) <= half) != first_low
        })
        .count() as u64;
    assert!(expected > 0);
    assert_eq!(outside, expected);
    consumer.stop().await;
}
