//! KPL aggregated records against an implementation this project did not write: awslabs'
//! aws-kinesis-agg (npm), driven through `support/kpl_agg.js`, on kinesis-local and moto.
//!
//! - Records it aggregates, put into kinesis-local, are consumed by a broker from the default
//!   `LATEST` start: every sub-record exactly once, each key in order.
//! - A consumer killed inside an aggregate, and another taking over: nothing lost, and only
//!   what came after the last checkpoint is delivered again.
//! - Our publisher's aggregates, read back raw, are unpacked by its de-aggregator into exactly
//!   the records put, with the sequence and subsequence numbers the publisher reported.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};
use kinesis_broker::{
    AwsKinesis, Broker, Delivery, DynamoLeaseStore, Publisher, PutEntry, StartAt,
};
use kinesis_integ::*;
use kinesis_lease_core::{Checkpoint, LeaseKey, LeaseStore};
use serde_json::{json, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Runs `kpl_agg.js mode` on JSON lines; returns its output lines.
fn kpl_agg(mode: &str, lines: &[Value]) -> Vec<Value> {
    let node_path = std::env::var("KPL_AGG_NODE_PATH").unwrap_or_else(|_| {
        panic!("KPL_AGG_NODE_PATH is not set: run the suite with `cargo xtask integ`, which installs aws-kinesis-agg")
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/kpl_agg.js");
    let mut child = Command::new("node")
        .arg(script)
        .arg(mode)
        .env("NODE_PATH", node_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node runs");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for line in lines {
            writeln!(stdin, "{line}").expect("write to node");
        }
    }
    let out = child.wait_with_output().expect("node ends");
    assert!(out.status.success(), "kpl_agg.js {mode} failed");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// Aggregates records `i` in `range` (key `key-{i % keys}`, payload `key#i`) with
/// aws-kinesis-agg, `per_aggregate` records of one shard per aggregate, and puts the aggregates
/// in order. The records are grouped by the shard their key belongs to, as a producer that
/// knows the shard map does, so every aggregate lands where its sub-records belong.
async fn put_aggregated_by_awslabs(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    keys: usize,
    range: std::ops::Range<usize>,
    per_aggregate: usize,
) -> usize {
    let shards = shard_ids(client, stream).await;
    let shard_of = |key: &str| -> usize {
        let hash = kinesis_kpl::partition_key_hash(key);
        shards
            .iter()
            .position(|s| {
                let r = s.hash_key_range().expect("range");
                let low: u128 = r.starting_hash_key().parse().expect("low");
                let high: u128 = r.ending_hash_key().parse().expect("high");
                low <= hash && hash <= high
            })
            .expect("a shard holds every hash key")
    };
    let mut groups: Vec<Vec<Value>> = vec![Vec::new(); shards.len()];
    let mut aggregates = Vec::new();
    for i in range {
        let key = format!("key-{}", i % keys);
        let group = &mut groups[shard_of(&key)];
        group.push(json!({"partitionKey": key, "data": base64::Engine::encode(&B64, format!("{key}#{i}"))}));
        if group.len() == per_aggregate {
            aggregates.extend(kpl_agg("aggregate", &std::mem::take(group)));
        }
    }
    for group in groups.into_iter().filter(|g| !g.is_empty()) {
        aggregates.extend(kpl_agg("aggregate", &group));
    }
    let count = aggregates.len();
    for aggregate in aggregates {
        let data = base64::Engine::decode(&B64, aggregate["data"].as_str().expect("data"))
            .expect("base64");
        let mut entry = PutRecordsRequestEntry::builder()
            .partition_key(aggregate["partitionKey"].as_str().expect("key"))
            .data(Blob::new(data));
        if let Some(ehk) = aggregate["explicitHashKey"].as_str() {
            entry = entry.explicit_hash_key(ehk);
        }
        // One record a call: each key's aggregates stored in order.
        let out = client
            .put_records()
            .stream_name(stream)
            .records(entry.build().expect("entry"))
            .send()
            .await
            .expect("put");
        assert_eq!(out.failed_record_count(), Some(0));
    }
    count
}

#[tokio::test]
async fn records_aggregated_by_aws_kinesis_agg_are_consumed_once_each_in_key_order() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("kpl");
    create_stream(&client, &stream, 2).await;
    let table = unique_name("leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let log = Log::default();
    // The default start position: LATEST.
    let running = logging_broker(
        &config,
        Arc::new(store),
        "a",
        &stream,
        StartAt::Latest,
        &log,
    )
    .start()
    .await
    .expect("start");
    // Held is not open: at LATEST, records put before a reader's first read are before the
    // subscription's beginning.
    wait_reading(&running, &stream, 2, Duration::from_secs(30)).await;
    let aggregates = put_aggregated_by_awslabs(&client, &stream, 16, 0..600, 40).await;
    wait_for_count(&log, 600, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = running.stats();
    let kpl: Vec<_> = stats.shards(&stream).iter().map(|s| s.kpl).collect();
    running.shutdown().await;
    assert_exactly_once_in_key_order(&log, 600);
    let unpacked: u64 = kpl.iter().map(|k| k.aggregates).sum();
    let subs: u64 = kpl.iter().map(|k| k.sub_records).sum();
    assert_eq!((unpacked, subs), (aggregates as u64, 600));
    assert_eq!(
        kpl.iter()
            .map(|k| k.malformed + k.out_of_range)
            .sum::<u64>(),
        0
    );
}

/// A broker on `stream` whose handler logs each record, and never returns from `block`.
fn blocking_broker(
    config: &aws_config::SdkConfig,
    table: &str,
    owner: &str,
    stream: &str,
    block: Option<String>,
    log: &Log,
) -> Broker {
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store(DynamoLeaseStore::new(config, table))
        .owner_id(owner)
        .poll_interval(Duration::from_millis(200))
        .build()
        .expect("broker");
    let (l, o) = (log.clone(), owner.to_owned());
    broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .handle(move |d: Delivery| {
            let (l, o, block) = (l.clone(), o.clone(), block.clone());
            async move {
                let payload = String::from_utf8_lossy(d.payload()).into_owned();
                if block.as_deref() == Some(payload.as_str()) {
                    std::future::pending::<()>().await;
                }
                l.lock().expect("log").push((
                    o,
                    d.sequence().to_string(),
                    d.partition_key().to_owned(),
                    payload,
                ));
                Ok::<(), std::io::Error>(())
            }
        })
        .expect("subscribe");
    broker
}

#[tokio::test]
async fn a_consumer_killed_inside_an_aggregate_loses_nothing_and_repeats_only_after_the_checkpoint()
{
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("kpl-kill");
    create_stream(&client, &stream, 1).await;
    let table = unique_name("leases");
    DynamoLeaseStore::new(&config, &table)
        .ensure_table()
        .await
        .expect("table");
    put_aggregated_by_awslabs(&client, &stream, 5, 0..100, 20).await;
    // `a` settles records 0..47, then hangs on record 47: sub-record 7 of the third aggregate.
    let a_log = Log::default();
    let a = blocking_broker(
        &config,
        &table,
        "a",
        &stream,
        Some("key-2#47".into()),
        &a_log,
    )
    .start()
    .await
    .expect("start a");
    wait_for_count(&a_log, 47, Duration::from_secs(30)).await;
    // A renewal carries the checkpoint: wait until it stands inside the third aggregate.
    let store = DynamoLeaseStore::new(&config, &table);
    let shard = shard_ids(&client, &stream).await[0].shard_id().to_owned();
    let key = LeaseKey::new(&stream, &shard).expect("key");
    let started = tokio::time::Instant::now();
    let checkpoint = loop {
        let row = store.read(&key).await.expect("read").expect("row");
        if let Some(Checkpoint::Sequence(seq)) = &row.checkpoint {
            if seq.subsequence() == Some(6) {
                break seq.clone();
            }
        }
        assert!(
            started.elapsed() < patience(Duration::from_secs(15)),
            "checkpoint: {:?}",
            row.checkpoint
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let logged = a_log.lock().expect("log").clone();
    assert_eq!(logged.last().expect("logged").1, checkpoint.to_string());
    // Killed: nothing more is written.
    drop(a);
    let b_log = Log::default();
    let b = blocking_broker(&config, &table, "b", &stream, None, &b_log)
        .start()
        .await
        .expect("start b");
    wait_for_count(&b_log, 53, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    b.shutdown().await;
    let payloads: Vec<String> = b_log
        .lock()
        .expect("log")
        .iter()
        .map(|(_, _, _, p)| p.clone())
        .collect();
    let expected: Vec<String> = (47..100).map(|i| format!("key-{}#{i}", i % 5)).collect();
    assert_eq!(payloads, expected, "b starts right after the checkpoint");
}

#[tokio::test]
async fn our_aggregates_are_unpacked_by_aws_kinesis_agg() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("kpl-pub");
    create_stream(&client, &stream, 2).await;
    let publisher = Publisher::new(AwsKinesis::new(&config), &stream).aggregated_within(4_096);
    let entries: Vec<PutEntry> = (0..300)
        .map(|i| {
            let mut e = PutEntry::new(format!("payload {i}"), format!("key-{}", i % 16));
            if i % 5 == 0 {
                e.explicit_hash_key = Some(u128::MAX - i as u128);
            }
            e
        })
        .collect();
    let stored = publisher.put_all(entries.clone()).await.expect("put");
    assert!(stored.iter().all(|s| s.sequence.subsequence().is_some()));
    // Read every shard back raw, and have aws-kinesis-agg unpack what we wrote.
    let mut raw = Vec::new();
    for shard in shard_ids(&client, &stream).await {
        let it = client
            .get_shard_iterator()
            .stream_name(&stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("iterator")
            .shard_iterator
            .expect("iterator");
        let page = client
            .get_records()
            .shard_iterator(it)
            .limit(10_000)
            .send()
            .await
            .expect("records");
        for r in page.records() {
            raw.push(json!({
                "partitionKey": r.partition_key(),
                "sequenceNumber": r.sequence_number(),
                "data": base64::Engine::encode(&B64, r.data().as_ref()),
            }));
        }
    }
    let unpacked = kpl_agg("deaggregate", &raw);
    assert_eq!(unpacked.len(), entries.len());
    let by_position: std::collections::HashMap<(String, u64), &Value> = unpacked
        .iter()
        .map(|u| {
            let seq = u["sequenceNumber"].as_str().expect("seq").to_owned();
            let sub = u["subSequenceNumber"].as_u64().expect("subsequence");
            ((seq, sub), u)
        })
        .collect();
    for (entry, published) in entries.iter().zip(&stored) {
        let position = (
            published.sequence.number().to_owned(),
            published.sequence.subsequence().expect("aggregated"),
        );
        let got = by_position
            .get(&position)
            .unwrap_or_else(|| panic!("{position:?} not found"));
        assert_eq!(got["partitionKey"], entry.partition_key.as_str());
        let data = base64::Engine::decode(&B64, got["data"].as_str().expect("data")).expect("b64");
        assert_eq!(data, entry.payload.as_ref());
        // aws-kinesis-agg 4.2.8 reads a missing `explicit_hash_key_index` as index 0 (the
        // protobuf default) and reports that table entry, so only the records that had an
        // explicit hash key can be compared on it.
        if let Some(ehk) = entry.explicit_hash_key {
            assert_eq!(
                got["explicitPartitionKey"].as_str(),
                Some(ehk.to_string().as_str())
            );
        }
    }
}
