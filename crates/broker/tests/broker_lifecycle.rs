//! The facade: subscriptions, start-up checks, stats, streams of deliveries and graceful
//! hand-over, on a MemoryStream with paused time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    testing::MemoryStream, BatchFailure, Broker, BrokerError, Delivery, MemoryLeaseStore,
    MemoryLeaseTable, Publisher, PutEntry, StartAt,
};
use tokio_stream::StreamExt;

fn ok_handler(
) -> impl Fn(Delivery) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    |_d| std::future::ready(Ok(()))
}

async fn publish(kinesis: &MemoryStream, stream: &str, from: usize, n: usize) {
    let entries = (from..from + n)
        .map(|i| PutEntry::new(format!("{i}"), format!("key-{}", i % 13)))
        .collect();
    Publisher::new(kinesis.clone(), stream)
        .put_all(entries)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_second_subscription_to_one_stream_is_refused_naming_it() {
    let mut broker = Broker::builder()
        .kinesis(MemoryStream::new())
        .build()
        .unwrap();
    broker.subscribe("orders").handle(ok_handler()).unwrap();
    let err = broker
        .subscribe("orders")
        .workers(2)
        .handle(ok_handler())
        .unwrap_err();
    assert!(
        matches!(&err, BrokerError::DuplicateSubscription { stream } if stream == "orders"),
        "{err}"
    );
    assert!(err.to_string().contains("`orders`"), "{err}");
    broker.subscribe("payments").handle(ok_handler()).unwrap();
}

#[tokio::test]
async fn one_store_instance_cannot_serve_two_brokers() {
    let store: Arc<dyn kinesis_broker::lease::LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let first = Broker::builder()
        .owner_id("first")
        .lease_store_arc(store.clone())
        .build()
        .unwrap();
    let err = Broker::builder()
        .lease_store_arc(store.clone())
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, BrokerError::StoreAlreadyMounted { owner } if owner == "first"),
        "{err}"
    );
    drop(first);
    Broker::builder()
        .lease_store_arc(store)
        .build()
        .expect("free again once the first is gone");
    // Two stores over one table is the way to share.
    let table = MemoryLeaseTable::new();
    Broker::builder()
        .lease_store(MemoryLeaseStore::over(&table))
        .build()
        .unwrap();
    Broker::builder()
        .lease_store(MemoryLeaseStore::over(&table))
        .build()
        .unwrap();
}

#[tokio::test]
async fn start_checks_streams_and_names_them() {
    let kinesis = MemoryStream::new();
    let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
    broker.subscribe("missing").handle(ok_handler()).unwrap();
    let err = broker.start().await.unwrap_err();
    assert!(
        matches!(&err, BrokerError::Stream { stream, .. } if stream == "missing"),
        "{err}"
    );
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("`missing` does not exist"), "{source}");

    let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
    let err = broker
        .subscribe("bad name!")
        .handle(ok_handler())
        .unwrap_err();
    assert!(
        matches!(&err, BrokerError::Stream { stream, .. } if stream == "bad name!"),
        "{err}"
    );

    let broker = Broker::builder().kinesis(kinesis).build().unwrap();
    assert!(matches!(
        broker.start().await,
        Err(BrokerError::NoSubscriptions)
    ));
}

