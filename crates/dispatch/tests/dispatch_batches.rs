//! Batch handlers: the size cap, the 50 ms window, and partial failures, on tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_dispatch::{
    channel, BatchFailure, Delivery, DispatchConfig, Dispatcher, Handler, Permanent, Record,
    RetryPolicy, ShardSettlement, Workers,
};
use kinesis_lease_core::SequenceNumber;

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::new(format!("{}", 100 + n), None).unwrap()
}

fn record(key: &str, n: u64) -> Record {
    Record::new(format!("{key}#{n}"), key, seq(n))
}

type Batches = Arc<Mutex<Vec<Vec<u64>>>>;

fn recording(max: usize, batches: &Batches) -> Handler {
    recording_after(max, batches, Duration::ZERO)
}

/// As [`recording`], each batch taking `delay` first.
fn recording_after(max: usize, batches: &Batches, delay: Duration) -> Handler {
    let b = batches.clone();
    Handler::batch(max, move |batch: Vec<Delivery>| {
        let b = b.clone();
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let ids = batch
                .iter()
                .map(|d| d.sequence().number().parse::<u64>().unwrap() - 100)
                .collect();
            b.lock().unwrap().push(ids);
            Ok(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn batches_are_capped_at_the_mount_size() {
    let (tx, rx) = channel(64);
    let batches = Batches::default();
    let handle = Dispatcher::spawn(rx, recording(4, &batches), DispatchConfig::default()).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..10 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(
        *batches.lock().unwrap(),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
    );
    drop((tx, feed));
    handle.join().await;
}

/// A batch takes what arrived within 50 ms of its first record, then goes.
#[tokio::test(start_paused = true)]
async fn batches_close_after_the_window() {
    let (tx, rx) = channel(64);
    let batches = Batches::default();
    let handle =
        Dispatcher::spawn(rx, recording(100, &batches), DispatchConfig::default()).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    feed.send(record("k", 0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    feed.send(record("k", 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(19)).await;
    feed.send(record("k", 2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await; // now 51 ms after the first
    feed.send(record("k", 3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    feed.send(record("k", 4)).await.unwrap();
    settlement.all_settled().await;
    assert_eq!(
        *batches.lock().unwrap(),
        vec![vec![0, 1, 2], vec![3], vec![4]]
    );
    drop((tx, feed));
    handle.join().await;
}

/// Records a batch names as failed are retried, with every later record of their keys; the
/// rest settle, and the checkpoint waits for the retried ones.
#[tokio::test(start_paused = true)]
async fn batch_item_failures_retry_the_named_records_and_their_key_followers() {
    let (tx, rx) = channel(64);
    let batches = Batches::default();
    let b = batches.clone();
    let handler = Handler::batch(10, move |batch: Vec<Delivery>| {
        let b = b.clone();
        async move {
            let ids: Vec<u64> = batch
                .iter()
                .map(|d| d.sequence().number().parse::<u64>().unwrap() - 100)
                .collect();
            let first = b.lock().unwrap().is_empty();
            b.lock().unwrap().push(ids.clone());
            if first {
                // Record 1 (key "a") fails on the first call.
                let at = ids.iter().position(|&i| i == 1).unwrap();
                return Err(BatchFailure::items([at], "record 1 failed"));
            }
            Ok(())
        }
    });
    let config = DispatchConfig {
        retry: RetryPolicy::default().backoff(Duration::from_millis(10), Duration::from_millis(10)),
        ..Default::default()
    };
    let handle = Dispatcher::spawn(rx, handler, config).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for (n, key) in ["b", "a", "b", "a", "c"].iter().enumerate() {
        feed.send(record(key, n as u64)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    settlement.all_settled().await;
    // 1 failed; 3 shares its key and comes after it, so it is retried too.
    assert_eq!(
        *batches.lock().unwrap(),
        vec![vec![0, 1, 2, 3, 4], vec![1, 3]]
    );
    assert_eq!(settlement.progress().checkpoint, Some(seq(4)));
    drop((tx, feed));
    handle.join().await;
}

/// Batches over lanes: each lane batches its own keys, in order.
#[tokio::test(start_paused = true)]
async fn by_key_batches_keep_key_order() {
    let (tx, rx) = channel(64);
    let batches = Batches::default();
    let config = DispatchConfig {
        workers: Workers::ByKey(4),
        ..Default::default()
    };
    let handle = Dispatcher::spawn(rx, recording(5, &batches), config).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..60 {
        feed.send(record(&format!("key-{}", n % 6), n))
            .await
            .unwrap();
    }
    settlement.all_settled().await;
    let batches = batches.lock().unwrap().clone();
    assert!(batches.iter().all(|b| b.len() <= 5));
    let mut per_key: std::collections::HashMap<u64, Vec<u64>> = Default::default();
    for id in batches.iter().flatten() {
        per_key.entry(id % 6).or_default().push(*id);
    }
    for ids in per_key.values() {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }
    assert_eq!(per_key.values().map(Vec::len).sum::<usize>(), 60);
    drop((tx, feed, batches));
    handle.join().await;
}

/// A `BatchFailure` naming an index outside the batch cannot be trusted: the whole batch is
/// retried (nothing settles on a wrong report), and the attempts are counted on its records.
#[tokio::test(start_paused = true)]
async fn out_of_range_failure_indices_retry_the_whole_batch() {
    let (tx, rx) = channel(64);
    let calls: Batches = Batches::default();
    let c = calls.clone();
    let handler = Handler::batch(8, move |batch: Vec<Delivery>| {
        let c = c.clone();
        async move {
            let ids: Vec<u64> = batch
                .iter()
                .map(|d| d.sequence().number().parse::<u64>().unwrap() - 100)
                .collect();
            let first = c.lock().unwrap().is_empty();
            c.lock().unwrap().push(ids);
            if first {
                // Index 7 does not exist in a batch of 3.
                Err(BatchFailure::items([7], "bookkeeping bug"))
            } else {
                Ok(())
            }
        }
    });
    let handle = Dispatcher::spawn(rx, handler, DispatchConfig::default()).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    for n in 0..3 {
        feed.send(record("k", n)).await.unwrap();
    }
    settlement.all_settled().await;
    assert_eq!(*calls.lock().unwrap(), vec![vec![0, 1, 2], vec![0, 1, 2]]);
    assert_eq!(settlement.progress().checkpoint, Some(seq(2)));
    drop((tx, feed));
    handle.join().await;
}

/// A batch holding records of two shards, one of which loses its lease mid-attempt: the
/// attempt is cancelled, and run again with the other shard's record alone, which settles (it
/// is never dropped with the lost shard's).
#[tokio::test(start_paused = true)]
async fn a_lost_shard_cancels_a_batch_attempt_and_the_rest_is_retried() {
    let (tx, rx) = channel(64);
    let calls: Batches = Batches::default();
    let c = calls.clone();
    let handler = Handler::batch(8, move |batch: Vec<Delivery>| {
        let c = c.clone();
        async move {
            let ids: Vec<u64> = batch
                .iter()
                .map(|d| d.sequence().number().parse::<u64>().unwrap() - 100)
                .collect();
            let first = c.lock().unwrap().is_empty();
            c.lock().unwrap().push(ids);
            if first {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok::<(), BatchFailure>(())
        }
    });
    let handle = Dispatcher::spawn(rx, handler, DispatchConfig::default()).unwrap();
    let (lost, kept) = (
        ShardSettlement::new("s", "shard-lost"),
        ShardSettlement::new("s", "shard-kept"),
    );
    tx.feed(lost.clone()).send(record("a", 0)).await.unwrap();
    tx.feed(kept.clone()).send(record("b", 1)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    lost.abandon();
    kept.all_settled().await;
    assert_eq!(*calls.lock().unwrap(), vec![vec![0, 1], vec![1]]);
    assert_eq!(
        lost.progress().settled,
        0,
        "the lost shard's record stays unsettled"
    );
    drop(tx);
    handle.join().await;
}

/// A shutdown while a lane gathers a batch handles that batch: dropping it would leave a gap
/// before a later record of the same shard that another lane handled, and the next owner
/// would handle that record again.
#[tokio::test(start_paused = true)]
async fn a_batch_being_gathered_at_shutdown_is_handled() {
    for direct in [true, false] {
        let config = DispatchConfig {
            workers: Workers::ByKey(2),
            ..Default::default()
        };
        let (tx, rx) = if direct {
            kinesis_dispatch::channel_for(64, &config)
        } else {
            channel(64)
        };
        let batches = Batches::default();
        let handle = Dispatcher::spawn(rx, recording(10, &batches), config).unwrap();
        let lane = |k: &str| kinesis_dispatch::lane_of(k, 2);
        let b = (0..)
            .map(|i| format!("b{i}"))
            .find(|k| lane(k) == 1)
            .unwrap();
        let a = (0..)
            .map(|i| format!("a{i}"))
            .find(|k| lane(k) == 0)
            .unwrap();
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        // Lane 1 gathers records 0 and 2 (its batch closes at 50 ms); lane 0 starts gathering
        // record 1 at 40 ms, and is still gathering when the shutdown comes at 60 ms.
        feed.send(record(&b, 0)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        feed.send(record(&a, 1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        feed.send(record(&b, 2)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
        assert!(handle.shutdown(Duration::from_secs(5)).await);
        let mut handled: Vec<u64> = batches.lock().unwrap().concat();
        handled.sort_unstable();
        assert_eq!(handled, vec![0, 1, 2], "fed directly: {direct}");
        assert_eq!(
            settlement.progress().checkpoint,
            Some(seq(2)),
            "fed directly: {direct}"
        );
    }
}

/// A batch that names one record as failing for good (`BatchFailure::items` with a
/// [`Permanent`] error) sends that record alone to the dead letter: the later records of its
/// key, retried with it only to keep the key's order, are never named and are handled on
/// their next attempt. `BatchFailure::all` names no record (a `?` in a batch handler), so a
/// permanent error there is retried like any failure rather than dead-lettering the batch.
/// Before, the key's later records went to the dead letter with it, and an `all` sent the
/// whole batch there at its first failure.
#[tokio::test(start_paused = true)]
async fn a_permanent_failure_in_a_batch_dead_letters_only_the_records_it_names() {
    for (workers, name) in [
        (Workers::Serial, true),
        (Workers::ByKey(1), true),
        (Workers::Serial, false),
    ] {
        let handled = Batches::default();
        let h = handled.clone();
        let handler = Handler::batch(10, move |batch: Vec<Delivery>| {
            let h = h.clone();
            async move {
                let ids: Vec<u64> = batch
                    .iter()
                    .map(|d| d.sequence().number().parse::<u64>().unwrap() - 100)
                    .collect();
                if let Some(at) = ids.iter().position(|&id| id == 1) {
                    let error = Permanent::new("record 1 can never be handled");
                    return Err(if name {
                        BatchFailure::items([at], error)
                    } else {
                        BatchFailure::all(error)
                    });
                }
                h.lock().unwrap().push(ids);
                Ok(())
            }
        });
        let dead: Arc<Mutex<Vec<u64>>> = Arc::default();
        let d = dead.clone();
        let retry = RetryPolicy::default().then_dead_letter(move |delivery, _error| {
            let d = d.clone();
            async move {
                let id = delivery.sequence().number().parse::<u64>().unwrap() - 100;
                d.lock().unwrap().push(id);
                Ok::<(), std::io::Error>(())
            }
        });
        let config = DispatchConfig {
            workers,
            retry,
            ..Default::default()
        };
        let (tx, rx) = kinesis_dispatch::channel_for(64, &config);
        let handle = Dispatcher::spawn(rx, handler, config).unwrap();
        let settlement = ShardSettlement::new("s", "shard-0");
        let feed = tx.feed(settlement.clone());
        feed.send(record("k", 1)).await.unwrap();
        feed.send(record("k", 2)).await.unwrap();
        feed.send(record("j", 3)).await.unwrap();
        if name {
            settlement.all_settled().await;
            assert_eq!(*dead.lock().unwrap(), vec![1], "{workers:?}");
            let handled: Vec<u64> = handled.lock().unwrap().concat();
            assert!(handled.contains(&2), "{workers:?}: {handled:?}");
            assert_eq!(
                settlement.progress().checkpoint,
                Some(seq(3)),
                "{workers:?}"
            );
        } else {
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(dead.lock().unwrap().is_empty(), "no record was named");
            assert_eq!(settlement.progress().settled, 0);
        }
        drop((tx, feed));
        handle.shutdown(Duration::from_millis(10)).await;
    }
}

/// Batch handlers under `workers(2)`: while one loop runs a slow batch, a record that arrives
/// after it started is handled by the other loop within the window, not queued behind the slow
/// batch (simulation seed 145969: a router that kept filling the busy loop's queue left a
/// shard's record waiting 13 s for another shard's slow batch while the second loop idled).
#[tokio::test(start_paused = true)]
async fn a_record_after_a_slow_batch_started_is_handled_by_an_idle_loop() {
    let (tx, rx) = channel(64);
    let handled: Arc<Mutex<Vec<(String, tokio::time::Instant)>>> = Arc::default();
    let seen = handled.clone();
    let handler = Handler::batch(10, move |batch: Vec<Delivery>| {
        let seen = seen.clone();
        async move {
            if batch.iter().any(|d| d.shard() == "slow") {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            let now = tokio::time::Instant::now();
            for d in &batch {
                seen.lock().unwrap().push((d.shard().to_owned(), now));
            }
            Ok(())
        }
    });
    let config = DispatchConfig {
        workers: Workers::Unordered(2),
        ..DispatchConfig::default()
    };
    let handle = Dispatcher::spawn(rx, handler, config).unwrap();
    let slow = ShardSettlement::new("s", "slow");
    let fast = ShardSettlement::new("s", "fast");
    let (slow_feed, fast_feed) = (tx.feed(slow.clone()), tx.feed(fast.clone()));
    slow_feed.send(record("a", 0)).await.unwrap();
    // The slow batch's window closes; it runs for 10 s from then.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = tokio::time::Instant::now();
    for n in 1..4 {
        fast_feed.send(record("b", n)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    fast.all_settled().await;
    let waited = handled
        .lock()
        .unwrap()
        .iter()
        .filter(|(shard, _)| shard == "fast")
        .map(|(_, at)| *at - sent)
        .max()
        .unwrap();
    assert!(
        waited < Duration::from_secs(2),
        "the idle loop handles them: the last 1 s after the first was sent, plus a window; \
         waited {waited:?}"
    );
    slow.all_settled().await;
    drop((tx, slow_feed, fast_feed));
    handle.join().await;
}

/// Batch handlers under `workers(2)` at shutdown: a batch being gathered is handled (its loop
/// goes on gathering to its window's end), a loop running a batch finishes it, and what is
/// still in the shared channel is dropped unsettled: it comes after everything taken, so the
/// checkpoint stands at the end of what was handled and nothing handled is handled again.
#[tokio::test(start_paused = true)]
async fn unordered_batches_at_shutdown_leave_the_checkpoint_after_what_was_handled() {
    let (tx, rx) = channel(64);
    let batches = Batches::default();
    // Each batch takes 1 s: both loops are busy when the shutdown comes.
    let handler = recording_after(2, &batches, Duration::from_secs(1));
    let config = DispatchConfig {
        workers: Workers::Unordered(2),
        ..DispatchConfig::default()
    };
    let handle = Dispatcher::spawn(rx, handler, config).unwrap();
    let settlement = ShardSettlement::new("s", "shard-0");
    let feed = tx.feed(settlement.clone());
    // Two full batches taken at once (0, 1 and 2, 3), both running for 1 s; 4 and 5 wait in
    // the channel.
    for n in 0..6 {
        feed.send(record("k", n)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(handle.shutdown(Duration::from_secs(5)).await);
    let mut handled: Vec<u64> = batches.lock().unwrap().concat();
    handled.sort_unstable();
    assert_eq!(handled, vec![0, 1, 2, 3], "the batches taken, and no more");
    assert_eq!(
        settlement.progress().checkpoint,
        Some(seq(3)),
        "after what was handled, before what was dropped"
    );
}
