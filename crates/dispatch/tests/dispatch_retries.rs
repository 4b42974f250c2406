//! Handler failures: errors and panics retried in place, attempts capped with skip or
//! dead-letter, and per-key order across retries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, Dispatcher, Handler, Permanent, Record, RetryPolicy,
    ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::new(format!("{}", 100 + n), None).unwrap()
}

fn record(key: &str, n: u64) -> Record {
    Record::new(format!("{key}#{n}"), key, seq(n))
}

fn id(d: &Delivery) -> u64 {
    d.sequence().number().parse::<u64>().unwrap() - 100
}

fn with_retry(workers: Workers, retry: RetryPolicy) -> DispatchConfig {
    DispatchConfig {
        workers,
        retry,
        ..Default::default()
    }
}

/// Counts attempts per record; `fail(id, attempt)` decides what each attempt does.
fn flaky(
    attempts: &Arc<Mutex<HashMap<u64, usize>>>,
    order: &Arc<Mutex<Vec<u64>>>,
    fail: fn(u64, usize) -> Option<bool>,
) -> Handler {
    let (a, o) = (attempts.clone(), order.clone());
    Handler::one(move |d: Delivery| {
        let (a, o) = (a.clone(), o.clone());
        async move {
            let attempt = {
                let mut a = a.lock().unwrap();
                let n = a.entry(id(&d)).or_default();
                *n += 1;
                *n
            };
            match fail(id(&d), attempt) {
                Some(true) => panic!("record {} panics on attempt {attempt}", id(&d)),
                Some(false) => Err(std::io::Error::other(format!("record {} fails", id(&d)))),
                None => {
                    o.lock().unwrap().push(id(&d));
                    Ok(())
                }
            }
        }
    })
}

/// Record 2 errors twice and record 4 panics once; both are retried in place by default, the
/// service keeps running, and each key keeps its order across the retries.
#[tokio::test(start_paused = true)]
async fn errors_and_panics_retry_in_place_keeping_key_order() {
    let (tx, rx) = channel(64);
    let attempts = Arc::default();
    let order = Arc::default();
    let handler = flaky(&attempts, &order, |id, attempt| match (id, attempt) {
        (2, 1 | 2) => Some(false),
        (4, 1) => Some(true),
        _ => None,
    });
    let handle = Dispatcher::spawn(
        rx,
        handler,
        with_retry(Workers::ByKey(3), RetryPolicy::default()),
    )
    .unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..12 {
        feed.send(record(&format!("key-{}", n % 2), n))
            .await
            .unwrap();
    }
    settlement.all_settled().await;
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!((attempts[&2], attempts[&4], attempts[&6]), (3, 2, 1));
    let order = order.lock().unwrap().clone();
    for key in 0..2 {
        let of_key: Vec<u64> = order.iter().copied().filter(|i| i % 2 == key).collect();
        assert_eq!(of_key, (0..12).filter(|i| i % 2 == key).collect::<Vec<_>>());
    }
    assert_eq!(settlement.progress().checkpoint, Some(seq(11)));
    drop((tx, feed));
    handle.join().await;
}

