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

/// A channel of 64 filled quietly by shard `a`, which says a page of 1,000 is coming.
async fn full_of_a() -> (
    kinesis_dispatch::DeliverySender,
    kinesis_dispatch::DeliveryReceiver,
    kinesis_dispatch::QuietFeed,
) {
    let (tx, rx) = channel(64);
    let mut quiet = tx
        .feed(ShardSettlement::new("s", "a"))
        .quietly()
        .expecting(1_000);
    for n in 0..64 {
        assert!(matches!(quiet.try_send(record("a", n)), Ok(TrySend::Sent)));
    }
    quiet.flush();
    (tx, rx, quiet)
}

#[tokio::test(start_paused = true)]
async fn a_busy_reader_waits_for_a_batch_of_places_not_one() {
    let (_tx, mut rx, mut quiet) = full_of_a().await;
    let sender = tokio::spawn(async move {
        quiet.send(record("a", 64)).await.unwrap();
        quiet
    });
    tokio::task::yield_now().await;
    // One record handled frees one place: a reader woken for it would hop threads per record.
    for taken in 1..16 {
        assert!(rx.try_recv().is_some());
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert!(!sender.is_finished(), "woken after {taken} places");
    }
    assert!(rx.try_recv().is_some());
    let mut quiet = sender.await.unwrap();
    // It took 16: the one it sent and 15 more, without waiting.
    for n in 65..80 {
        assert!(matches!(quiet.try_send(record("a", n)), Ok(TrySend::Sent)));
    }
    assert!(matches!(
        quiet.try_send(record("a", 80)),
        Ok(TrySend::Full(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_did_not_say_what_comes_waits_for_one_place() {
    let (tx, mut rx) = channel(64);
    let mut quiet = tx.feed(ShardSettlement::new("s", "a")).quietly();
    for n in 0..64 {
        assert!(matches!(quiet.try_send(record("a", n)), Ok(TrySend::Sent)));
    }
    quiet.flush();
    let sender = tokio::spawn(async move { quiet.send(record("a", 64)).await });
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_some());
    sender.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_shard_with_nothing_queued_gets_the_next_place_before_a_busy_one() {
    let (tx, mut rx, mut quiet) = full_of_a().await;
    let busy = tokio::spawn(async move { quiet.send(record("a", 64)).await });
    tokio::task::yield_now().await;
    // Shard b, just taken, nothing of it queued: it waits behind a, and is served first.
    let mut taken = tx
        .feed(ShardSettlement::new("s", "b"))
        .quietly()
        .expecting(1_000);
    let newcomer = tokio::spawn(async move {
        taken.send(record("b", 0)).await.unwrap();
        drop(taken);
    });
    tokio::task::yield_now().await;
    assert!(!newcomer.is_finished());
    assert!(rx.try_recv().is_some());
    newcomer.await.unwrap();
    assert!(!busy.is_finished(), "a waits for its batch");
    // b's record is next in turn, ahead of a's 62 still queued.
    assert_eq!(rx.try_recv().map(|d| payload(&d)).as_deref(), Some("b#0"));
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_taken_shard_keeps_its_turn_for_places_past_its_first_records() {
    // Four busy shards fill the lane and wait for batches of places.
    let (tx, mut rx) = channel(64);
    let mut busy = Vec::new();
    for b in 0..4 {
        let key = format!("b{b}");
        let mut quiet = tx
            .feed(ShardSettlement::new("s", key.clone()))
            .quietly()
            .expecting(1_000);
        for n in 0..16 {
            assert!(matches!(quiet.try_send(record(&key, n)), Ok(TrySend::Sent)));
        }
        quiet.flush();
        busy.push(tokio::spawn(async move {
            for n in 16..1_000 {
                quiet.send(record(&key, n)).await.unwrap();
            }
        }));
    }
    tokio::task::yield_now().await;
    // A shard is taken with three records to send.
    let mut taken = tx
        .feed(ShardSettlement::new("s", "n"))
        .quietly()
        .expecting(3);
    let newcomer = tokio::spawn(async move {
        for n in 0..3 {
            taken.send(record("n", n)).await.unwrap();
        }
    });
    let mut handled = 0;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        tokio::task::yield_now().await;
        if let Some(d) = rx.try_recv() {
            handled += 1;
            let p = payload(&d);
            if p.starts_with("n#") {
                seen.push(p);
            }
        }
        assert!(
            handled <= 20,
            "n's records after {handled} handled: {seen:?}"
        );
    }
    assert_eq!(seen, ["n#0", "n#1", "n#2"]);
    newcomer.await.unwrap();
    for b in busy {
        b.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_feed_takes_places_for_what_it_expects_and_gives_back_the_unused_at_the_flush() {
    let (tx, _rx) = channel(20);
    let mut a = tx
        .feed(ShardSettlement::new("s", "a"))
        .quietly()
        .expecting(5);
    let mut b = tx.feed(ShardSettlement::new("s", "b")).quietly();
    assert!(matches!(a.try_send(record("a", 0)), Ok(TrySend::Sent)));
    // a took five places in one go (a batch of a lane of 20 is 5): 15 are left for b.
    for n in 0..15 {
        assert!(matches!(b.try_send(record("b", n)), Ok(TrySend::Sent)));
    }
    assert!(matches!(b.try_send(record("b", 15)), Ok(TrySend::Full(_))));
    // a's four unused places come back at its flush.
    a.flush();
    for n in 15..19 {
        assert!(matches!(b.try_send(record("b", n)), Ok(TrySend::Sent)));
    }
    assert!(matches!(b.try_send(record("b", 19)), Ok(TrySend::Full(_))));
}
