//! A `stream()` consumer through a planned hand-over: a delivery it holds counts as being
//! handled, so the hand-over waits for its ack, and the next owner neither overlaps it nor
//! handles it again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::{
    testing::MemoryStream, Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, StartAt,
};
use tokio::time::{sleep, Instant};
use tokio_stream::StreamExt;

const STREAM: &str = "s";

/// What happened to one record: who handled it, from when until when.
type Log = Arc<Mutex<Vec<(String, String, String, Instant, Instant)>>>;

/// `a` reads two shards through a stream and holds one delivery of each shard for 25 s before
/// acking it; `b` joins and asks for a shard. The hand-over waits for `a`'s ack (past its
/// 20 s settle wait, within the lease it then waits for held deliveries), so `b` starts on that shard only after `a` finished there,
/// and handles none of the records `a` acked.
#[tokio::test(start_paused = true)]
async fn a_hand_over_waits_for_a_delivery_a_stream_consumer_holds() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    for n in 0..40 {
        kinesis
            .put(STREAM, &format!("k{n}"), format!("r{n}"))
            .unwrap();
    }
    let table = MemoryLeaseTable::new();
    let log = Log::default();

    let mut a = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("a")
        .build()
        .unwrap();
    let mut deliveries = a
        .subscribe(STREAM)
        .start_at(StartAt::TrimHorizon)
        .stream()
        .unwrap();
    let a = a.start().await.unwrap();
    let a_log = log.clone();
    let consumer = tokio::spawn(async move {
        let mut slow_done = std::collections::BTreeSet::new();
        while let Some(d) = deliveries.next().await {
            // Each delivery is worked on beside the others, so both shards have one held
            // whichever shard b asks for. The first delivery of each shard is held for 25 s:
            // longer than a hand-over waits for deliveries to settle (two leases), shorter than
            // it then waits for those still held (one more lease).
            let slow = slow_done.insert(d.shard().to_owned());
            let log = a_log.clone();
            tokio::spawn(async move {
                let begun = Instant::now();
                if slow {
                    sleep(Duration::from_secs(25)).await;
                }
                record(&log, "a", &d, begun);
                d.ack();
            });
        }
    });
    // A lone instance takes one row at its first round and the rest at its next take tick.
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.stats().shards(STREAM).len(), 2);

    let mut b = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("b")
        .build()
        .unwrap();
    let b_log = log.clone();
    b.subscribe(STREAM)
        .start_at(StartAt::TrimHorizon)
        .handle(move |d: Delivery| {
            let log = b_log.clone();
            async move {
                record(&log, "b", &d, Instant::now());
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    let b = b.start().await.unwrap();
    sleep(Duration::from_secs(45)).await;
    let b_shards: Vec<String> = b
        .stats()
        .shards(STREAM)
        .iter()
        .map(|s| s.shard.clone())
        .collect();
    assert_eq!(
        b_shards.len(),
        1,
        "b got one shard: {b_shards:?}, a holds {:?}",
        a.stats()
            .shards(STREAM)
            .iter()
            .map(|s| (s.shard.clone(), s.in_flight))
            .collect::<Vec<_>>()
    );
    for n in 40..80 {
        kinesis
            .put(STREAM, &format!("k{n}"), format!("r{n}"))
            .unwrap();
    }
    sleep(Duration::from_secs(10)).await;

    let log = log.lock().unwrap().clone();
    let handled: std::collections::BTreeMap<String, Vec<&str>> =
        log.iter()
            .fold(Default::default(), |mut m, (who, _, payload, _, _)| {
                m.entry(payload.clone()).or_default().push(who.as_str());
                m
            });
    assert_eq!(handled.len(), 80, "every record handled");
    let twice: Vec<_> = handled.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "handled twice after a planned hand-over: {twice:?}"
    );
    // On the shard handed over, b began only after a's last delivery there was acked.
    let shard = &b_shards[0];
    let b_first = log
        .iter()
        .filter(|(who, sh, ..)| who == "b" && sh == shard)
        .map(|(.., begun, _)| *begun)
        .min()
        .expect("b handled records of its shard");
    let a_last = log
        .iter()
        .filter(|(who, sh, ..)| who == "a" && sh == shard)
        .map(|(.., ended)| *ended)
        .max()
        .expect("a handled records of that shard first");
    assert!(
        b_first >= a_last,
        "b began on {shard} at {b_first:?}, before a's last delivery there ended at {a_last:?}"
    );
    consumer.abort();
    a.shutdown().await;
    b.shutdown().await;
}

fn record(log: &Log, who: &str, d: &Delivery, begun: Instant) {
    log.lock().unwrap().push((
        who.to_owned(),
        d.shard().to_owned(),
        String::from_utf8_lossy(d.payload()).into_owned(),
        begun,
        Instant::now(),
    ));
}