/// Capped attempts with skip: the record is tried exactly n times, then settles.
#[tokio::test(start_paused = true)]
async fn max_attempts_then_skip() {
    let (tx, rx) = channel(64);
    let attempts = Arc::default();
    let order = Arc::default();
    let handler = flaky(&attempts, &order, |id, _| (id == 1).then_some(false));
    let retry = RetryPolicy::default().max_attempts(3).then_skip();
    let handle = Dispatcher::spawn(rx, handler, with_retry(Workers::Serial, retry)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..3 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(attempts.lock().unwrap()[&1], 3);
    assert_eq!(*order.lock().unwrap(), vec![0, 2]);
    assert_eq!(settlement.progress().checkpoint, Some(seq(2)));
    drop((tx, feed));
    handle.join().await;
}

/// Capped attempts with a dead-letter callback: it gets the delivery and the last error, and
/// the record settles once it returns Ok.
#[tokio::test(start_paused = true)]
async fn max_attempts_then_dead_letter() {
    let (tx, rx) = channel(64);
    let attempts = Arc::default();
    let order = Arc::default();
    let handler = flaky(&attempts, &order, |id, _| (id == 1).then_some(false));
    let dead: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let d = dead.clone();
    let retry = RetryPolicy::default()
        .max_attempts(2)
        .then_dead_letter(move |delivery, error| {
            let d = d.clone();
            async move {
                d.lock().unwrap().push((id(&delivery), error.to_string()));
                Ok::<(), std::io::Error>(())
            }
        });
    let handle = Dispatcher::spawn(rx, handler, with_retry(Workers::Unordered(2), retry)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..3 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(attempts.lock().unwrap()[&1], 2);
    assert_eq!(
        *dead.lock().unwrap(),
        vec![(1, "record 1 fails".to_owned())]
    );
    assert_eq!(settlement.progress().checkpoint, Some(seq(2)));
    drop((tx, feed));
    handle.join().await;
}

/// A dead-letter callback that fails leaves the record unsettled and parked, holding back what
/// it held (here its shard, in the serial loop): the checkpoint stays before it, and it is
/// tried again (the handler, then the callback) at its next backoff step, not left until the
/// next hand-over or restart. Before, the loop went on past it, handling records 2 and 3
/// before the unsettled 1, and never called the callback again.
#[tokio::test(start_paused = true)]
async fn a_failing_dead_letter_callback_is_tried_again_and_holds_back_what_follows() {
    let (tx, rx) = channel(64);
    let attempts = Arc::default();
    let order = Arc::default();
    let handler = flaky(&attempts, &order, |id, _| (id == 1).then_some(false));
    let called = Arc::new(AtomicUsize::new(0));
    let c = called.clone();
    let retry =
        RetryPolicy::default()
            .max_attempts(1)
            .then_dead_letter(move |_delivery, _error| {
                let calls = c.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if calls < 3 {
                        Err(std::io::Error::other("dead-letter queue down"))
                    } else {
                        Ok(())
                    }
                }
            });
    let handle = Dispatcher::spawn(rx, handler, with_retry(Workers::Serial, retry)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..4 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.wait_until(|p| p.settled >= 1).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        called.load(Ordering::SeqCst),
        2,
        "tried again at the next step"
    );
    assert_eq!(
        *order.lock().unwrap(),
        vec![0],
        "2 and 3 wait behind the unsettled 1"
    );
    assert_eq!(settlement.progress().checkpoint, Some(seq(0)));
    settlement.all_settled().await;
    assert_eq!(called.load(Ordering::SeqCst), 3);
    assert_eq!(*order.lock().unwrap(), vec![0, 2, 3]);
    assert_eq!(settlement.progress().checkpoint, Some(seq(3)));
    drop((tx, feed));
    handle.join().await;
}

/// A record failing for good ([`Permanent`]) goes to the dead letter at once; when the callback
/// fails, the record is parked like any failure: under lanes by key its key's later records
/// wait for it (in order) while other keys go on, and the serial loop holds its shard.
#[tokio::test(start_paused = true)]
async fn a_permanent_failure_whose_dead_letter_fails_keeps_its_key_in_order() {
    for workers in [Workers::Serial, Workers::ByKey(2)] {
        let order: Arc<Mutex<Vec<u64>>> = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let (o, c) = (order.clone(), calls.clone());
        let handler = Handler::one(move |d: Delivery| {
            let (o, c) = (o.clone(), c.clone());
            async move {
                if id(&d) == 1 {
                    return Err(Permanent::new("record 1 can never be handled").into());
                }
                // Records of key k behind 1 run only once 1 is dead-lettered: one that runs
                // earlier is recorded as 100 + its id.
                let early = d.partition_key() == "k" && c.load(Ordering::SeqCst) < 3;
                o.lock().unwrap().push(id(&d) + if early { 100 } else { 0 });
                Ok::<(), kinesis_dispatch::HandlerError>(())
            }
        });
        let c = calls.clone();
        let retry = RetryPolicy::default().then_dead_letter(move |_delivery, _error| {
            let calls = c.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if calls < 3 {
                    Err(std::io::Error::other("dead-letter stream throttled"))
                } else {
                    Ok(())
                }
            }
        });
        let config = with_retry(workers, retry);
        let (tx, rx) = kinesis_dispatch::channel_for(64, &config);
        let handle = Dispatcher::spawn(rx, handler, config).unwrap();
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        feed.send(record("j", 0)).await.unwrap();
        for n in 1..4 {
            feed.send(record("k", n)).await.unwrap();
        }
        feed.send(record("j", 4)).await.unwrap();
        settlement.wait_until(|p| p.settled >= 4).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{workers:?}");
        let order = order.lock().unwrap().clone();
        let k: Vec<u64> = order
            .iter()
            .copied()
            .filter(|n| (1..4).contains(n))
            .collect();
        assert_eq!(k, vec![2, 3], "{workers:?}");
        if workers == Workers::Serial {
            assert_eq!(order, vec![0, 2, 3, 4], "the serial loop holds the shard");
        } else {
            assert_eq!(&order[..2], &[0, 4], "key j goes on while k waits");
        }
        assert_eq!(
            settlement.progress().checkpoint,
            Some(seq(4)),
            "{workers:?}"
        );
        drop((tx, feed));
        handle.join().await;
    }
}

