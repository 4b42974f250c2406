//! Importing a Java KCL application's checkpoints, proven against the real KCL on
//! kinesis-local and moto.
//!
//! `kcl_*_checkpoints_import_exactly`: a stream of 4 shards and 2,400 records (one shard's
//! records packed into KPL aggregates) is partly consumed by the real KCL (3.x, then 2.x:
//! `tests/kcl/`, built by `cargo xtask integ`), which checkpoints each shard at a different
//! record (one inside an aggregate, one never) and keeps running; `import-kcl` is refused
//! while it runs; the KCL is stopped gracefully; `import-kcl --dry-run` shows the mapping;
//! `import-kcl` writes it; a second `import-kcl` writes nothing; a broker then delivers
//! exactly the records after the KCL's checkpoints: none skipped, none read again.
//!
//! `kcl_*_shards_split_after_the_kcl_stopped_are_read_from_their_first_record`: the same KCL
//! run, stopped; then the shard it checkpointed 250 records into is split, its children get
//! records, one child is split again and the grandchildren get records; the broker's
//! `import_kcl` at start and a broker at the default start position (`LATEST`) deliver the
//! records after the KCL's checkpoints and every record of every child and grandchild: none
//! skipped, none read again (before b8ee3f4 the grandchildren started at the tip).
//!
//! `multi_stream_rows_import_at_start_into_their_own_stream`: rows written with the KCL's
//! attribute names in multi-stream form (two streams, plus a 3.5 worker-metrics row) are
//! imported by the broker's `import_kcl` option at start, into the right stream only.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use kinesis_broker::lease::LeaseStore;
use kinesis_broker::{
    AwsKinesis, DynamoLeaseStore, KclImport, Published, Publisher, PutEntry, StartAt, TableSetup,
};
use kinesis_integ::*;
use kinesis_kcl_import::KclRow;
use serde_json::Value;

const SHARDS: usize = 4;
const PER_SHARD: usize = 600;
/// The shard whose records are KPL aggregates, and whose KCL checkpoint falls inside one.
const AGGREGATED: usize = 2;

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every shard's records in shard order: `(payload, sequence)`.
type ShardRecords = Vec<Vec<(String, kinesis_broker::SequenceNumber)>>;

/// Puts `PER_SHARD` records on each shard (plain, but KPL aggregates on `AGGREGATED`).
async fn publish(
    config: &aws_config::SdkConfig,
    stream: &str,
    shard_ids: &[String],
) -> ShardRecords {
    let mut records = Vec::new();
    for (i, id) in shard_ids.iter().enumerate() {
        records.push(
            put_on(
                config,
                stream,
                id,
                &format!("s{i}"),
                PER_SHARD,
                i == AGGREGATED,
            )
            .await,
        );
    }
    records
}

/// Puts `n` records on shard `id` (routed by its starting hash key), payloads `TAG-0000`..,
/// in KPL aggregates when `aggregated`; returns them in shard order.
async fn put_on(
    config: &aws_config::SdkConfig,
    stream: &str,
    id: &str,
    tag: &str,
    n: usize,
    aggregated: bool,
) -> Vec<(String, kinesis_broker::SequenceNumber)> {
    let client = aws_sdk_kinesis::Client::new(config);
    let start: u128 = shard_ids_of(&client, stream).await[id]
        .parse()
        .expect("starting hash key");
    let entries: Vec<PutEntry> = (0..n)
        .map(|j| PutEntry::new(format!("{tag}-{j:04}"), format!("k{tag}-{j}")).with_hash_key(start))
        .collect();
    let publisher = Publisher::new(AwsKinesis::new(config), stream);
    let publisher = if aggregated {
        publisher.aggregated_within(500)
    } else {
        publisher
    };
    let stored: Vec<Published> = publisher.put_all(entries).await.expect("publish");
    let mut shard: Vec<(String, kinesis_broker::SequenceNumber)> = stored
        .into_iter()
        .enumerate()
        .map(|(j, p)| {
            assert_eq!(p.shard, id, "routed by the explicit hash key");
            (format!("{tag}-{j:04}"), p.sequence)
        })
        .collect();
    shard.sort_by(|a, b| a.1.cmp(&b.1));
    shard
}

