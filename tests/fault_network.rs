//! Network faults between the brokers and the emulators, through a fault-injecting proxy:
//! latency spikes, cut connections, 20 s outages of DynamoDB and of Kinesis, and 30 %
//! throttling of GetRecords and UpdateItem.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kinesis_broker::{Broker, Delivery, DynamoLeaseStore, RunningBroker, StartAt};
use kinesis_integ::*;

fn broker(
    kinesis: &aws_config::SdkConfig,
    dynamo: &aws_config::SdkConfig,
    table: &str,
    stream: &str,
    log: &Log,
    records_per_call: usize,
) -> Broker {
    let mut broker = Broker::builder()
        .sdk_config(kinesis)
        .lease_store(DynamoLeaseStore::new(dynamo, table))
        .owner_id("a")
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .take_interval(Duration::from_millis(500))
        .list_interval(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let l = log.clone();
    broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .records_per_call(records_per_call)
        .workers(4)
        .by_key()
        .handle(move |d: Delivery| {
            let l = l.clone();
            async move {
                l.lock().unwrap().push((
                    "a".to_owned(),
                    d.shard().to_owned(),
                    d.partition_key().to_owned(),
                    String::from_utf8_lossy(d.payload()).into_owned(),
                ));
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    broker
}

fn held(running: &RunningBroker, stream: &str) -> usize {
    running.stats().shards(stream).len()
}

async fn until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let limit = patience(limit);
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_cuts_and_outages_lose_nothing() {
    let account = unique_account();
    let (_, client) = kinesis_client(&account).await;
    let stream = unique_name("faults");
    create_stream(&client, &stream, 4).await;
    let table = unique_name("fault-leases");
    DynamoLeaseStore::new(&sdk_config(Service::Dynamodb).await, &table)
        .ensure_table()
        .await
        .unwrap();
    let kproxy = FaultProxy::start(&endpoint(Service::Kinesis)).await;
    let dproxy = FaultProxy::start(&endpoint(Service::Dynamodb)).await;
    let kconf = sdk_config_via(&account, kproxy.endpoint()).await;
    let dconf = sdk_config_via(&account, dproxy.endpoint()).await;
    let log = Log::default();
    let running = broker(&kconf, &dconf, &table, &stream, &log, 1_000)
        .start()
        .await
        .expect("start");

    // A producer straight to kinesis-local, 50 records every 200 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (client, stream, stop, produced) = (
            client.clone(),
            stream.clone(),
            stop.clone(),
            produced.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let from = produced.load(Ordering::SeqCst);
                put_records(&client, &stream, 20, from, 50).await;
                produced.fetch_add(50, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    until("all shards held", Duration::from_secs(15), || {
        held(&running, &stream) == 4
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Latency spikes: 400 ms on every call for 5 s.
    kproxy.set_latency(Duration::from_millis(400));
    dproxy.set_latency(Duration::from_millis(400));
    tokio::time::sleep(Duration::from_secs(5)).await;
    kproxy.set_latency(Duration::ZERO);
    dproxy.set_latency(Duration::ZERO);
    assert_eq!(held(&running, &stream), 4, "latency alone loses no lease");

    // Cut every open connection twice a second for 5 s.
    for _ in 0..10 {
        kproxy.cut_connections();
        dproxy.cut_connections();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // DynamoDB down for 20 s: renewals fail past the lease, readers stop without checkpoint.
    let before_outage = distinct(&log);
    dproxy.set_down(true);
    let stopped = until(
        "readers stop during the DynamoDB outage",
        Duration::from_secs(10),
        || held(&running, &stream) == 0,
    )
    .await;
    eprintln!(
        "DynamoDB outage: readers stopped {stopped:.1?} after it began (lease 4 s, renew 1 s)"
    );
    tokio::time::sleep(Duration::from_secs(20) - stopped).await;
    dproxy.set_down(false);
    let back = until(
        "leases taken again after the outage",
        Duration::from_secs(20),
        || held(&running, &stream) == 4,
    )
    .await;
    eprintln!("DynamoDB back: all shards held again after {back:.1?}");

    // Kinesis down for 20 s: leases stay, readers back off and catch up.
    kproxy.set_down(true);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        held(&running, &stream),
        4,
        "a Kinesis outage does not cost the leases"
    );
    kproxy.set_down(false);

    stop.store(true, Ordering::SeqCst);
    producer.await.unwrap();
    let total = produced.load(Ordering::SeqCst);
    wait_for_distinct(&log, total, Duration::from_secs(60)).await;
    running.shutdown().await;
    let handled = log.lock().unwrap().len();
    eprintln!(
        "network faults: records {total}, lost 0, duplicates {}, handled before the DynamoDB outage {before_outage}; proxy counts kinesis {:?} dynamodb {:?}",
        handled - total,
        kproxy.counts(),
        dproxy.counts()
    );
    assert!(
        kproxy.counts().0 > 0 && dproxy.counts().0 > 0,
        "traffic went through the proxies"
    );
}

/// Drains 4,000 records twice: through clean proxies, then with 30 % of GetRecords and
/// UpdateItem calls throttled. Nothing is lost; prints the throughput kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_percent_throttling_loses_nothing() {
    let account = unique_account();
    let (_, client) = kinesis_client(&account).await;
    let stream = unique_name("throttled");
    create_stream(&client, &stream, 4).await;
    const RECORDS: usize = 4_000;
    put_records(&client, &stream, 50, 0, RECORDS).await;
    let kproxy = FaultProxy::start(&endpoint(Service::Kinesis)).await;
    let dproxy = FaultProxy::start(&endpoint(Service::Dynamodb)).await;
    let kconf = sdk_config_via(&account, kproxy.endpoint()).await;
    let dconf = sdk_config_via(&account, dproxy.endpoint()).await;
    let mut times = Vec::new();
    for throttled in [false, true] {
        if throttled {
            kproxy.throttle("GetRecords", 0.3);
            dproxy.throttle("UpdateItem", 0.3);
        }
        let table = unique_name("throttle-leases");
        DynamoLeaseStore::new(&sdk_config(Service::Dynamodb).await, &table)
            .ensure_table()
            .await
            .unwrap();
        let log = Log::default();
        let started = Instant::now();
        // Small reads, so that there are enough calls to throttle.
        let running = broker(&kconf, &dconf, &table, &stream, &log, 100)
            .start()
            .await
            .expect("start");
        wait_for_distinct(&log, RECORDS, Duration::from_secs(120)).await;
        times.push(started.elapsed());
        running.shutdown().await;
        assert_eq!(distinct(&log), RECORDS);
    }
    let kept = times[0].as_secs_f64() / times[1].as_secs_f64();
    eprintln!(
        "throttling 30%: clean {:.2?}, throttled {:.2?}: throughput kept {:.0}%; throttled calls kinesis {} dynamodb {}",
        times[0],
        times[1],
        kept * 100.0,
        kproxy.counts().1,
        dproxy.counts().1
    );
    assert!(
        kproxy.counts().1 > 0 && dproxy.counts().1 > 0,
        "calls were throttled"
    );
}