/// With a zero backoff and a handler that fails at once, a retry is due the moment it is
/// parked: the loop must still give the scheduler its turn, or a single-threaded runtime runs
/// nothing else (readers, lease renewals, timers) and a shutdown can never stop it. The
/// runtime runs on its own thread, on the real clock (a loop that is never idle never lets a
/// paused clock advance); the channel's timeout only catches a hang.
#[test]
fn a_zero_backoff_does_not_starve_the_runtime() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stopped = runtime.block_on(async {
            let handler = Handler::one(|_d: Delivery| async {
                Err::<(), _>(std::io::Error::other("always"))
            });
            let retry = RetryPolicy::default().backoff(Duration::ZERO, Duration::ZERO);
            let (tx, rx) = channel(64);
            let handle =
                Dispatcher::spawn(rx, handler, with_retry(Workers::Serial, retry)).unwrap();
            let settlement = ShardSettlement::new("s", "shard-0");
            let feed = tx.feed(settlement.clone());
            feed.send(record("k", 0)).await.unwrap();
            // Another task gets to run while the record keeps failing.
            tokio::spawn(async {}).await.unwrap();
            drop((tx, feed));
            handle.shutdown(Duration::from_millis(100)).await
        });
        done.send(stopped).unwrap();
    });
    let stopped = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("the retry loop never yielded: the runtime starved");
    assert!(!stopped, "the record still fails at the deadline");
}

/// Retries back off exponentially up to the cap.
#[tokio::test(start_paused = true)]
async fn retries_back_off_exponentially() {
    let (tx, rx) = channel(64);
    let times: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let t = times.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let t = t.clone();
        async move {
            let mut t = t.lock().unwrap();
            t.push(tokio::time::Instant::now());
            if t.len() < 6 {
                Err(std::io::Error::other("not yet"))
            } else {
                Ok(())
            }
        }
    });
    let retry =
        RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_millis(500));
    let handle = Dispatcher::spawn(rx, handler, with_retry(Workers::Serial, retry)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    feed.send(record("k", 0)).await.unwrap();
    settlement.all_settled().await;
    let times = times.lock().unwrap().clone();
    let gaps: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    assert_eq!(gaps, vec![100, 200, 400, 500, 500]);
    drop((tx, feed));
    handle.join().await;
}

/// A handler closure that panics before it returns its future is retried like any handler
/// panic; its lane (or loop) lives on and later records are handled.
#[tokio::test(start_paused = true)]
async fn a_handler_that_panics_before_its_future_is_retried() {
    for workers in [Workers::Serial, Workers::Unordered(2), Workers::ByKey(2)] {
        let config = with_retry(workers, RetryPolicy::default());
        let (tx, rx) = kinesis_dispatch::channel_for(64, &config);
        let attempts: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
        let a = attempts.clone();
        let handler = Handler::one(move |d: Delivery| {
            let n = {
                let mut a = a.lock().unwrap();
                let n = a.entry(id(&d)).or_default();
                *n += 1;
                *n
            };
            if id(&d) == 3 && n == 1 {
                panic!("record 3 panics before returning its future");
            }
            async { Ok::<(), std::io::Error>(()) }
        });
        let handle = Dispatcher::spawn(rx, handler, config).unwrap();
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        for n in 0..8 {
            feed.send(record(&format!("key-{}", n % 3), n))
                .await
                .unwrap();
        }
        settlement.all_settled().await;
        assert_eq!(attempts.lock().unwrap()[&3], 2, "{workers:?}");
        assert_eq!(
            settlement.progress().checkpoint,
            Some(seq(7)),
            "{workers:?}"
        );
        drop((tx, feed));
        handle.join().await;
    }
}

