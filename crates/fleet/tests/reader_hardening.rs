//! Regression tests for issue 12 that need the shard reader's own settings: the bounded
//! settlement window (defect 8), which the broker does not expose. Paused time, a
//! `MemoryStream`, the default start position (`LATEST`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::{
    channel, Delivery, DispatchConfig, Dispatcher, Handler, RetryPolicy, Workers,
};
use kinesis_fleet::Coordinator;
use kinesis_lease_core::{Checkpoint, SequenceNumber};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_core::StartAt;
use kinesis_stream_memory::MemoryStream;

const SHARD_0: &str = "shardId-000000000000";

/// Defect 8: a record that never settles (retried forever under `workers(4)`, while the
/// records after it settle) stops the reading of its shard once the settlement window holds
/// `max_unsettled` entries, and the shard's stats report it as stuck (sequence, attempts,
/// window). Once it settles, reading resumes and every record is handled.
#[tokio::test(start_paused = true)]
async fn a_record_that_never_settles_fills_a_bounded_window_and_is_reported_stuck() {
    const WINDOW: usize = 8;
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let mut config = config("s", "a", StartAt::Latest);
    config.max_unsettled = WINDOW;

    let poisoned = Arc::new(AtomicBool::new(true));
    let log = Log::default();
    let handler = {
        let (poisoned, log) = (poisoned.clone(), log.clone());
        Handler::one(move |d: Delivery| {
            let (poisoned, log) = (poisoned.clone(), log.clone());
            async move {
                let payload = String::from_utf8_lossy(d.payload()).into_owned();
                if payload == "poison" && poisoned.load(Ordering::SeqCst) {
                    return Err(std::io::Error::other("this record does not settle"));
                }
                log.lock().unwrap().push(Seen {
                    owner: "a".into(),
                    shard: d.shard().to_owned(),
                    key: d.partition_key().to_owned(),
                    sequence: d.sequence().to_string(),
                    payload,
                });
                Ok(())
            }
        })
    };
    let (sender, receiver) = channel(64);
    let dispatch = Dispatcher::spawn(
        receiver,
        handler,
        DispatchConfig {
            workers: Workers::Unordered(4),
            retry: RetryPolicy::default()
                .backoff(Duration::from_millis(100), Duration::from_millis(500)),
            ..Default::default()
        },
    )
    .unwrap();
    let coordinator = Coordinator::spawn(
        config,
        Arc::new(kinesis.clone()),
        Arc::new(MemoryLeaseStore::new()),
        sender,
    );
    let consumer = Consumer {
        coordinator,
        dispatch,
        log: log.clone(),
    };
    tokio::time::sleep(Duration::from_secs(2)).await; // opened at the tip
    let poison = kinesis.put("s", "poison-key", "poison").unwrap().sequence;
    let poison = SequenceNumber::new(poison, None).unwrap();
    put_many(&kinesis, "s", 5, 0, 40);
    tokio::time::sleep(Duration::from_secs(10)).await;

    let stats = consumer.coordinator.stats();
    assert_eq!(stats.len(), 1);
    let shard = &stats[0];
    assert_eq!(
        (shard.delivered, shard.window),
        (WINDOW as u64, WINDOW as u64),
        "reading stopped with a full window"
    );
    // The others settle, but for one that a worker may have taken and not yet handled.
    let handled = log.lock().unwrap().len();
    assert!(
        (WINDOW - 2..WINDOW).contains(&handled),
        "{handled} handled with a window of {WINDOW}"
    );
    let stuck = shard.stuck.clone().expect("the stuck record is reported");
    assert_eq!(
        (stuck.shard.as_str(), &stuck.sequence, stuck.window),
        (SHARD_0, &poison, WINDOW as u64)
    );
    assert!(
        stuck.attempts >= 2,
        "failed attempts counted: {}",
        stuck.attempts
    );
    assert!(
        !matches!(shard.checkpoint, Some(Checkpoint::Sequence(_))),
        "no checkpoint passes the stuck record: {:?}",
        shard.checkpoint
    );

    poisoned.store(false, Ordering::SeqCst);
    wait_for_count(&log, 41, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stats = consumer.coordinator.stats();
    assert_eq!(stats[0].stuck, None);
    assert_eq!(stats[0].delivered, 41);
    consumer.stop().await;
    assert_exactly_once(&log, 41);
}
