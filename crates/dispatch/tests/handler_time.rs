//! Handler time per shard (`ShardSettlement::busy`), the load the fleet publishes: calls that
//! wait are timed whole, calls done at their first poll are sampled (one in
//! `BUSY_SAMPLE_EVERY`, counted that many times over), and a batch's time is shared among its
//! records' shards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_dispatch::{
    channel, BatchFailure, Delivery, DispatchConfig, Dispatcher, Handler, Record, ShardSettlement,
};
use kinesis_lease_core::SequenceNumber;

fn record(key: &str, n: u64) -> Record {
    let seq = SequenceNumber::new(format!("{}", 100 + n), None).unwrap();
    Record::new(format!("{key}#{n}"), key, seq)
}

async fn run(handler: Handler, shards: &[&str], per_shard: u64) -> Vec<Arc<ShardSettlement>> {
    let (tx, rx) = channel(64);
    let handle = Dispatcher::spawn(rx, handler, DispatchConfig::default()).unwrap();
    let settlements: Vec<_> = shards
        .iter()
        .map(|shard| ShardSettlement::new("s", *shard))
        .collect();
    let feeds: Vec<_> = settlements.iter().map(|s| tx.feed(s.clone())).collect();
    for n in 0..per_shard {
        for feed in &feeds {
            feed.send(record("k", n)).await.unwrap();
        }
    }
    for settlement in &settlements {
        settlement.all_settled().await;
    }
    drop((tx, feeds));
    handle.join().await;
    settlements
}

/// A handler that waits counts its whole time, on its own shard.
#[tokio::test(start_paused = true)]
async fn calls_that_wait_are_timed_whole_on_their_shard() {
    let handler = Handler::one(|d: Delivery| async move {
        let cost = if d.shard() == "hot" { 30 } else { 3 };
        tokio::time::sleep(Duration::from_millis(cost)).await;
        Ok::<(), std::io::Error>(())
    });
    let settlements = run(handler, &["hot", "cold"], 50).await;
    assert_eq!(settlements[0].busy(), Duration::from_millis(50 * 30));
    assert_eq!(settlements[1].busy(), Duration::from_millis(50 * 3));
}

/// A handler done at its first poll (blocking, as CPU work is) is sampled: the estimate is
/// held against the time the calls themselves measured, so a slow machine moves both alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_done_at_their_first_poll_are_sampled_without_bias() {
    let spent = Arc::new(AtomicU64::new(0));
    let counted = spent.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let started = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        counted.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        async { Ok::<(), std::io::Error>(()) }
    });
    let settlements = run(handler, &["only"], 800).await;
    let spent = Duration::from_nanos(spent.load(Ordering::Relaxed));
    let busy = settlements[0].busy();
    // 800 calls, one in 8 timed: 100 samples expected, fewer than 50 or more than 200 is a
    // chance of less than one in a million. A sample weighted 4 or 16 times fails; a loaded
    // machine would have to stall one sampled call by 130 ms to.
    assert!(
        busy >= spent / 2 && busy <= spent * 2,
        "estimated {busy:?} against {spent:?} spent"
    );
}

/// A call that works before it waits counts both parts: its first poll sampled, its wait whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_work_and_then_wait_count_both_parts() {
    let spent = Arc::new(AtomicU64::new(0));
    let counted = spent.clone();
    let handler = Handler::one(move |_d: Delivery| {
        let counted = counted.clone();
        async move {
            let started = std::time::Instant::now();
            std::thread::sleep(Duration::from_millis(3));
            tokio::time::sleep(Duration::from_millis(1)).await;
            counted.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Ok::<(), std::io::Error>(())
        }
    });
    let settlements = run(handler, &["only"], 400).await;
    let spent = Duration::from_nanos(spent.load(Ordering::Relaxed));
    let busy = settlements[0].busy();
    // Timing the wait alone (1 to 2 ms of the 4 to 5 each call spends) falls short of half.
    assert!(
        busy >= spent / 2 && busy <= spent * 2,
        "estimated {busy:?} against {spent:?} spent"
    );
}

/// A batch's time is shared evenly among its records, so among their shards by count.
#[tokio::test(start_paused = true)]
async fn a_batch_shares_its_time_among_its_records_shards() {
    let handler = Handler::batch(40, |batch: Vec<Delivery>| async move {
        tokio::time::sleep(Duration::from_millis(10) * batch.len() as u32).await;
        Ok::<(), BatchFailure>(())
    });
    let settlements = run(handler, &["a", "b"], 40).await;
    let (a, b) = (settlements[0].busy(), settlements[1].busy());
    assert_eq!(
        a + b,
        Duration::from_millis(80 * 10),
        "every record's share"
    );
    assert_eq!(a, b, "as many records of each");
}