async fn shard_ids_of(client: &aws_sdk_kinesis::Client, stream: &str) -> BTreeMap<String, String> {
    shard_ids(client, stream)
        .await
        .iter()
        .map(|s| {
            let range = s.hash_key_range().expect("hash key range");
            (
                s.shard_id().to_owned(),
                range.starting_hash_key().to_owned(),
            )
        })
        .collect()
}

/// How many records of each shard the KCL processes: different per shard, inside an aggregate
/// on `AGGREGATED`, none on the last shard.
fn limits(records: &ShardRecords) -> Vec<usize> {
    let mut limits = vec![250, 300, 0, 0];
    let agg = &records[AGGREGATED];
    let n = (400..PER_SHARD)
        .find(|&n| {
            let (last, next) = (&agg[n - 1].1, &agg[n].1);
            last.subsequence().is_some_and(|s| s > 0) && last.number() == next.number()
        })
        .expect("a record inside an aggregate");
    limits[AGGREGATED] = n;
    limits
}

/// A stream of `SHARDS` shards of `PER_SHARD` records, partly consumed by the real KCL.
struct KclScenario {
    version: String,
    account: String,
    config: aws_config::SdkConfig,
    client: aws_sdk_kinesis::Client,
    stream: String,
    shard_ids: Vec<String>,
    records: ShardRecords,
    limits: Vec<usize>,
    /// The KCL application's (its lease table).
    kcl_table: String,
}

/// Publishes the stream and starts the KCL `version` on it; returns once every shard is
/// checkpointed at its limit, the KCL still running (`None`: the KCL cannot run here).
async fn kcl_consuming(version: &str) -> Option<(KclScenario, KclProcess)> {
    let (version, dir) = kcl_consumer(version)?;
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("kcl-import");
    create_stream(&client, &stream, SHARDS as i32).await;
    let shard_ids: Vec<String> = shard_ids_of(&client, &stream).await.into_keys().collect();
    let records = publish(&config, &stream, &shard_ids).await;
    let limits = limits(&records);
    let kcl_table = unique_name("kcl-app");
    let named: Vec<(String, usize)> = shard_ids
        .iter()
        .cloned()
        .zip(limits.iter().copied())
        .collect();
    let mut kcl = KclProcess::start(
        &dir,
        &KclRun {
            account: &account,
            stream: &stream,
            app: &kcl_table,
            limits: &named,
            failover_ms: 3_000,
        },
    );
    let lines = kcl
        .wait_for("KCL ALL_CHECKPOINTED", Duration::from_secs(240))
        .await;
    eprintln!("KCL {version}: {lines:?}");
    let scenario = KclScenario {
        version,
        account,
        config,
        client,
        stream,
        shard_ids,
        records,
        limits,
        kcl_table,
    };
    Some((scenario, kcl))
}

impl KclScenario {
    /// Stops the KCL gracefully and checks that it processed exactly the first `limit`
    /// records of each shard, in order; returns what it processed.
    async fn stop(&self, kcl: KclProcess) -> Vec<(String, String, u64, String)> {
        let processed = kcl.stop(Duration::from_secs(120)).await;
        for (i, id) in self.shard_ids.iter().enumerate() {
            let by_kcl: Vec<&str> = processed
                .iter()
                .filter(|p| &p.0 == id)
                .map(|p| p.3.as_str())
                .collect();
            let first: Vec<&str> = self.records[i][..self.limits[i]]
                .iter()
                .map(|r| r.0.as_str())
                .collect();
            assert_eq!(by_kcl, first, "KCL {} on {id}", self.version);
        }
        processed
    }

    /// The records after the KCL's checkpoints, `(shard, payload)`.
    fn after_checkpoints(&self) -> BTreeSet<(String, String)> {
        let mut expected = BTreeSet::new();
        for (i, shard) in self.records.iter().enumerate() {
            expected.extend(
                shard[self.limits[i]..]
                    .iter()
                    .map(|r| (self.shard_ids[i].clone(), r.0.clone())),
            );
        }
        expected
    }
}

