//! Metrics (feature `metrics`): after a scripted run on a `MemoryStream`, every metric has the
//! value the run implies. One test in this binary: the recorder is process-wide.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    testing::MemoryStream, Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, Publisher,
    PutEntry, RetryPolicy, StartAt,
};
use kinesis_lease_core::testkit::Outage;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A snapshot: (name, sorted labels) -> value.
type Values = HashMap<(String, Vec<(String, String)>), f64>;

/// (name, sorted labels) -> value: counters and gauges as numbers, histograms as sample
/// counts. Counters and histograms count since the previous snapshot.
fn read(snapshotter: &Snapshotter) -> Values {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(samples) => samples.len() as f64,
            };
            ((key.name().to_owned(), labels), value)
        })
        .collect()
}

fn sum(m: &Values, name: &str) -> f64 {
    m.iter()
        .filter(|((n, _), _)| n == name)
        .map(|(_, v)| *v)
        .sum()
}

#[tokio::test(start_paused = true)]
async fn every_metric_has_the_value_of_a_scripted_run() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 2).unwrap();
    // 200 records of 10 bytes; record 7 always fails (2 attempts, then the dead letter).
    let entries = (0..200)
        .map(|i| PutEntry::new(format!("order-{i:04}"), format!("key-{}", i % 13)))
        .collect();
    Publisher::new(kinesis.clone(), "orders")
        .put_all(entries)
        .await
        .unwrap();
    let table = MemoryLeaseTable::new();
    let dead = Arc::new(Mutex::new(0));
    let d = dead.clone();
    let mut a = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("a")
        .build()
        .unwrap();
    a.subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .retry(
            RetryPolicy::default()
                .max_attempts(2)
                .then_dead_letter(move |_delivery, _error| {
                    let d = d.clone();
                    async move {
                        *d.lock().unwrap() += 1;
                        Ok::<(), std::io::Error>(())
                    }
                }),
        )
        .handle(|d: Delivery| async move {
            if d.payload().as_ref() == b"order-0007" {
                return Err(std::io::Error::other("order 7 is bad"));
            }
            Ok(())
        })
        .unwrap();
    let a = a.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let m = read(&snapshotter);
    assert_eq!(sum(&m, "RecordsProcessed"), 200.0, "{m:?}");
    assert_eq!(sum(&m, "DataBytesProcessed"), 2_000.0);
    assert_eq!(
        sum(&m, "HandlerRetries"),
        2.0,
        "two failed attempts of order 7"
    );
    assert_eq!(sum(&m, "DeadLetters"), 1.0);
    assert_eq!(*dead.lock().unwrap(), 1);
    assert_eq!(sum(&m, "LeasesTaken"), 2.0);
    let stream = vec![("stream".to_owned(), "orders".to_owned())];
    assert_eq!(m[&("LeasesHeld".to_owned(), stream.clone())], 2.0);
    // Caught up on both shards.
    let behind: Vec<_> = m
        .iter()
        .filter(|((n, _), _)| n == "MillisBehindLatest")
        .collect();
    assert_eq!(behind.len(), 2, "one gauge per shard: {behind:?}");
    assert!(behind.iter().all(|(_, v)| **v == 0.0));
    // Renewals every 3 s: a few in 10 s, per shard.
    assert!(sum(&m, "RenewalLatency") >= 4.0, "{m:?}");
    // Handler calls that finish at once are sampled (one in 64): a few samples of 202 calls,
    // not one each.
    assert!(sum(&m, "HandlerDuration") < 40.0, "{m:?}");

    // A second instance asks for its share: one shard is handed over.
    let mut b = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("b")
        .build()
        .unwrap();
    b.subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .unwrap();
    let b = b.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Counters since the first snapshot.
    let m = read(&snapshotter);
    assert_eq!(sum(&m, "HandOvers"), 1.0, "{m:?}");
    assert_eq!(sum(&m, "LeasesTaken"), 1.0, "b took the shard handed over");
    assert_eq!(sum(&m, "LeasesLost"), 0.0);
    assert_eq!(sum(&m, "RecordsProcessed"), 0.0, "nothing handled twice");
    assert_eq!(m[&("LeasesHeld".to_owned(), stream.clone())], 1.0);

    // b leaves gracefully; a takes its shard back.
    b.shutdown().await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let m = read(&snapshotter);
    assert_eq!(m[&("LeasesHeld".to_owned(), stream)], 2.0, "{m:?}");
    assert_eq!(sum(&m, "LeasesTaken"), 1.0);
    assert_eq!(
        sum(&m, "LeasesLost"),
        0.0,
        "a graceful release is not a loss"
    );
    a.shutdown().await;
    let m = read(&snapshotter);
    assert_eq!(sum(&m, "LeasesLost"), 0.0);
    assert_eq!(sum(&m, "RecordsProcessed"), 0.0, "nothing handled twice");

    // A lease-table outage longer than lease - renew: c loses its lease, counted once on its
    // stream, and takes it back once the table answers.
    kinesis.create_stream("lost", 1).unwrap();
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(&table)));
    let mut c = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id("c")
        .build()
        .unwrap();
    c.subscribe("lost")
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .unwrap();
    let c = c.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lost = vec![("stream".to_owned(), "lost".to_owned())];
    let m = read(&snapshotter);
    assert_eq!(m[&("LeasesHeld".to_owned(), lost.clone())], 1.0, "{m:?}");
    switch.cut();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let m = read(&snapshotter);
    assert_eq!(m[&("LeasesLost".to_owned(), lost.clone())], 1.0, "{m:?}");
    assert_eq!(m[&("LeasesHeld".to_owned(), lost.clone())], 0.0, "{m:?}");
    switch.restore();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let m = read(&snapshotter);
    assert_eq!(sum(&m, "LeasesLost"), 0.0, "{m:?}");
    assert_eq!(m[&("LeasesTaken".to_owned(), lost.clone())], 1.0, "{m:?}");
    assert_eq!(m[&("LeasesHeld".to_owned(), lost)], 1.0, "{m:?}");
    c.shutdown().await;
}
