//! The import's I/O on a fake KCL table, a memory lease store and a memory stream, on tokio's
//! paused clock: the liveness watch takes no wall-clock time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use kinesis_lease_core::{Checkpoint, SequenceNumber};
use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
use kinesis_stream_memory::MemoryStream;

use super::*;
use crate::KclRow;

const STREAM: &str = "orders";

/// A KCL table whose workers can be made to renew: every scan then bumps each lease's counter.
#[derive(Debug, Default)]
struct Inner {
    rows: Mutex<Vec<KclRow>>,
    live: AtomicBool,
    scans: AtomicUsize,
    /// Renewals start once this table has rows (a KCL worker coming back during the writes).
    live_once_written: Mutex<Option<MemoryLeaseTable>>,
}

#[derive(Debug, Clone, Default)]
struct FakeKcl(Arc<Inner>);

impl KclTable for FakeKcl {
    fn name(&self) -> &str {
        "orders-kcl"
    }

    fn scan(&self) -> kinesis_lease_core::BoxFuture<'_, Result<Vec<KclRow>, ImportError>> {
        self.0.scans.fetch_add(1, Ordering::SeqCst);
        let written = self
            .0
            .live_once_written
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| !t.is_empty());
        let mut rows = self.0.rows.lock().unwrap();
        if self.0.live.load(Ordering::SeqCst) || written {
            for row in rows.iter_mut().filter(|r| r.is_lease()) {
                row.counter += 1;
            }
        }
        let rows = rows.clone();
        Box::pin(async move { Ok(rows) })
    }
}

fn kcl_row(shard: &str, checkpoint: &str, sub: u64) -> KclRow {
    KclRow {
        owner: Some("kcl-worker-1".into()),
        checkpoint: Some(checkpoint.into()),
        checkpoint_subsequence: sub,
        entity_type: Some("LEASE".into()),
        ..KclRow::lease(shard, 30)
    }
}

struct World {
    kcl: FakeKcl,
    store: MemoryLeaseStore,
    kinesis: MemoryStream,
    /// The KCL's checkpoint of each shard: a record of it (Kinesis opens an iterator only at
    /// a sequence number of the shard).
    processed: [String; 2],
}

impl World {
    fn new() -> Self {
        let kinesis = MemoryStream::new();
        kinesis.create_stream(STREAM, 2).unwrap();
        let processed = ["shardId-000000000000", "shardId-000000000001"].map(|shard| {
            (0..)
                .map(|i| kinesis.put(STREAM, &format!("key-{i}"), "x").unwrap())
                .find(|stored| stored.shard == shard)
                .map(|stored| stored.sequence)
                .unwrap_or_default()
        });
        let kcl = FakeKcl::default();
        *kcl.0.rows.lock().unwrap() = vec![
            kcl_row("shardId-000000000000", &processed[0], 0),
            kcl_row("shardId-000000000001", &processed[1], 3),
            KclRow {
                entity_type: Some("WORKER_METRIC_STATS".into()),
                ..KclRow::lease("kcl-worker-1", 0)
            },
        ];
        Self {
            kcl,
            store: MemoryLeaseStore::new(),
            kinesis,
            processed,
        }
    }

    fn target(&self) -> Target<'_> {
        Target {
            store: &self.store,
            table: "orders-leases",
            kinesis: &self.kinesis,
        }
    }

    fn import(&self) -> KclImport {
        KclImport::new(self.kcl.clone())
    }

    async fn checkpoint(&self, shard: &str) -> Option<Checkpoint> {
        let key = LeaseKey::new(STREAM, shard).unwrap();
        self.store
            .read(&key)
            .await
            .unwrap()
            .and_then(|r| r.checkpoint)
    }
}

fn seq(n: &str, sub: u64) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, Some(sub)).unwrap())
}

