//! Handler failures: errors and panics retried in place, attempts capped with skip or
//! dead-letter, and per-key order across retries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, Dispatcher, Handler, Record, RetryPolicy, ShardSettlement,
    Workers,
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

/// A dead-letter callback that fails leaves the record unsettled: the checkpoint stays before
/// it while later records are still handled.
#[tokio::test(start_paused = true)]
async fn failing_dead_letter_leaves_the_record_unsettled() {
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
                c.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(std::io::Error::other("dead-letter queue down")) }
            });
    let handle = Dispatcher::spawn(rx, handler, with_retry(Workers::Serial, retry)).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..4 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.wait_until(|p| p.settled == 3).await;
    assert_eq!(called.load(Ordering::SeqCst), 1);
    assert_eq!(*order.lock().unwrap(), vec![0, 2, 3]);
    let p = settlement.progress();
    assert_eq!((p.checkpoint.clone(), p.in_flight()), (Some(seq(0)), 1));
    drop((tx, feed));
    handle.join().await;
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
/// record stays unsettled, and its loop lives on to handle the records after it.
#[tokio::test(start_paused = true)]
async fn a_dead_letter_callback_that_panics_before_its_future_leaves_the_loop_alive() {
    for workers in [Workers::Serial, Workers::Unordered(2), Workers::ByKey(2)] {
        let attempts = Arc::default();
        let order = Arc::default();
        let handler = flaky(&attempts, &order, |id, _| (id == 1).then_some(false));
        let retry = RetryPolicy::default()
            .max_attempts(1)
            .then_dead_letter(|_delivery, _error| {
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
            feed.send(record("k", n)).await.unwrap();
        }
        settlement.wait_until(|p| p.settled == 5).await;
        let progress = settlement.progress();
        assert_eq!(progress.checkpoint, Some(seq(0)), "{workers:?}");
        assert!(!tx.is_closed(), "{workers:?}: the loop lives on");
        drop((tx, feed));
        handle.shutdown(Duration::from_millis(10)).await;
    }
}