#[tokio::test]
async fn invalid_worker_settings_are_typed_errors() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let mut broker = Broker::builder().kinesis(kinesis).build().unwrap();
    broker
        .subscribe("s")
        .workers(0)
        .by_key()
        .handle(ok_handler())
        .unwrap();
    let err = broker.start().await.unwrap_err();
    assert!(
        matches!(&err, BrokerError::Dispatch { stream, .. } if stream == "s"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn stream_subscription_yields_deliveries_to_ack() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 3).unwrap();
    publish(&kinesis, "s", 0, 30).await;
    let mut broker = Broker::builder().kinesis(kinesis).build().unwrap();
    let mut deliveries = broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .stream()
        .unwrap();
    let running = broker.start().await.unwrap();
    let mut seen = HashSet::new();
    while seen.len() < 30 {
        let d = deliveries.next().await.unwrap();
        assert_eq!(d.stream(), "s");
        assert!(d.shard().starts_with("shardId-"), "{d:?}");
        assert!(d.partition_key().starts_with("key-"), "{d:?}");
        assert_eq!(d.sequence_text(), d.sequence().to_string());
        assert_eq!(d.subsequence(), None);
        assert!(d.arrival().is_some(), "MemoryStream stamps arrival: {d:?}");
        seen.insert(String::from_utf8(d.payload().to_vec()).unwrap());
        d.ack();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stats = running.stats();
    let t = stats.totals();
    assert_eq!((t.delivered, t.settled, t.in_flight), (30, 30, 0));
    assert_eq!(stats.shards("s").len(), 3);
    assert!(stats
        .shards("s")
        .iter()
        .all(|s| s.owner == running.owner_id()));
    assert!(stats
        .shards("s")
        .iter()
        .filter(|s| s.delivered > 0)
        .all(|s| s.checkpoint.is_some()));
    let report = running.shutdown().await;
    assert!(report.handlers_finished);
}

#[tokio::test(start_paused = true)]
async fn batch_subscription_settles_what_did_not_fail() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    publish(&kinesis, "s", 0, 40).await;
    let attempts: Arc<Mutex<Vec<usize>>> = Arc::default();
    let a = attempts.clone();
    let mut broker = Broker::builder().kinesis(kinesis).build().unwrap();
    broker
        .subscribe("s")
        .start_at(StartAt::TrimHorizon)
        .batch(16)
        .handle(move |batch: Vec<Delivery>| {
            let a = a.clone();
            async move {
                let first_time = {
                    let mut a = a.lock().unwrap();
                    a.push(batch.len());
                    a.len() == 1
                };
                if first_time {
                    return Err(BatchFailure::items(
                        [0],
                        "first record of the first batch failed",
                    ));
                }
                Ok(())
            }
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t = running.stats().totals();
    assert_eq!((t.delivered, t.settled, t.in_flight), (40, 40, 0));
    assert!(attempts.lock().unwrap().iter().all(|&n| n <= 16));
    running.shutdown().await;
}

/// Two brokers balance 2 + 2; A shuts down gracefully; B, on the same table, holds every
/// shard about a take interval later and resumes after A's final checkpoints: nothing lost, nothing twice.
#[tokio::test(start_paused = true)]
async fn graceful_shutdown_hands_every_shard_over() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let table = MemoryLeaseTable::new();
    let log: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let make = |owner: &str| {
        let mut broker = Broker::builder()
            .kinesis(kinesis.clone())
            .lease_store(MemoryLeaseStore::over(&table))
            .owner_id(owner)
            .build()
            .unwrap();
        let (l, o) = (log.clone(), owner.to_owned());
        broker
            .subscribe("s")
            .start_at(StartAt::TrimHorizon)
            .workers(4)
            .by_key()
            .handle(move |d: Delivery| {
                let (l, o) = (l.clone(), o.clone());
                async move {
                    l.lock()
                        .unwrap()
                        .push((o, String::from_utf8_lossy(d.payload()).into_owned()));
                    Ok::<(), std::io::Error>(())
                }
            })
            .unwrap();
        broker
    };
    let a = make("a").start().await.unwrap();
    publish(&kinesis, "s", 0, 200).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        a.stats().shards("s").len(),
        4,
        "the first instance up takes everything"
    );
    let b = make("b").start().await.unwrap();
    // b asks for its share; a hands shards over one at a time.
    let balancing = tokio::time::Instant::now();
    while b.stats().shards("s").len() < 2 {
        assert!(
            balancing.elapsed() < Duration::from_secs(20),
            "not balanced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(a.stats().shards("s").len(), 2);
    publish(&kinesis, "s", 200, 100).await;
    let report = a.shutdown().await;
    assert!(report.handlers_finished);
    let handed_over = tokio::time::Instant::now();
    while b.stats().shards("s").len() < 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = handed_over.elapsed();
    assert!(
        took <= Duration::from_millis(1_100),
        "b held every shard {took:?} after a's shutdown"
    );
    publish(&kinesis, "s", 300, 100).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    b.shutdown().await;
    let log = log.lock().unwrap();
    let mut payloads: Vec<&String> = log.iter().map(|(_, p)| p).collect();
    payloads.sort();
    payloads.dedup();
    assert_eq!(
        (log.len(), payloads.len()),
        (400, 400),
        "nothing lost, nothing handled twice"
    );
    assert!(log.iter().any(|(o, _)| o == "b"));
}

/// `by_key()` then `workers(n)` is n lanes by key, as `workers(n)` then `by_key()` is: the
/// order of the calls does not matter (it used to make the subscription unordered, and one
/// key's records ran side by side and finished out of order).
#[tokio::test(start_paused = true)]
async fn by_key_before_workers_keeps_each_key_in_order() {
    for by_key_first in [true, false] {
        let kinesis = MemoryStream::new();
        kinesis.create_stream("orders", 1).unwrap();
        let entries = (0..40)
            .map(|i| PutEntry::new(format!("{i}"), "one-customer"))
            .collect();
        Publisher::new(kinesis.clone(), "orders")
            .put_all(entries)
            .await
            .unwrap();
        let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
        let s = seen.clone();
        let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
        let sub = broker.subscribe("orders").start_at(StartAt::TrimHorizon);
        let sub = if by_key_first {
            sub.by_key().workers(4)
        } else {
            sub.workers(4).by_key()
        };
        sub.handle(move |d: Delivery| {
            let s = s.clone();
            async move {
                let n: u64 = String::from_utf8_lossy(d.payload()).parse().unwrap();
                // Later records take less time: run side by side, they would finish first.
                tokio::time::sleep(Duration::from_millis(50 - n)).await;
                s.lock().unwrap().push(n);
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
        let running = broker.start().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            (0..40).collect::<Vec<_>>(),
            "by_key first: {by_key_first}"
        );
        running.shutdown().await;
    }
}