#[tokio::test(start_paused = true)]
async fn an_import_writes_after_a_still_failover_time_and_a_second_is_a_no_op() {
    let world = World::new();
    let mut notes = Vec::new();
    let report = world
        .import()
        .run(world.target(), STREAM, |n| notes.push(n.to_owned()))
        .await
        .unwrap();
    assert_eq!(report.written(), 2);
    assert_eq!(report.watched, Some(DEFAULT_FAILOVER));
    assert_eq!(report.other_entities, 1);
    assert!(notes.iter().any(|n| n.contains("watching")), "{notes:?}");
    assert_eq!(
        world.checkpoint("shardId-000000000000").await,
        Some(seq(&world.processed[0], 0))
    );
    assert_eq!(
        world.checkpoint("shardId-000000000001").await,
        Some(seq(&world.processed[1], 3))
    );
    let epoch = world.store.epoch(STREAM).await.unwrap();
    assert!(epoch > 0, "running brokers are told");

    let scans = world.kcl.0.scans.load(Ordering::SeqCst);
    let again = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert_eq!(again.written(), 0);
    assert_eq!(again.watched, None, "nothing to write: no watch");
    assert!(again.steps.iter().all(|s| s.action == Action::Leave));
    assert_eq!(world.kcl.0.scans.load(Ordering::SeqCst), scans + 1);
    assert_eq!(
        world.store.epoch(STREAM).await.unwrap(),
        epoch,
        "a no-op bumps nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_live_kcl_is_refused_and_nothing_is_written() {
    let world = World::new();
    world.kcl.0.live.store(true, Ordering::SeqCst);
    let started = Instant::now();
    match world.import().run(world.target(), STREAM, |_| {}).await {
        Err(ImportError::KclRunning {
            movement, table, ..
        }) => {
            assert_eq!(table, "orders-kcl");
            assert_eq!(movement.owner.as_deref(), Some("kcl-worker-1"));
            assert!(movement.after > movement.before);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < DEFAULT_FAILOVER,
        "refused at the first movement"
    );
    assert!(world.store.table().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_forced_import_over_a_live_kcl_writes_with_a_warning() {
    let world = World::new();
    world.kcl.0.live.store(true, Ordering::SeqCst);
    let mut notes = Vec::new();
    let report = world
        .import()
        .force(true)
        .run(world.target(), STREAM, |n| notes.push(n.to_owned()))
        .await
        .unwrap();
    assert_eq!(report.written(), 2);
    assert!(
        report.warnings.iter().any(|w| w.contains("forced")),
        "{:?}",
        report.warnings
    );
    assert!(notes.iter().any(|n| n.starts_with("warning:")));
}

#[tokio::test(start_paused = true)]
async fn a_kcl_worker_coming_back_during_the_writes_is_an_error() {
    let world = World::new();
    *world.kcl.0.live_once_written.lock().unwrap() = Some(world.store.table().clone());
    match world.import().run(world.target(), STREAM, |_| {}).await {
        Err(ImportError::KclResumed { movement, .. }) => assert!(movement.after > movement.before),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_plans_without_watching_or_writing() {
    let world = World::new();
    let report = world.import().plan(world.target(), STREAM).await.unwrap();
    assert!(report.dry_run);
    assert_eq!(report.written(), 2, "what a real run would write");
    let kcl = format!("{}/3", world.processed[1]);
    assert_eq!(report.steps[1].kcl.as_deref(), Some(kcl.as_str()));
    assert_eq!(report.steps[1].action.verb(true), "create");
    assert!(world.store.table().is_empty());
    assert_eq!(world.kcl.0.scans.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_held_row_behind_the_kcl_is_refused_before_anything_is_written() {
    let world = World::new();
    let key = LeaseKey::new(STREAM, "shardId-000000000001").unwrap();
    assert!(world
        .store
        .create(&Lease::new(key.clone(), Vec::new()))
        .await
        .unwrap());
    let holder = kinesis_lease_core::Holder::new("broker-a", "t1");
    let take = kinesis_lease_core::Take::fenced(Duration::from_secs(10), 1);
    assert!(world
        .store
        .take(&key, &holder, &take)
        .await
        .unwrap()
        .is_written());
    match world.import().run(world.target(), STREAM, |_| {}).await {
        Err(ImportError::Refused { shard, reason, .. }) => {
            assert_eq!(shard, "shardId-000000000001");
            assert!(
                reason.contains("broker-a") && reason.contains("nothing was written"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        world.checkpoint("shardId-000000000000").await,
        None,
        "nothing written"
    );
    assert_eq!(
        world.kcl.0.scans.load(Ordering::SeqCst),
        1,
        "refused before watching"
    );
}

#[tokio::test(start_paused = true)]
async fn a_table_of_another_stream_is_refused() {
    let world = World::new();
    *world.kcl.0.rows.lock().unwrap() = vec![kcl_row("shardId-000000000042", "1", 0)];
    match world.import().plan(world.target(), STREAM).await {
        Err(ImportError::ForeignShards { shards, .. }) => {
            assert_eq!(shards, "shardId-000000000042")
        }
        other => panic!("{other:?}"),
    }
}

/// Kinesis that lists a memory stream's shards and holds none of the sequence numbers asked
/// about, as a stream other than the KCL application's would.
#[derive(Debug)]
struct Elsewhere(MemoryStream);

impl KinesisApi for Elsewhere {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> kinesis_lease_core::BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        self.0.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        _position: &'a StartAt,
    ) -> kinesis_lease_core::BoxFuture<'a, Result<String, ReaderError>> {
        Box::pin(async move {
            Err(ReaderError::ShardNotFound {
                stream: stream.to_owned(),
                shard: shard.to_owned(),
                operation: "GetShardIterator",
            })
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> kinesis_lease_core::BoxFuture<'a, Result<kinesis_stream_core::RecordsPage, ReaderError>>
    {
        self.0.get_records(stream, shard, iterator, limit)
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [kinesis_stream_core::PutEntry],
    ) -> kinesis_lease_core::BoxFuture<'a, Result<Vec<kinesis_stream_core::PutOutcome>, ReaderError>>
    {
        self.0.put_records(stream, entries)
    }
}

#[tokio::test(start_paused = true)]
async fn checkpoints_the_stream_does_not_hold_are_refused_before_watching() {
    let world = World::new();
    let elsewhere = Elsewhere(world.kinesis.clone());
    let target = Target {
        kinesis: &elsewhere,
        ..world.target()
    };
    for dry in [true, false] {
        let result = if dry {
            world.import().plan(target, STREAM).await
        } else {
            world.import().run(target, STREAM, |_| {}).await
        };
        match result {
            Err(ImportError::Unmappable { shard, reason, .. }) => {
                assert_eq!(shard, "shardId-000000000000");
                assert!(reason.contains("is `orders` the stream"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(world.store.table().is_empty());
    assert_eq!(
        world.kcl.0.scans.load(Ordering::SeqCst),
        2,
        "refused before watching"
    );
}
