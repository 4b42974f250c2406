//! Where shards start when the table already has history: a shard whose ancestor holds (or
//! held) a checkpoint is read from its first record, however many levels down and whoever
//! created the rows (an import, another version, an operator), at the default `LATEST`.
//!
//! A review found that rows created with counter 1 (as the KCL import writes them) made the
//! first broker take the subscription for brand new: children of children, and children of a
//! trimmed parent, started at the tip and their records were never handled. Each test here
//! puts records in every shard, writes the table as the import leaves it, starts one broker at
//! the default start and checks that every record after the checkpoints is handled. Controls:
//! a brand-new subscription at `LATEST` still starts at the tip, and at `TRIM_HORIZON` reads
//! everything.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::{Lease, LeaseKey, LeaseStore};
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{
    Broker, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
    SequenceNumber, StartAt,
};

const STREAM: &str = "s";

type Handled = Arc<Mutex<BTreeSet<String>>>;

/// Puts `n` records whose payloads name `tag` and their index.
fn put(kinesis: &MemoryStream, tag: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let payload = format!("{tag}-{i}");
            let stored = kinesis
                .put(STREAM, &format!("key-{tag}-{i}"), payload.clone())
                .unwrap();
            (payload, stored.sequence)
        })
        .collect()
}

/// A row as the import creates it: counter 1, no owner, a checkpoint of the KCL.
async fn imported_row(table: &MemoryLeaseTable, shard: &str, checkpoint: Checkpoint) {
    let store = MemoryLeaseStore::over(table);
    let row =
        Lease::new(LeaseKey::new(STREAM, shard).unwrap(), Vec::new()).starting_at(Some(checkpoint));
    assert!(store.create(&row).await.unwrap());
}

fn after(sequence: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(sequence, Some(0)).unwrap())
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    start_at: Option<StartAt>,
) -> (RunningBroker, Handled) {
    let handled: Handled = Arc::default();
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id("a")
        .build()
        .unwrap();
    let seen = handled.clone();
    let mut sub = broker.subscribe(STREAM);
    if let Some(start_at) = start_at {
        sub = sub.start_at(start_at);
    }
    sub.handle(move |d: Delivery| {
        let seen = seen.clone();
        async move {
            let payload = String::from_utf8(d.payload().to_vec()).unwrap();
            seen.lock().unwrap().insert(payload);
            Ok::<(), std::io::Error>(())
        }
    })
    .unwrap();
    (broker.start().await.unwrap(), handled)
}

fn payloads(records: &[(String, String)]) -> BTreeSet<String> {
    records.iter().map(|(p, _)| p.clone()).collect()
}

/// Waits (paused time) until `handled` holds `want`, or a generous bound has passed.
async fn handled_within(handled: &Handled, want: &BTreeSet<String>) -> BTreeSet<String> {
    for _ in 0..600 {
        if want.is_subset(&handled.lock().unwrap()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handled.lock().unwrap().clone()
}

fn missing(want: &BTreeSet<String>, got: &BTreeSet<String>) -> Vec<String> {
    want.difference(got).cloned().collect()
}

#[tokio::test(start_paused = true)]
async fn grandchildren_of_an_imported_checkpoint_are_read_from_their_first_record() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let root = put(&kinesis, "root", 10);
    // 0 splits into 1 and 2, then 1 into 3 and 4, then 3 into 5 and 6 (three levels).
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let level1 = put(&kinesis, "l1", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000001")
        .unwrap();
    let level2 = put(&kinesis, "l2", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000003")
        .unwrap();
    let level3 = put(&kinesis, "l3", 20);
    let table = MemoryLeaseTable::new();
    // The KCL stopped inside shard 0, after its fourth record.
    imported_row(&table, "shardId-000000000000", after(&root[3].1)).await;
    let (running, handled) = start(&kinesis, &table, None).await;
    let mut want = payloads(&root[4..]);
    want.extend(payloads(&level1));
    want.extend(payloads(&level2));
    want.extend(payloads(&level3));
    let got = handled_within(&handled, &want).await;
    assert_eq!(missing(&want, &got), Vec::<String>::new(), "lost records");
    assert!(
        payloads(&root[..4]).is_disjoint(&got),
        "nothing at or before the checkpoint is handled again"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn children_of_a_trimmed_parent_are_read_from_their_first_record_when_the_table_has_history()
{
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let before = put(&kinesis, "before", 20);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let children = put(&kinesis, "child", 30);
    // Shard 0 ages out of the stream: the import skips it, so it has no row.
    kinesis.trim_shard(STREAM, "shardId-000000000000").unwrap();
    let table = MemoryLeaseTable::new();
    // The KCL's checkpoint in shard 1: its last record put before the split; records of
    // shard 1 put after the split come after it.
    let last_of_one = kinesis_records_of(&kinesis, "shardId-000000000001", &before);
    imported_row(
        &table,
        "shardId-000000000001",
        after(&last_of_one.last().unwrap().1),
    )
    .await;
    let (running, handled) = start(&kinesis, &table, None).await;
    // Every record put after the split: in shard 1 after the checkpoint, and in 2 and 3.
    let want = payloads(&children);
    let got = handled_within(&handled, &want).await;
    assert_eq!(missing(&want, &got), Vec::<String>::new(), "lost records");
    running.shutdown().await;
}

/// The records among `put` that went to `shard`.
fn kinesis_records_of(
    kinesis: &MemoryStream,
    shard: &str,
    put: &[(String, String)],
) -> Vec<(String, String)> {
    let range = kinesis
        .shards(STREAM)
        .unwrap()
        .into_iter()
        .find(|s| s.id == shard)
        .unwrap()
        .hash_range;
    put.iter()
        .filter(|(payload, _)| {
            let hash = kinesis_broker::testing::hash_key(&format!("key-{payload}"));
            range.0 <= hash && hash <= range.1
        })
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_brand_new_subscription_at_latest_still_starts_at_the_tip() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let old = put(&kinesis, "old", 10);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    let old_children = put(&kinesis, "oldchild", 10);
    let table = MemoryLeaseTable::new();
    let (running, handled) = start(&kinesis, &table, None).await;
    // Every shard taken and opened at the tip: then new records arrive.
    for _ in 0..50 {
        if running.stats().shards(STREAM).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let new = put(&kinesis, "new", 10);
    let got = handled_within(&handled, &payloads(&new)).await;
    assert_eq!(missing(&payloads(&new), &got), Vec::<String>::new());
    assert!(
        payloads(&old).is_disjoint(&got) && payloads(&old_children).is_disjoint(&got),
        "a new subscription at LATEST reads nothing from before its start: {got:?}"
    );
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_brand_new_subscription_at_trim_horizon_reads_every_level() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let mut all = put(&kinesis, "root", 5);
    kinesis
        .split_evenly(STREAM, "shardId-000000000000")
        .unwrap();
    all.extend(put(&kinesis, "l1", 10));
    kinesis
        .split_evenly(STREAM, "shardId-000000000001")
        .unwrap();
    all.extend(put(&kinesis, "l2", 10));
    let table = MemoryLeaseTable::new();
    let (running, handled) = start(&kinesis, &table, Some(StartAt::TrimHorizon)).await;
    let got = handled_within(&handled, &payloads(&all)).await;
    assert_eq!(missing(&payloads(&all), &got), Vec::<String>::new());
    running.shutdown().await;
}