/// A dead-letter callback that panics before it returns its future is a failed callback: the
/// record stays unsettled and parked (tried again at its next step), its loop lives on, and
/// records it does not hold back are handled (all of them under unordered workers; under the
/// serial loop and lanes by key the shard's and the key's later records wait for it).
#[tokio::test(start_paused = true)]
async fn a_dead_letter_callback_that_panics_before_its_future_leaves_the_loop_alive() {
    for workers in [Workers::Serial, Workers::Unordered(2), Workers::ByKey(2)] {
        let attempts = Arc::default();
        let order = Arc::default();
        let handler = flaky(&attempts, &order, |id, _| (id == 1).then_some(false));
        let called = Arc::new(AtomicUsize::new(0));
        let c = called.clone();
        let retry =
            RetryPolicy::default()
                .max_attempts(1)
                .then_dead_letter(move |_delivery, _error| {
                    c.fetch_add(1, Ordering::SeqCst);
                    panic!("the callback panics before returning its future");
                    #[allow(unreachable_code)]
                    async {
                        Ok::<(), std::io::Error>(())
                    }
                });
        let config = with_retry(workers, retry);
        let (tx, rx) = kinesis_dispatch::channel_for(64, &config);
        let handle = Dispatcher::spawn(rx, handler, config).unwrap();
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        for n in 0..6 {
            feed.send(record(if n % 2 == 0 { "k" } else { "j" }, n))
                .await
                .unwrap();
        }
        let expect = match workers {
            Workers::Unordered(_) => 5,
            // 0, 2, 4 of key k; the serial loop holds the whole shard behind 1.
            Workers::ByKey(_) => 3,
            _ => 1,
        };
        settlement.wait_until(|p| p.settled >= expect).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let progress = settlement.progress();
        assert_eq!(progress.settled, expect, "{workers:?}");
        assert_eq!(progress.checkpoint, Some(seq(0)), "{workers:?}");
        assert!(
            called.load(Ordering::SeqCst) > 1,
            "{workers:?}: tried again"
        );
        assert!(!tx.is_closed(), "{workers:?}: the loop lives on");
        drop((tx, feed));
        handle.shutdown(Duration::from_millis(10)).await;
    }
}

/// Records released from behind failed ones take turns with each other and with new records.
/// Shards a and b each fail their first record once (an 8 s backoff), so the loop queues
/// their next records behind them while it handles shard c's; once released, no shard with
/// records left waits more than five handler calls for its next one. They used to come out
/// first in, first out and ahead of anything new: a's seven before b's three before c's next
/// (seed 25285 of the fleet simulation: a shard 16.1 s without progress behind another's
/// released queue of slow records).
#[tokio::test(start_paused = true)]
async fn released_records_take_turns_with_each_other_and_with_new_ones() {
    for workers in [Workers::Serial, Workers::ByKey(1)] {
        let order: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let failed: Arc<Mutex<Vec<String>>> = Arc::default();
        let (o, f) = (order.clone(), failed.clone());
        let handler = Handler::one(move |d: Delivery| {
            let (o, f) = (o.clone(), f.clone());
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let shard = d.shard().to_owned();
                if id(&d) == 0 && shard != "c" {
                    let mut f = f.lock().unwrap();
                    if !f.contains(&shard) {
                        f.push(shard);
                        return Err(std::io::Error::other("first attempt fails"));
                    }
                }
                o.lock().unwrap().push((shard, id(&d)));
                Ok(())
            }
        });
        let retry = RetryPolicy::default().backoff(Duration::from_secs(8), Duration::from_secs(8));
        let config = with_retry(workers, retry);
        let (tx, rx) = kinesis_dispatch::channel_for(64, &config);
        let handle = Dispatcher::spawn(rx, handler, config).unwrap();
        let mut shards = Vec::new();
        for (shard, count) in [("a", 20), ("b", 4), ("c", 20)] {
            let settlement = ShardSettlement::new("s", shard);
            let feed = tx.feed(settlement.clone());
            tokio::spawn(async move {
                for n in 0..count {
                    feed.send(record(shard, n)).await.unwrap();
                }
            });
            shards.push((settlement, count));
        }
        for (settlement, count) in &shards {
            settlement.wait_until(|p| p.settled >= *count).await;
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 44, "{workers:?}");
        let released = ["a", "b"]
            .iter()
            .map(|s| order.iter().position(|(o, n)| o == s && *n == 0).unwrap())
            .max()
            .unwrap();
        for start in released + 1..order.len() {
            let window = &order[start..(start + 6).min(order.len())];
            for shard in ["a", "b", "c"] {
                let more_later = order[start + window.len()..]
                    .iter()
                    .any(|(s, _)| s == shard);
                assert!(
                    !more_later || window.iter().any(|(s, _)| s == shard),
                    "{workers:?}: shard {shard} waited through {window:?}; order {order:?}"
                );
            }
        }
        drop(tx);
        handle.join().await;
    }
}
