//! Start positions, checkpoints and the MemoryStream's iterator types, on paused time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::Workers;
use kinesis_lease_core::{Checkpoint, LeaseKey, LeaseStore, ManualClock};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_core::{KinesisApi, StartAt};
use kinesis_stream_memory::MemoryStream;

#[tokio::test(start_paused = true)]
async fn memory_stream_supports_every_iterator_type() {
    let clock = ManualClock::new(1_000_000);
    let kinesis = MemoryStream::new().with_clock(clock.clone());
    kinesis.create_stream("s", 1).unwrap();
    let mut seqs = Vec::new();
    for i in 0..10 {
        let seq = kinesis.put("s", "k", format!("r{i}")).unwrap().sequence;
        seqs.push(seq);
        clock.advance(Duration::from_secs(1));
    }
    let shard = "shardId-000000000000";
    let read = |position: StartAt| {
        let kinesis = kinesis.clone();
        async move {
            let it = kinesis.shard_iterator("s", shard, &position).await.unwrap();
            let page = kinesis.get_records("s", shard, &it, 100).await.unwrap();
            page.records
                .iter()
                .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
                .collect::<Vec<_>>()
        }
    };
    let seq = |i: usize| kinesis_lease_core::SequenceNumber::new(seqs[i].clone(), None).unwrap();
    assert_eq!(read(StartAt::TrimHorizon).await.len(), 10);
    assert!(read(StartAt::Latest).await.is_empty());
    assert_eq!(
        read(StartAt::at_millis(1_000_000 + 7_000)).await,
        ["r7", "r8", "r9"]
    );
    assert_eq!(read(StartAt::AtSequence(seq(8))).await, ["r8", "r9"]);
    assert_eq!(read(StartAt::AfterSequence(seq(8))).await, ["r9"]);
    // Limit and MillisBehindLatest.
    let it = kinesis
        .shard_iterator("s", shard, &StartAt::TrimHorizon)
        .await
        .unwrap();
    let page = kinesis.get_records("s", shard, &it, 4).await.unwrap();
    assert_eq!(page.records.len(), 4);
    assert_eq!(page.millis_behind, Some(6_000), "r4 arrived 6 s before now");
    let page = kinesis
        .get_records("s", shard, page.next_iterator.as_deref().unwrap(), 100)
        .await
        .unwrap();
    assert_eq!((page.records.len(), page.millis_behind), (6, Some(0)));
    // Iterators expire after 5 minutes.
    clock.advance(Duration::from_secs(301));
    let err = kinesis
        .get_records("s", shard, page.next_iterator.as_deref().unwrap(), 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            kinesis_stream_core::ReaderError::ExpiredIterator { .. }
        ),
        "{err}"
    );
}

async fn consume_from(position: StartAt) -> Vec<String> {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    put_many(&kinesis, "s", 10, 0, 40);
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let consumer = start(&kinesis, store, config("s", "a", position), Workers::Serial);
    tokio::time::sleep(Duration::from_secs(3)).await;
    put_many(&kinesis, "s", 10, 40, 20);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = consumer.log.clone();
    consumer.stop().await;
    let mut payloads: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    payloads.sort();
    payloads
}

#[tokio::test(start_paused = true)]
async fn start_at_horizon_reads_everything_and_tip_only_new_records() {
    assert_eq!(consume_from(StartAt::TrimHorizon).await.len(), 60);
    let latest = consume_from(StartAt::Latest).await;
    assert_eq!(latest.len(), 20);
    assert!(latest
        .iter()
        .all(|p| p.rsplit('#').next().unwrap().parse::<usize>().unwrap() >= 40));
}

/// A second broker on the same table resumes after the first one's final checkpoints: no
/// record is handled twice and none is missed; `start_at` does not apply over a checkpoint.
#[tokio::test(start_paused = true)]
async fn checkpoints_resume_exactly_after_a_graceful_stop() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 4).unwrap();
    let table = kinesis_lease_memory::MemoryLeaseTable::new();
    put_many(&kinesis, "s", 10, 0, 100);
    let first = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::over(&table)),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    wait_for_count(&first.log, 100, Duration::from_secs(30)).await;
    let log = first.log.clone();
    first.stop().await;
    let store = MemoryLeaseStore::over(&table);
    for shard in 0..4 {
        let row = store
            .read(&LeaseKey::new("s", format!("shardId-{shard:012}")).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.owner, None, "released");
        assert!(
            matches!(row.checkpoint, Some(Checkpoint::Sequence(_))),
            "{row:?}"
        );
    }
    put_many(&kinesis, "s", 10, 100, 50);
    let second = common::start_with_log(
        &kinesis,
        Arc::new(store),
        config("s", "b", StartAt::TrimHorizon),
        Workers::Serial,
        log.clone(),
    );
    wait_for_count(&log, 150, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    second.stop().await;
    let mut payloads: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.payload.clone())
        .collect();
    let total = payloads.len();
    payloads.sort();
    payloads.dedup();
    assert_eq!(
        (total, payloads.len()),
        (150, 150),
        "no duplicate, nothing missed"
    );
}

/// `reposition` starts over stored checkpoints, once.
#[tokio::test(start_paused = true)]
async fn reposition_overrides_stored_checkpoints() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let table = kinesis_lease_memory::MemoryLeaseTable::new();
    put_many(&kinesis, "s", 4, 0, 20);
    let first = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::over(&table)),
        config("s", "a", StartAt::TrimHorizon),
        Workers::Serial,
    );
    wait_for_count(&first.log, 20, Duration::from_secs(30)).await;
    first.stop().await;
    let mut cfg = config("s", "b", StartAt::Latest);
    cfg.reposition = Some(StartAt::TrimHorizon);
    let second = start(
        &kinesis,
        Arc::new(MemoryLeaseStore::over(&table)),
        cfg,
        Workers::Serial,
    );
    wait_for_count(&second.log, 20, Duration::from_secs(30)).await;
    second.stop().await;
}