async fn kcl_checkpoints_import_exactly(version: &str) {
    let Some((scenario, kcl)) = kcl_consuming(version).await else {
        return;
    };
    let KclScenario {
        version,
        account,
        config,
        stream,
        shard_ids,
        records,
        limits,
        kcl_table,
        ..
    } = &scenario;
    let table = unique_name("kcl-leases");

    // While the KCL runs, an import is refused and writes nothing.
    let import = [
        "import-kcl",
        "--kcl-table",
        kcl_table,
        "--table",
        &table,
        "--stream",
        stream,
        "--failover-time",
        "3s",
    ];
    let out = run_cli(account, &import).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refused while the KCL runs\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("KCL workers still run"), "{stderr}");
    assert!(
        stderr.contains(kcl_table.as_str()),
        "names the KCL table: {stderr}"
    );
    let ours = DynamoLeaseStore::new(config, &table);
    assert!(
        ours.list(stream).await.expect("list").is_empty(),
        "nothing written"
    );

    let processed = scenario.stop(kcl).await;

    let mut dry = import.to_vec();
    dry.push("--dry-run");
    let out = run_cli(account, &dry).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    eprintln!(
        "kinesis-broker {} after KCL {version}:\n{stdout}{stderr}",
        dry.join(" ")
    );
    assert!(
        ours.list(stream).await.unwrap_or_default().is_empty(),
        "a dry run writes nothing"
    );

    let mut json = import.to_vec();
    json.push("--json");
    let out = run_cli(account, &json).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines: Vec<Value> = serde_json::from_str(&stdout).expect("json");
    assert_eq!(lines.len(), SHARDS);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["shard"], shard_ids[i].as_str());
        assert_eq!(line["result"], "created", "{line}");
        let expected = match limits[i] {
            0 => "TRIM_HORIZON".to_owned(),
            n => {
                let seq = &records[i][n - 1].1;
                format!("{}/{}", seq.number(), seq.subsequence().unwrap_or(0))
            }
        };
        assert_eq!(line["kcl_checkpoint"], expected.as_str(), "{line}");
        assert_eq!(line["checkpoint"], expected.as_str(), "{line}");
    }
    assert!(
        lines[AGGREGATED]["kcl_checkpoint"]
            .as_str()
            .is_some_and(|c| !c.ends_with("/0")),
        "the checkpoint inside an aggregate: {}",
        lines[AGGREGATED]
    );

    let out = run_cli(account, &json).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let again: Vec<Value> = serde_json::from_str(&stdout).expect("json");
    assert!(again.iter().all(|l| l["result"] == "unchanged"), "{stdout}");
    assert!(stderr.contains("nothing to write"), "{stderr}");

    // A broker delivers exactly what the KCL had not processed.
    let log = Log::default();
    let broker = logging_broker(
        config,
        Arc::new(ours.clone()),
        "b1",
        stream,
        StartAt::Latest,
        &log,
    );
    let running = broker.start().await.expect("start");
    let expected = scenario.after_checkpoints();
    wait_for_count(&log, expected.len(), Duration::from_secs(90)).await;
    running.shutdown().await;
    let (delivered, distinct) = delivered_pairs(&log);
    assert_eq!(
        delivered.len(),
        distinct.len(),
        "0 re-read: no record delivered twice"
    );
    let skipped = expected.difference(&distinct).count();
    let reread = distinct.difference(&expected).count();
    eprintln!(
        "KCL {version}: the KCL processed {}, the broker delivered {} (expected {}): {skipped} skipped, {reread} re-read",
        processed.len(),
        delivered.len(),
        expected.len()
    );
    assert_eq!((skipped, reread), (0, 0));
    assert_eq!(processed.len() + delivered.len(), SHARDS * PER_SHARD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_3x_checkpoints_import_exactly() {
    kcl_checkpoints_import_exactly("3.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_2x_checkpoints_import_exactly() {
    kcl_checkpoints_import_exactly("2.").await;
}

/// Per-shard records of a reshard after the KCL stopped: put on each child and grandchild.
const PER_CHILD: usize = 100;

/// Splits `shard` of `stream` at the middle of its hash range and waits until the stream is
/// ACTIVE again with both children listed; returns the children, lower hash range first.
async fn split(client: &aws_sdk_kinesis::Client, stream: &str, shard: &str) -> [String; 2] {
    let listed = shard_ids(client, stream).await;
    let range = listed
        .iter()
        .find(|s| s.shard_id() == shard)
        .and_then(|s| s.hash_key_range())
        .expect("the shard to split");
    let (lo, hi): (u128, u128) = (
        range.starting_hash_key().parse().expect("hash key"),
        range.ending_hash_key().parse().expect("hash key"),
    );
    client
        .split_shard()
        .stream_name(stream)
        .shard_to_split(shard)
        .new_starting_hash_key((lo + (hi - lo) / 2 + 1).to_string())
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "split {shard}: {}",
                aws_sdk_kinesis::error::DisplayErrorContext(e)
            )
        });
    for _ in 0..200 {
        wait_active(client, stream).await;
        let mut children: Vec<(u128, String)> = shard_ids(client, stream)
            .await
            .iter()
            .filter(|s| s.parent_shard_id() == Some(shard))
            .map(|s| {
                let start = s.hash_key_range().expect("range").starting_hash_key();
                (start.parse().expect("hash key"), s.shard_id().to_owned())
            })
            .collect();
        if children.len() == 2 {
            children.sort();
            return [children[0].1.clone(), children[1].1.clone()];
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the children of {shard} were never listed");
}

/// A broker on `store` importing the KCL's `kcl_table` at start, at the subscription's
/// default start position, logging what it handles (as [`logging_broker`] does).
fn importing_broker(
    config: &aws_config::SdkConfig,
    store: DynamoLeaseStore,
    kcl_table: &str,
    stream: &str,
    log: &Log,
) -> kinesis_broker::Broker {
    let mut broker = kinesis_broker::Broker::builder()
        .sdk_config(config)
        .dynamo_lease_table(store, TableSetup::CreateIfMissing)
        .owner_id("b1")
        .poll_interval(Duration::from_millis(200))
        .shard_sync_interval(Duration::from_secs(2))
        .build()
        .expect("broker");
    broker
        .subscribe(stream)
        .import_kcl(KclImport::dynamo(config, kcl_table).failover_time(Duration::from_secs(3)))
        .workers(4)
        .by_key()
        .handle(logging_handler(log, "b1"))
        .expect("subscribe");
    broker
}

/// The KCL stops inside shard 0; then shard 0 is split, its children get records, one child
/// is split again and the grandchildren get records. The broker's `import_kcl` at start and a
/// broker at the default start position (`LATEST`) then deliver exactly the rest: the records
/// after the KCL's checkpoints and every record of every child and grandchild.
async fn kcl_import_reads_shards_split_after_the_kcl_stopped(version: &str) {
    let started = std::time::Instant::now();
    let Some((scenario, kcl)) = kcl_consuming(version).await else {
        return;
    };
    let processed = scenario.stop(kcl).await;
    let KclScenario {
        version,
        config,
        client,
        stream,
        shard_ids,
        limits,
        kcl_table,
        ..
    } = &scenario;
    assert!(
        limits[0] > 0 && limits[0] < PER_SHARD,
        "the KCL stopped inside shard 0"
    );

    let mut expected = scenario.after_checkpoints();
    let mut put = |shard: &str, records: Vec<(String, kinesis_broker::SequenceNumber)>| {
        expected.extend(records.into_iter().map(|r| (shard.to_owned(), r.0)));
    };
    let children = split(client, stream, &shard_ids[0]).await;
    for (i, child) in children.iter().enumerate() {
        put(
            child,
            put_on(config, stream, child, &format!("c{i}"), PER_CHILD, false).await,
        );
    }
    let grandchildren = split(client, stream, &children[0]).await;
    for (i, grandchild) in grandchildren.iter().enumerate() {
        let tag = format!("g{i}");
        put(
            grandchild,
            put_on(config, stream, grandchild, &tag, PER_CHILD, false).await,
        );
    }
    eprintln!(
        "KCL {version}: after it stopped, {} split into {children:?}, {} into {grandchildren:?}",
        shard_ids[0], children[0]
    );

    let table = unique_name("kcl-split-leases");
    let store = DynamoLeaseStore::new(config, &table);
    let log = Log::default();
    let running = importing_broker(config, store.clone(), kcl_table, stream, &log)
        .start()
        .await
        .expect("start with the import");
    // Until every record expected was handled (a record handled twice counts once), or a
    // bound: what is missing is reported below, shard by shard.
    let deadline = tokio::time::Instant::now() + patience(Duration::from_secs(90));
    let all_handled = || {
        let log = log.lock().expect("log");
        let handled: BTreeSet<(&str, &str)> = log
            .iter()
            .map(|(_, shard, _, payload)| (shard.as_str(), payload.as_str()))
            .collect();
        expected
            .iter()
            .all(|(shard, payload)| handled.contains(&(shard.as_str(), payload.as_str())))
    };
    while !all_handled() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await;
    let (delivered, distinct) = delivered_pairs(&log);
    let skipped = per_shard(expected.difference(&distinct));
    let reread = per_shard(distinct.difference(&expected));
    let (skipped_n, reread_n): (usize, usize) = (skipped.values().sum(), reread.values().sum());
    let twice = delivered.len() - distinct.len();
    eprintln!(
        "KCL {version}: the KCL processed {}, the broker delivered {} (expected {}): \
         {skipped_n} skipped {skipped:?}, {reread_n} re-read {reread:?}, {twice} twice; {:.1} s",
        processed.len(),
        delivered.len(),
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(skipped, BTreeMap::new(), "0 skipped");
    assert_eq!(
        reread,
        BTreeMap::new(),
        "0 re-read: nothing at or before a checkpoint"
    );
    assert_eq!(twice, 0, "0 re-read: no record delivered twice");
    assert_eq!(
        processed.len() + delivered.len(),
        SHARDS * PER_SHARD + 4 * PER_CHILD
    );
    // The split shards were read to their end.
    let rows = store.list(stream).await.expect("list");
    for parent in [&shard_ids[0], &children[0]] {
        let row = rows.iter().find(|r| r.key.shard() == parent.as_str());
        assert!(
            row.is_some_and(|r| r.is_finished()),
            "{parent} finished: {row:?}"
        );
    }
}

/// How many of `records` each shard has.
fn per_shard<'a>(records: impl Iterator<Item = &'a (String, String)>) -> BTreeMap<&'a str, usize> {
    let mut counts = BTreeMap::new();
    for (shard, _) in records {
        *counts.entry(shard.as_str()).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_3x_shards_split_after_the_kcl_stopped_are_read_from_their_first_record() {
    kcl_import_reads_shards_split_after_the_kcl_stopped("3.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_2x_shards_split_after_the_kcl_stopped_are_read_from_their_first_record() {
    kcl_import_reads_shards_split_after_the_kcl_stopped("2.").await;
}

async fn create_kcl_table(config: &aws_config::SdkConfig, table: &str, rows: &[KclRow]) {
    let dynamo = aws_sdk_dynamodb::Client::new(config);
    dynamo
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .send()
        .await
        .expect("create the KCL table");
    for row in rows {
        dynamo
            .put_item()
            .table_name(table)
            .set_item(Some(row.to_item()))
            .send()
            .await
            .expect("put a KCL row");
    }
}

#[tokio::test]
async fn multi_stream_rows_import_at_start_into_their_own_stream() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let (orders, payments) = (unique_name("orders"), unique_name("payments"));
    create_stream(&client, &orders, 2).await;
    create_stream(&client, &payments, 1).await;
    let ids: Vec<String> = shard_ids_of(&client, &orders).await.into_keys().collect();
    let publisher = Publisher::new(AwsKinesis::new(&config), &orders);
    let entries = (0..200).map(|i| PutEntry::new(format!("o-{i:03}"), format!("key-{i}")));
    let stored = publisher.put_all(entries.collect()).await.expect("publish");
    // The KCL processed the first 40 records of each shard of `orders`.
    let mut per_shard: BTreeMap<String, Vec<(String, kinesis_broker::SequenceNumber)>> =
        BTreeMap::new();
    for (i, p) in stored.into_iter().enumerate() {
        per_shard
            .entry(p.shard)
            .or_default()
            .push((format!("o-{i:03}"), p.sequence));
    }
    let mut rows = Vec::new();
    let mut expected = BTreeSet::new();
    for shard in &ids {
        let records = per_shard.get_mut(shard).expect("records on every shard");
        records.sort_by(|a, b| a.1.cmp(&b.1));
        let last = &records[39].1;
        rows.push(KclRow {
            owner: Some("kcl-worker-1".into()),
            checkpoint: Some(last.number().to_owned()),
            checkpoint_subsequence: 0,
            stream_identifier: Some(format!("{account}:{orders}:1700000000")),
            shard_id: Some(shard.clone()),
            entity_type: Some("LEASE".into()),
            ..KclRow::lease(format!("{account}:{orders}:1700000000:{shard}"), 12)
        });
        expected.extend(records[40..].iter().map(|r| r.0.clone()));
    }
    // Another stream's lease (same shard id) and a worker-metrics row of KCL 3.5.
    rows.push(KclRow {
        checkpoint: Some("SHARD_END".into()),
        ..KclRow::lease(format!("{account}:{payments}:1700000001:{}", ids[0]), 3)
    });
    rows.push(KclRow {
        entity_type: Some("WORKER_METRIC_STATS".into()),
        ..KclRow::lease("kcl-worker-1", 0)
    });
    let kcl_table = unique_name("kcl-multi");
    create_kcl_table(&config, &kcl_table, &rows).await;

    let table = unique_name("kcl-multi-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    let log = Log::default();
    let mut broker = kinesis_broker::Broker::builder()
        .sdk_config(&config)
        .dynamo_lease_table(store.clone(), TableSetup::CreateIfMissing)
        .owner_id("b1")
        .poll_interval(Duration::from_millis(200))
        .build()
        .expect("broker");
    broker
        .subscribe(&orders)
        .start_at(StartAt::Latest)
        .import_kcl(KclImport::dynamo(&config, &kcl_table).failover_time(Duration::from_secs(1)))
        .handle(logging_handler(&log, ""))
        .expect("subscribe");
    let running = broker.start().await.expect("start with the import");
    wait_for_count(&log, expected.len(), Duration::from_secs(60)).await;
    running.shutdown().await;
    let delivered: Vec<String> = log
        .lock()
        .expect("log")
        .iter()
        .map(|e| e.3.clone())
        .collect();
    let distinct: BTreeSet<String> = delivered.iter().cloned().collect();
    assert_eq!(delivered.len(), distinct.len(), "none read twice");
    assert_eq!(
        distinct, expected,
        "exactly the records after the KCL's checkpoints"
    );
    assert!(
        store.list(&payments).await.expect("list").is_empty(),
        "the other stream's lease was not imported into `{orders}`'s rows nor its own"
    );

    // A single-stream table of `orders` imported into `payments`: the shard ids match, the
    // checkpoints do not, and Kinesis says so (kinesis-local looks a sequence number up only
    // in a shard that holds records: `payments` gets one).
    Publisher::new(AwsKinesis::new(&config), &payments)
        .put("key", "p-0")
        .await
        .expect("publish");
    let single = unique_name("kcl-single");
    let row = KclRow {
        checkpoint: Some(per_shard[&ids[0]][10].1.number().to_owned()),
        ..KclRow::lease(ids[0].clone(), 4)
    };
    create_kcl_table(&config, &single, &[row]).await;
    let kinesis = AwsKinesis::new(&config);
    let target = kinesis_kcl_import::Target {
        store: &store,
        table: &table,
        kinesis: &kinesis,
    };
    match KclImport::dynamo(&config, &single)
        .plan(target, &payments)
        .await
    {
        Err(kinesis_kcl_import::ImportError::Unmappable { shard, reason, .. }) => {
            assert_eq!(shard, ids[0]);
            assert!(
                reason.contains("does not know the KCL's checkpoint"),
                "{reason}"
            );
        }
        other => panic!("a table of another stream: {other:?}"),
    }
}
