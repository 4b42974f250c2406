//! Sending a page quietly: records queued by a `QuietFeed` are in the channel at once but wake
//! the loops only when flushed (or dropped); a full channel hands the record back; a waiting
//! send wakes what was queued first; several feeds of one shard keep its order; and a batch
//! takes records in turn, freeing their places. On tokio's paused clock.

use std::time::Duration;

use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement, TrySend,
    Workers,
};
use kinesis_lease_core::SequenceNumber;

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::new(format!("{}", 100 + n), None).unwrap()
}

fn record(key: &str, n: u64) -> Record {
    Record::new(format!("{key}#{n}"), key, seq(n))
}

fn payload(d: &Delivery) -> String {
    String::from_utf8_lossy(d.payload()).into_owned()
}

#[tokio::test(start_paused = true)]
async fn quiet_records_wake_the_loop_when_flushed() {
    let (tx, mut rx) = channel(8);
    let feed = tx.feed(ShardSettlement::new("s", "a"));
    let taker = tokio::spawn(async move { rx.recv().await.map(|d| payload(&d)) });
    tokio::task::yield_now().await;
    let mut quiet = feed.quietly();
    assert!(matches!(quiet.try_send(record("k", 0)), Ok(TrySend::Sent)));
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert!(!taker.is_finished(), "queued quietly: nobody woken yet");
    quiet.flush();
    assert_eq!(taker.await.unwrap().as_deref(), Some("k#0"));

    // Dropping the batch flushes it too.
    let (tx, mut rx) = channel(8);
    let feed = tx.feed(ShardSettlement::new("s", "a"));
    let taker = tokio::spawn(async move { rx.recv().await.map(|d| payload(&d)) });
    tokio::task::yield_now().await;
    {
        let mut quiet = feed.quietly();
        assert!(matches!(quiet.try_send(record("k", 1)), Ok(TrySend::Sent)));
    }
    assert_eq!(taker.await.unwrap().as_deref(), Some("k#1"));
}

#[tokio::test(start_paused = true)]
async fn a_full_channel_hands_the_record_back_and_a_waiting_send_wakes_the_loop() {
    let (tx, mut rx) = channel(2);
    let settlement = ShardSettlement::new("s", "a");
    let feed = tx.feed(settlement.clone());
    let taker = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(d) = rx.recv().await {
            got.push(payload(&d));
            d.ack();
        }
        got
    });
    tokio::task::yield_now().await;
    let mut quiet = feed.quietly();
    assert!(matches!(quiet.try_send(record("k", 0)), Ok(TrySend::Sent)));
    assert!(matches!(quiet.try_send(record("k", 1)), Ok(TrySend::Sent)));
    let Ok(TrySend::Full(back)) = quiet.try_send(record("k", 2)) else {
        panic!("two places, both taken")
    };
    assert_eq!(
        settlement.progress().delivered,
        2,
        "a record handed back is not numbered"
    );
    // The waiting send wakes the loop of what was queued quietly, so a place frees up.
    tokio::time::timeout(Duration::from_secs(60), quiet.send(back))
        .await
        .expect("the loop was woken")
        .unwrap();
    drop(quiet);
    drop(feed);
    drop(tx);
    assert_eq!(taker.await.unwrap(), ["k#0", "k#1", "k#2"]);
}

#[tokio::test(start_paused = true)]
async fn two_feeds_of_one_shard_keep_its_order() {
    let (tx, mut rx) = channel(8);
    let settlement = ShardSettlement::new("s", "shard-0");
    let (first, second) = (tx.feed(settlement.clone()), tx.feed(settlement.clone()));
    let other = tx.feed(ShardSettlement::new("s", "shard-1"));
    for n in 0..3 {
        first.send(record("k", n)).await.unwrap();
    }
    other.send(record("o", 0)).await.unwrap();
    second.send(record("k", 3)).await.unwrap();
    let got: Vec<String> = std::iter::from_fn(|| rx.try_recv())
        .map(|d| payload(&d))
        .filter(|p| p.starts_with("k#"))
        .collect();
    assert_eq!(got, ["k#0", "k#1", "k#2", "k#3"]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_takes_records_in_turn_and_frees_their_places() {
    let (tx, rx) = channel(4);
    let (a, b) = (
        ShardSettlement::new("s", "a"),
        ShardSettlement::new("s", "b"),
    );
    let (feed_a, feed_b) = (tx.feed(a.clone()), tx.feed(b.clone()));
    for n in 0..3 {
        feed_a.send(record("a", n)).await.unwrap();
    }
    feed_b.send(record("b", 0)).await.unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let handler = Handler::batch(3, move |batch: Vec<Delivery>| {
        let seen_tx = seen_tx.clone();
        async move {
            let _ = seen_tx.send(batch.iter().map(payload).collect::<Vec<_>>());
            Ok(())
        }
    });
    let config = DispatchConfig {
        workers: Workers::Serial,
        ..Default::default()
    };
    let dispatch = Dispatcher::spawn(rx, handler, config).unwrap();
    // Four waiting: a batch of three in turn (b's first record joins a's turns), then one.
    assert_eq!(seen.recv().await.unwrap(), ["a#0", "b#0", "a#1"]);
    assert_eq!(seen.recv().await.unwrap(), ["a#2"]);
    // Every place is free again: four more go in without waiting.
    let mut quiet = feed_a.quietly();
    for n in 3..7 {
        assert!(matches!(quiet.try_send(record("a", n)), Ok(TrySend::Sent)));
    }
    drop(quiet);
    assert_eq!(seen.recv().await.unwrap(), ["a#3", "a#4", "a#5"]);
    assert_eq!(seen.recv().await.unwrap(), ["a#6"]);
    drop((feed_a, feed_b, tx));
    dispatch.join().await;
}
