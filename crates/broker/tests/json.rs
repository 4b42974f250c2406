//! Typed payloads (feature `serde`): `handle_json` parses each payload; one that does not parse
//! is a handler error naming the stream, shard, sequence number and type, and goes through the
//! retry policy (here: two attempts, then the dead letter), while the others are handled.
#![cfg(feature = "serde")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, Publisher, PutEntry, RetryPolicy, StartAt};

#[derive(Debug, serde::Deserialize, PartialEq)]
struct Order {
    id: u64,
}

#[tokio::test(start_paused = true)]
async fn bad_payloads_go_through_the_retry_policy_with_a_clear_error() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 1).unwrap();
    let published = Publisher::new(kinesis.clone(), "orders")
        .put_all(vec![
            PutEntry::new(r#"{"id": 1}"#, "a"),
            PutEntry::new("not json", "b"),
            PutEntry::new(r#"{"id": 3}"#, "c"),
        ])
        .await
        .unwrap();
    let bad_sequence = published[1].sequence.to_string();
    let orders: Arc<Mutex<Vec<u64>>> = Arc::default();
    let dead: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let (o, d) = (orders.clone(), dead.clone());
    let mut broker = Broker::builder().kinesis(kinesis).build().unwrap();
    broker
        .subscribe("orders")
        .start_at(StartAt::TrimHorizon)
        .retry(RetryPolicy::default().max_attempts(2).then_dead_letter(
            move |delivery: Delivery, error| {
                d.lock().unwrap().push((
                    String::from_utf8_lossy(delivery.payload()).into_owned(),
                    kinesis_broker::lease::ErrorChain(&*error).to_string(),
                ));
                async { Ok::<(), std::io::Error>(()) }
            },
        ))
        .handle_json(move |order: Order, _delivery: Delivery| {
            o.lock().unwrap().push(order.id);
            async { Ok::<(), std::io::Error>(()) }
        })
        .unwrap();
    let running = broker.start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stats = running.stats();
    running.shutdown().await;
    assert_eq!(*orders.lock().unwrap(), vec![1, 3]);
    let dead = dead.lock().unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (payload, error) = &dead[0];
    assert_eq!(payload, "not json");
    for part in [
        "`orders`",
        "shardId-000000000000",
        bad_sequence.as_str(),
        "Order",
        "expected ident",
    ] {
        assert!(error.contains(part), "{part} in {error}");
    }
    assert_eq!(
        stats.totals().settled,
        3,
        "the dead-lettered record settles"
    );
}
