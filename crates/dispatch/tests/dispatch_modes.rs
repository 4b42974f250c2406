//! Serial, unordered and by-key dispatch, backpressure and shutdown, on tokio's paused clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_dispatch::{
    channel, channel_for, Delivery, DeliveryReceiver, DeliverySender, DispatchConfig, Dispatcher,
    Handler, Record, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::new(format!("{}", 100 + n), None).unwrap()
}

fn record(key: &str, n: u64) -> Record {
    Record::new(format!("{key}#{n}"), key, seq(n))
}

fn config(workers: Workers) -> DispatchConfig {
    DispatchConfig {
        workers,
        ..Default::default()
    }
}

/// The two ways lanes by key are fed: straight into their lanes by the feeds (`channel_for`,
/// as the broker does), and through one channel and a router (a plain `channel`).
fn by_key_channels(lanes: usize) -> [(&'static str, (DeliverySender, DeliveryReceiver)); 2] {
    let direct = DispatchConfig {
        // Room for what the tests send before the dispatcher starts.
        lane_capacity: 16,
        ..config(Workers::ByKey(lanes))
    };
    [("lanes", channel_for(64, &direct)), ("router", channel(64))]
}

/// Tracks how many handlers run at once.
#[derive(Default)]
struct Concurrency {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Concurrency {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn serial_handles_one_at_a_time_in_order() {
    let (tx, rx) = channel(64);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conc = Arc::new(Concurrency::default());
    let (s, c) = (seen.clone(), conc.clone());
    let handler = Handler::one(move |d: Delivery| {
        let (s, c) = (s.clone(), c.clone());
        async move {
            c.enter();
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..5))).await;
            s.lock().unwrap().push(d.sequence().clone());
            c.leave();
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, config(Workers::Serial)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..200 {
        feed.send(record(&format!("k{}", n % 7), n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(*seen.lock().unwrap(), (0..200).map(seq).collect::<Vec<_>>());
    assert_eq!(conc.max.load(Ordering::SeqCst), 1);
    assert_eq!(settlement.progress().checkpoint, Some(seq(199)));
    drop((tx, feed));
    handle.join().await;
}

#[tokio::test(start_paused = true)]
async fn unordered_workers_run_n_at_once() {
    let (tx, rx) = channel(64);
    let conc = Arc::new(Concurrency::default());
    let c = conc.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let c = c.clone();
        async move {
            c.enter();
            tokio::time::sleep(Duration::from_millis(10)).await;
            c.leave();
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, config(Workers::Unordered(4))).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..100 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(
        conc.max.load(Ordering::SeqCst),
        4,
        "exactly n handlers at once"
    );
    assert_eq!(settlement.progress().checkpoint, Some(seq(99)));
    drop((tx, feed));
    handle.join().await;
}

/// 50 keys over 8 lanes with random handler delays: each key in sequence order, lanes side by
/// side, and every shard's checkpoint reaches its last record.
#[tokio::test(start_paused = true)]
async fn by_key_keeps_each_key_in_order() {
    for (how, (tx, rx)) in by_key_channels(8) {
        by_key_order_through(how, tx, rx).await;
    }
}

async fn by_key_order_through(how: &str, tx: DeliverySender, rx: DeliveryReceiver) {
    let seen: Arc<Mutex<HashMap<String, Vec<SequenceNumber>>>> = Arc::default();
    let conc = Arc::new(Concurrency::default());
    let (s, c) = (seen.clone(), conc.clone());
    let handler = Handler::one(move |d: Delivery| {
        let (s, c) = (s.clone(), c.clone());
        async move {
            c.enter();
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..20))).await;
            s.lock()
                .unwrap()
                .entry(d.partition_key().to_owned())
                .or_default()
                .push(d.sequence().clone());
            c.leave();
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, config(Workers::ByKey(8))).unwrap();
    let shards: Vec<_> = (0..4)
        .map(|i| ShardSettlement::new("s", format!("shard-{i}")))
        .collect();
    let mut producers = Vec::new();
    for (i, settlement) in shards.iter().enumerate() {
        let feed = tx.feed(settlement.clone());
        producers.push(tokio::spawn(async move {
            for n in 0..250u64 {
                // Each key lives on one shard, as Kinesis hashes keys onto shards.
                let key = format!("key-{}", (n % 13) as usize * 4 + i);
                feed.send(record(&key, n)).await.unwrap();
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    for settlement in &shards {
        settlement.all_settled().await;
        assert_eq!(settlement.progress().checkpoint, Some(seq(249)));
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 52);
    for (key, seqs) in seen.iter() {
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(seqs, &sorted, "{how}: key {key} out of order");
    }
    assert!(
        conc.max.load(Ordering::SeqCst) >= 4,
        "{how}: lanes ran side by side: {}",
        conc.max.load(Ordering::SeqCst)
    );
    drop(tx);
    handle.join().await;
}

/// A key blocked on one lane does not stop keys of other lanes while its lane has room.
#[tokio::test(start_paused = true)]
async fn slow_key_does_not_stall_other_lanes() {
    for (how, (tx, rx)) in by_key_channels(4) {
        slow_key_through(how, tx, rx).await;
    }
}

async fn slow_key_through(how: &str, tx: DeliverySender, rx: DeliveryReceiver) {
    let gate = Arc::new(tokio::sync::Notify::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let (g, h) = (gate.clone(), handled.clone());
    let slow = "slow-key";
    let handler = Handler::one(move |d: Delivery| {
        let (g, h) = (g.clone(), h.clone());
        async move {
            if d.partition_key() == "slow-key" {
                g.notified().await;
            }
            h.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        }
    });
    let lanes = 4;
    let handle = Dispatcher::spawn(rx, handler, config(Workers::ByKey(lanes))).unwrap();
    let slow_lane = kinesis_dispatch::lane_of(slow, lanes);
    let others: Vec<String> = (0..200)
        .map(|i| format!("k{i}"))
        .filter(|k| kinesis_dispatch::lane_of(k, lanes) != slow_lane)
        .take(100)
        .collect();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    feed.send(record(slow, 0)).await.unwrap();
    for (n, key) in others.iter().enumerate() {
        feed.send(record(key, n as u64 + 1)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        handled.load(Ordering::SeqCst),
        100,
        "{how}: other lanes went on"
    );
    assert_eq!(
        settlement.progress().checkpoint,
        None,
        "{how}: nothing passes the unsettled record"
    );
    gate.notify_one();
    settlement.all_settled().await;
    assert_eq!(settlement.progress().checkpoint, Some(seq(100)));
    drop((tx, feed));
    handle.join().await;
}

/// With a blocked handler, readers stop once the channel and the lanes are full: the number of
/// records taken from the source is bounded, exactly.
#[tokio::test(start_paused = true)]
async fn backpressure_bounds_what_is_taken() {
    for (workers, direct, expected) in [
        // handler 1 + channel 64 + the one the producer waits to send
        (Workers::Serial, true, 1 + 64 + 1),
        // 3 handlers + channel 64 + 1 waiting: workers take from the channel themselves
        (Workers::Unordered(3), true, 3 + 64 + 1),
        // one key, fed straight into its lane: handler 1 + lane 8 + 1 waiting
        (Workers::ByKey(4), true, 1 + 8 + 1),
        // one key through a router: handler 1 + lane 8 + router 1 + channel 64 + 1 waiting
        (Workers::ByKey(4), false, 1 + 8 + 1 + 64 + 1),
    ] {
        let (tx, rx) = if direct {
            channel_for(64, &config(workers))
        } else {
            channel(64)
        };
        let gate = Arc::new(tokio::sync::Notify::new());
        let g = gate.clone();
        let handler = Handler::one(move |_d: Delivery| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok::<(), std::io::Error>(())
            }
        });
        let handle = Dispatcher::spawn(rx, handler, config(workers)).unwrap();
        let taken = Arc::new(AtomicUsize::new(0));
        let t = taken.clone();
        let feed = tx.feed(ShardSettlement::new("s", "shard-0"));
        let producer = tokio::spawn(async move {
            for n in 0..10_000 {
                t.fetch_add(1, Ordering::SeqCst);
                if feed.send(record("one-key", n)).await.is_err() {
                    return;
                }
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            taken.load(Ordering::SeqCst),
            expected,
            "{workers:?}, fed directly: {direct}"
        );
        producer.abort();
        handle.shutdown(Duration::from_millis(10)).await;
    }
}

/// A handler that signals when it starts, then takes 1 s (an hour for the key `stuck`).
fn signalling_sleeper(started: &Arc<tokio::sync::Notify>) -> Handler {
    let st = started.clone();
    Handler::one(move |d: Delivery| {
        let st = st.clone();
        async move {
            st.notify_one();
            let secs = if d.partition_key() == "stuck" {
                3_600
            } else {
                1
            };
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok::<(), std::io::Error>(())
        }
    })
}

/// Shutdown drops queued deliveries unsettled, lets the one in flight finish, and abandons a
/// handler stuck past the deadline.
#[tokio::test(start_paused = true)]
async fn shutdown_finishes_in_flight_and_drops_the_queue() {
    let (tx, rx) = channel(64);
    let started = Arc::new(tokio::sync::Notify::new());
    let handler = signalling_sleeper(&started);
    let handle = Dispatcher::spawn(rx, handler, config(Workers::Serial)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..10 {
        feed.send(record("k", n)).await.unwrap();
    }
    started.notified().await;
    assert!(
        handle.shutdown(Duration::from_secs(5)).await,
        "in-flight record finished"
    );
    let progress = settlement.progress();
    assert_eq!((progress.settled, progress.checkpoint), (1, Some(seq(0))));

    let (tx, rx) = channel(64);
    let handler = signalling_sleeper(&started);
    let handle = Dispatcher::spawn(rx, handler, config(Workers::Serial)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-1");
    let feed = tx.feed(settlement.clone());
    feed.send(record("stuck", 0)).await.unwrap();
    started.notified().await;
    assert!(
        !handle.shutdown(Duration::from_secs(5)).await,
        "stuck handler abandoned"
    );
    assert_eq!(settlement.progress().checkpoint, None);
    assert!(
        feed.send(record("k", 1)).await.is_err(),
        "closed after shutdown"
    );
}

/// Deliveries of a revoked shard are dropped, not handled.
#[tokio::test(start_paused = true)]
async fn revoked_deliveries_are_dropped() {
    for (_, (tx, rx)) in by_key_channels(2) {
        revoked_dropped_through(tx, rx).await;
    }
}

async fn revoked_dropped_through(tx: DeliverySender, rx: DeliveryReceiver) {
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        }
    });
    let lost = ShardSettlement::new("s", "lost");
    let kept = ShardSettlement::new("s", "kept");
    let (lost_feed, kept_feed) = (tx.feed(lost.clone()), tx.feed(kept.clone()));
    for n in 0..5 {
        lost_feed.send(record("a", n)).await.unwrap();
        kept_feed.send(record("b", n)).await.unwrap();
    }
    lost.revoke();
    assert!(lost_feed.send(record("a", 9)).await.is_err());
    let handle = Dispatcher::spawn(rx, handler, config(Workers::ByKey(2))).unwrap();
    kept.all_settled().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 5);
    assert_eq!(lost.progress().settled, 0);
    drop((tx, lost_feed, kept_feed));
    handle.join().await;
}

#[tokio::test]
async fn zero_workers_is_a_typed_error() {
    for workers in [Workers::Unordered(0), Workers::ByKey(0)] {
        let (_tx, rx) = channel(1);
        let handler = Handler::one(|_d: Delivery| async { Ok::<(), std::io::Error>(()) });
        let err = Dispatcher::spawn(rx, handler, config(workers)).unwrap_err();
        assert!(err.to_string().contains("workers"), "{err}");
    }
}

/// A lost lease stops a waiting handler before its next step, even when what it waited for
/// arrives at the same moment: it never runs beside the next owner.
#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_a_waiting_handler_before_its_next_step() {
    let (tx, rx) = channel(64);
    let gate = Arc::new(tokio::sync::Notify::new());
    let steps = Arc::new(AtomicUsize::new(0));
    let (g, s) = (gate.clone(), steps.clone());
    let handler = Handler::one(move |_d: Delivery| {
        let (g, s) = (g.clone(), s.clone());
        async move {
            g.notified().await;
            // The step after the wait: a write the next owner may also make.
            s.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, config(Workers::Serial)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    feed.send(record("k", 0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await; // the handler waits at the gate
                                                         // What it waited for, and the loss of the lease, at once.
    gate.notify_one();
    settlement.abandon();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        steps.load(Ordering::SeqCst),
        0,
        "the handler went on after the loss"
    );
    assert_eq!(settlement.progress().settled, 0);
    drop((tx, feed));
    handle.join().await;
}

/// Lanes fed straight by the readers: a shutdown closes them, handles what they already hold
/// (other lanes completed later records of the same shards, so dropping it would leave gaps
/// behind the checkpoint, handled again by the next owner) and fails the sends waiting for
/// room, which take their numbers back: every shard ends with nothing in flight and its
/// checkpoint on the last record it sent.
#[tokio::test(start_paused = true)]
async fn shutdown_of_lanes_fed_directly_leaves_no_gap() {
    let cfg = config(Workers::ByKey(4));
    let (tx, rx) = channel_for(64, &cfg);
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let h = h.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            h.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, cfg).unwrap();
    let shards: Vec<_> = (0..3)
        .map(|i| ShardSettlement::new("s", format!("shard-{i}")))
        .collect();
    let sent = Arc::new(Mutex::new(HashMap::new()));
    let mut producers = Vec::new();
    for (i, settlement) in shards.iter().enumerate() {
        let (feed, sent) = (tx.feed(settlement.clone()), sent.clone());
        producers.push(tokio::spawn(async move {
            for n in 0..1_000u64 {
                if feed
                    .send(record(&format!("key-{}", n % 17), n))
                    .await
                    .is_err()
                {
                    return;
                }
                sent.lock().unwrap().insert(i, n);
            }
        }));
    }
    // Every lane full and every producer waiting for room.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        handle.shutdown(Duration::from_secs(60)).await,
        "what the lanes held was handled"
    );
    for p in producers {
        p.await.unwrap();
    }
    let sent = sent.lock().unwrap().clone();
    let mut total = 0;
    for (i, settlement) in shards.iter().enumerate() {
        let progress = settlement.progress();
        let last = sent[&i];
        total += last + 1;
        assert_eq!(
            progress.in_flight(),
            0,
            "shard {i}: the failed send took its number back"
        );
        assert_eq!(progress.delivered, last + 1, "shard {i}");
        assert_eq!(progress.checkpoint, Some(seq(last)), "shard {i}: no gap");
    }
    assert_eq!(handled.load(Ordering::SeqCst) as u64, total);
}

/// A send cancelled while the channel is full (a reader stopping at a hand-over) leaves no
/// number behind: the shard's settlement never waits for a record that was not delivered.
#[tokio::test(start_paused = true)]
async fn a_cancelled_send_takes_its_number_back() {
    for workers in [Workers::Serial, Workers::Unordered(2), Workers::ByKey(2)] {
        let cfg = config(workers);
        let (tx, mut rx) = channel_for(
            1,
            &DispatchConfig {
                lane_capacity: 1,
                ..cfg
            },
        );
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        feed.send(record("k", 0)).await.unwrap();
        // The channel (or the key's lane) is full: this send waits, and is dropped.
        let waiting = tokio::time::timeout(Duration::from_secs(1), feed.send(record("k", 1)));
        assert!(
            waiting.await.is_err(),
            "{workers:?}: the send waited for room"
        );
        let progress = settlement.progress();
        assert_eq!((progress.delivered, progress.window), (1, 1), "{workers:?}");
        rx.recv().await.expect("the first record").ack();
        settlement.all_settled().await;
        assert_eq!(
            settlement.progress().checkpoint,
            Some(seq(0)),
            "{workers:?}"
        );
        // The next send numbers the next record as if the cancelled one never was.
        feed.send(record("k", 1)).await.unwrap();
        let d = rx.recv().await.expect("the second record");
        assert_eq!(d.sequence(), &seq(1));
        d.ack();
        settlement.all_settled().await;
        assert_eq!(
            settlement.progress().checkpoint,
            Some(seq(1)),
            "{workers:?}"
        );
    }
}

/// Senders learn when the receiving side is gone: once a lane's loop ends (at a shutdown, or
/// were it to die, readers of its records could never send again), at `close()` on a
/// receiver, or when it is dropped.
#[tokio::test(start_paused = true)]
async fn senders_see_the_receiving_side_close() {
    let cfg = config(Workers::ByKey(3));
    let (tx, rx) = channel_for(64, &cfg);
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let handler = Handler::one(move |d: Delivery| {
        let g = g.clone();
        async move {
            if d.partition_key() == "stuck" {
                g.notified().await;
            }
            Ok::<(), std::io::Error>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, cfg).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    feed.send(record("stuck", 0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!tx.is_closed());
    handle.close();
    // The idle lanes end at once; the stuck one still handles what it held.
    tx.closed().await;
    assert!(tx.is_closed());
    assert!(
        feed.send(record("other", 1)).await.is_err(),
        "no more sends"
    );
    gate.notify_one();
    settlement.all_settled().await;
    assert_eq!(settlement.progress().checkpoint, Some(seq(0)));

    let (tx, mut rx) = channel(8);
    rx.close();
    assert!(tx.is_closed(), "close() on the receiver");
    tx.closed().await;
    let (tx, rx) = channel(8);
    drop(rx);
    tx.closed().await;
}

/// A channel of lanes by key is taken from only by as many lanes by key: anything else would
/// take from the lanes in turn and lose each shard's order.
#[tokio::test]
async fn a_channel_of_lanes_needs_as_many_lanes() {
    for workers in [Workers::Serial, Workers::Unordered(4), Workers::ByKey(3)] {
        let (_tx, rx) = channel_for(64, &config(Workers::ByKey(4)));
        let handler = Handler::one(|_d: Delivery| async { Ok::<(), std::io::Error>(()) });
        let error = Dispatcher::spawn(rx, handler, config(workers)).unwrap_err();
        assert!(
            error.to_string().contains("lanes by key"),
            "{workers:?}: {error}"
        );
    }
}

/// Under backpressure every shard gets its turn: with a slow handler and four readers always
/// waiting to send, each shard's share of what was handled stays near a quarter.
#[tokio::test(start_paused = true)]
async fn readers_waiting_for_room_take_turns() {
    for workers in [Workers::Serial, Workers::Unordered(3), Workers::ByKey(3)] {
        let cfg = config(workers);
        let (tx, rx) = channel_for(16, &cfg);
        let per_shard: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let p = per_shard.clone();
        let handler = Handler::one(move |d: Delivery| {
            let p = p.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                *p.lock().unwrap().entry(d.shard().to_owned()).or_default() += 1;
                Ok::<(), std::io::Error>(())
            }
        });
        let handle = Dispatcher::spawn(rx, handler, cfg).unwrap();
        let mut producers = Vec::new();
        for i in 0..4 {
            let feed = tx.feed(ShardSettlement::new("s", format!("shard-{i}")));
            producers.push(tokio::spawn(async move {
                for n in 0..100_000u64 {
                    if feed.send(record(&format!("k{}", n % 29), n)).await.is_err() {
                        return;
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let counts = per_shard.lock().unwrap().clone();
        let total: usize = counts.values().sum();
        assert!(total > 1_000, "{workers:?}: {total} handled");
        for i in 0..4 {
            let got = counts.get(&format!("shard-{i}")).copied().unwrap_or(0);
            assert!(
                got * 4 >= total * 3 / 4 && got * 4 <= total * 5 / 4,
                "{workers:?}: shard-{i} got {got} of {total}: {counts:?}"
            );
        }
        for p in producers {
            p.abort();
        }
        handle.shutdown(Duration::from_millis(10)).await;
    }
}
