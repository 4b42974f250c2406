//! Enhanced fan-out against kinesis-local and moto: brokers read by SubscribeToShard from
//! `TRIM_HORIZON` and from the default `LATEST`, a killed fan-out process is taken over, and a
//! graceful hand-over delivers nothing twice. kinesis-local never signals shard end on this
//! path (shard end by fan-out is covered on `MemoryStream`: crates/fleet/tests/
//! reader_fan_out.rs) and refuses a second subscription to a shard while one is live.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinesis_broker::{lease::LeaseStore, DynamoLeaseStore, StartAt};
use kinesis_integ::*;

const CONSUMER: &str = "integ-fan-out";

async fn consumer_status(client: &aws_sdk_kinesis::Client, stream: &str) -> String {
    let arn = client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .expect("stream summary")
        .stream_description_summary()
        .map(|s| s.stream_arn().to_owned())
        .expect("stream arn");
    client
        .describe_stream_consumer()
        .stream_arn(arn)
        .consumer_name(CONSUMER)
        .send()
        .await
        .expect("the consumer is registered")
        .consumer_description()
        .map(|c| c.consumer_status().as_str().to_owned())
        .unwrap_or_default()
}

async fn wait_holding(broker: &kinesis_broker::RunningBroker, stream: &str, n: usize) {
    let started = Instant::now();
    while broker.stats().shards(stream).len() < n {
        assert!(
            started.elapsed() < patience(Duration::from_secs(30)),
            "not holding {n} shards"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn fan_out_reads_from_trim_horizon_and_from_latest() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let table = unique_name("fan-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let store: Arc<dyn LeaseStore> = Arc::new(store);

    // From TRIM_HORIZON: what was there before, then what comes after.
    let stream = unique_name("fan-horizon");
    create_stream(&client, &stream, 2).await;
    put_records(&client, &stream, 16, 0, 300).await;
    let log = Log::default();
    let broker = logging_broker_with(
        &config,
        store.clone(),
        "a",
        &stream,
        StartAt::TrimHorizon,
        &log,
        Some(CONSUMER),
    )
    .start()
    .await
    .expect("start");
    wait_for_count(&log, 300, Duration::from_secs(60)).await;
    put_records(&client, &stream, 16, 300, 300).await;
    wait_for_count(&log, 600, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_exactly_once_in_key_order(&log, 600);
    assert_eq!(consumer_status(&client, &stream).await, "ACTIVE");
    broker.shutdown().await;

    // From the default start, LATEST: everything put once every shard's reader has read.
    let stream = unique_name("fan-latest");
    create_stream(&client, &stream, 2).await;
    put_records(&client, &stream, 16, 10_000, 50).await;
    let log = Log::default();
    let mut broker = kinesis_broker::Broker::builder()
        .sdk_config(&config)
        .lease_store_arc(store.clone())
        .owner_id("b")
        .build()
        .expect("broker");
    broker
        .subscribe(&stream)
        .fan_out(CONSUMER)
        .workers(4)
        .by_key()
        .handle(logging_handler(&log, "b"))
        .expect("subscribe");
    let broker = broker.start().await.expect("start");
    // Held is not open: at LATEST, records put between a take and the reader's first read are
    // before the subscription's beginning (seen under load: 125 of 400 never delivered).
    wait_reading(&broker, &stream, 2, Duration::from_secs(30)).await;
    put_records(&client, &stream, 16, 0, 400).await;
    wait_for_count(&log, 400, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The records put before the subscription began are not read at LATEST, except those
    // within its 30 s of slack: these 50 were put seconds before it.
    let after: Log = Log::default();
    after.lock().unwrap().extend(
        log.lock()
            .unwrap()
            .iter()
            .filter(|(_, _, _, p)| p.rsplit('#').next().unwrap().parse::<usize>().unwrap() < 10_000)
            .cloned(),
    );
    assert_exactly_once_in_key_order(&after, 400);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_graceful_fan_out_hand_over_delivers_nothing_twice() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("fan-handover");
    create_stream(&client, &stream, 4).await;
    let table = unique_name("fan-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let log = Log::default();
    let a = logging_broker_with(
        &config,
        Arc::new(store),
        "a",
        &stream,
        StartAt::TrimHorizon,
        &log,
        Some(CONSUMER),
    )
    .start()
    .await
    .expect("start a");
    put_records(&client, &stream, 16, 0, 400).await;
    wait_for_count(&log, 400, Duration::from_secs(60)).await;
    let b = logging_broker_with(
        &config,
        Arc::new(DynamoLeaseStore::new(&config, &table)),
        "b",
        &stream,
        StartAt::TrimHorizon,
        &log,
        Some(CONSUMER),
    )
    .start()
    .await
    .expect("start b");
    put_records(&client, &stream, 16, 400, 200).await;
    let report = a.shutdown().await;
    assert!(report.handlers_finished);
    wait_holding(&b, &stream, 4).await;
    put_records(&client, &stream, 16, 600, 200).await;
    wait_for_count(&log, 800, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_exactly_once_in_key_order(&log, 800);
    b.shutdown().await;
}

/// Kills every child still running when the test ends, passed or not.
struct Reaper(Vec<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn handled(path: &std::path::Path) -> HashSet<usize> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit('#').next()?.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_fan_out_process_is_taken_over_and_nothing_is_lost() {
    const RECORDS: usize = 2_000;
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("fan-crash");
    create_stream(&client, &stream, 4).await;
    let table = unique_name("fan-crash-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let dir = std::env::temp_dir().join(unique_name("kinesis-fan-crash"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut children = Reaper(Vec::new());
    for owner in ["p0", "p1"] {
        children.0.push(
            Command::new(env!("CARGO_BIN_EXE_crash-broker"))
                .args([
                    &account,
                    &table,
                    &stream,
                    owner,
                    dir.join(owner).to_str().unwrap(),
                    CONSUMER,
                ])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn broker process"),
        );
    }
    // Both hold shards.
    let started = Instant::now();
    loop {
        let rows = store.list(&stream).await.unwrap();
        let owners: HashSet<_> = rows.iter().filter_map(|r| r.owner.clone()).collect();
        if owners.len() == 2 {
            break;
        }
        assert!(
            started.elapsed() < patience(Duration::from_secs(60)),
            "not shared: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    put_records(&client, &stream, 20, 0, RECORDS / 2).await;
    while handled(&dir.join("p0")).len() + handled(&dir.join("p1")).len() < RECORDS / 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut victim = children.0.remove(1);
    victim.kill().expect("SIGKILL");
    victim.wait().unwrap();
    let killed = Instant::now();
    put_records(&client, &stream, 20, RECORDS / 2, RECORDS / 2).await;
    let takeover = loop {
        let rows = store.list(&stream).await.unwrap();
        if rows.iter().all(|r| r.owner.as_deref() == Some("p0")) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < patience(Duration::from_secs(40)),
            "no takeover: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("p0 held every shard {takeover:.2?} after the SIGKILL of p1");
    let deadline = Instant::now() + patience(Duration::from_secs(90));
    loop {
        let all: HashSet<usize> = handled(&dir.join("p0"))
            .union(&handled(&dir.join("p1")))
            .copied()
            .collect();
        if all.len() == RECORDS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {RECORDS} handled after the takeover",
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
