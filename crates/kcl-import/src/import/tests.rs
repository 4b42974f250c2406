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
    /// The table was deleted (after a cut-over).
    gone: AtomicBool,
    /// A live KCL worker that holds no lease takes shard 0's expired lease at its first
    /// scan at or after this time (its lease taker runs every twice the failover time).
    takes_at: Mutex<Option<Instant>>,
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
        if self.0.gone.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(ImportError::KclTableNotFound {
                    table: "orders-kcl".into(),
                })
            });
        }
        let taking = {
            let mut at = self.0.takes_at.lock().unwrap();
            let due = at.is_some_and(|at| Instant::now() >= at);
            if due {
                *at = None;
            }
            due
        };
        let written = self
            .0
            .live_once_written
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| !t.is_empty());
        let mut rows = self.0.rows.lock().unwrap();
        if taking {
            let taken = &mut rows[0];
            taken.counter += 1;
            taken.owner = Some("kcl-worker-idle".into());
        }
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
    assert_eq!(report.watched, Some(watch_window(DEFAULT_FAILOVER)));
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
    assert!(again.imported_before, "its own record");
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

/// Imports once (the cut-over), as every test below starts.
async fn cut_over(world: &World) {
    let report = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert_eq!(report.written(), 2);
}

async fn row(world: &World, shard: &str) -> Lease {
    let key = LeaseKey::new(STREAM, shard).unwrap();
    world.store.read(&key).await.unwrap().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_later_import_leaves_an_operators_reset_alone_until_the_kcl_runs_again() {
    let world = World::new();
    cut_over(&world).await;
    // The operator resets shard 0 to TRIM_HORIZON (kinesis-broker reset), brokers stopped.
    let key = LeaseKey::new(STREAM, "shardId-000000000000").unwrap();
    let counter = row(&world, "shardId-000000000000").await.counter;
    assert!(world
        .store
        .evict(&key, counter, Some(&Checkpoint::TrimHorizon), None)
        .await
        .unwrap()
        .is_written());
    // The same code deploys again: `.import_kcl(..)` runs at every start.
    let started = Instant::now();
    let again = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert!(again.imported_before);
    assert_eq!(again.written(), 0);
    assert_eq!(started.elapsed(), Duration::ZERO, "no watch, no wait");
    assert_eq!(
        world.checkpoint("shardId-000000000000").await,
        Some(Checkpoint::TrimHorizon),
        "the operator's reset stands"
    );
    // Control: the KCL ran again (a rollback, then a second cut-over): its new checkpoints
    // are imported, moving the row forward.
    for kcl in world.kcl.0.rows.lock().unwrap().iter_mut() {
        kcl.counter += 3;
    }
    let moved = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert!(!moved.imported_before);
    assert_eq!(
        world.checkpoint("shardId-000000000000").await,
        Some(seq(&world.processed[0], 0))
    );
}

#[tokio::test(start_paused = true)]
async fn a_later_import_does_not_refuse_a_row_a_broker_reads_behind_the_kcl() {
    let world = World::new();
    cut_over(&world).await;
    // `reset --force` to TRIM_HORIZON, and a broker takes and reads the row again.
    let key = LeaseKey::new(STREAM, "shardId-000000000001").unwrap();
    let counter = row(&world, "shardId-000000000001").await.counter;
    let evicted = world
        .store
        .evict(&key, counter, Some(&Checkpoint::TrimHorizon), None)
        .await
        .unwrap();
    let take = kinesis_lease_core::Take::fenced(Duration::from_secs(10), counter + 1);
    let holder = kinesis_lease_core::Holder::new("a", "t1");
    assert!(evicted.is_written());
    assert!(world
        .store
        .take(&key, &holder, &take)
        .await
        .unwrap()
        .is_written());
    // A second instance starts with the same `.import_kcl(..)`.
    let again = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert!(again.imported_before && again.written() == 0);
    assert_eq!(
        row(&world, "shardId-000000000001").await.owner.as_deref(),
        Some("a")
    );
}

#[tokio::test(start_paused = true)]
async fn a_later_import_starts_when_the_kcl_table_was_deleted_after_the_cut_over() {
    let world = World::new();
    cut_over(&world).await;
    world.kcl.0.gone.store(true, Ordering::SeqCst);
    let again = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert!(again.imported_before && again.written() == 0);
    // Control: never imported, and the KCL table is missing: an error naming it.
    let fresh = World::new();
    fresh.kcl.0.gone.store(true, Ordering::SeqCst);
    match fresh.import().run(fresh.target(), STREAM, |_| {}).await {
        Err(ImportError::KclTableNotFound { table }) => assert_eq!(table, "orders-kcl"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_zero_failover_time_is_refused_instead_of_turning_the_watch_off() {
    let world = World::new();
    for dry in [true, false] {
        let import = world.import().failover_time(Duration::ZERO);
        let result = if dry {
            import.plan(world.target(), STREAM).await
        } else {
            import.run(world.target(), STREAM, |_| {}).await
        };
        match result {
            Err(ImportError::InvalidSetting { setting, .. }) => {
                assert_eq!(setting, "failover time")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(world.store.table().is_empty());
    // Control: a short one is taken, and watched for twice its length.
    let report = world
        .import()
        .failover_time(Duration::from_secs(1))
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert_eq!(report.watched, Some(watch_window(Duration::from_secs(1))));
}

#[tokio::test(start_paused = true)]
async fn a_live_kcl_worker_holding_no_lease_is_seen_taking_an_expired_one() {
    // Its lease taker runs every twice the failover time: it takes shard 0's lease 15 s
    // after the first look, when a one-failover watch would already have closed and written.
    let world = World::new();
    *world.kcl.0.takes_at.lock().unwrap() = Some(Instant::now() + Duration::from_secs(15));
    match world.import().run(world.target(), STREAM, |_| {}).await {
        Err(ImportError::KclRunning { movement, .. }) => {
            assert_eq!(movement.owner.as_deref(), Some("kcl-worker-idle"))
        }
        other => panic!("{other:?}"),
    }
    assert!(world.store.table().is_empty(), "nothing written");
    // Control: a worker that takes only after the taker interval is a new start, not a
    // live worker (the import's final read still catches one during the writes).
    let late = World::new();
    *late.kcl.0.takes_at.lock().unwrap() = Some(Instant::now() + Duration::from_secs(60));
    assert_eq!(
        late.import()
            .run(late.target(), STREAM, |_| {})
            .await
            .unwrap()
            .written(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn throttled_and_failing_calls_are_retried_and_a_lasting_one_names_its_call() {
    let world = World::new();
    world
        .kinesis
        .throttle_next(kinesis_stream_memory::Op::ListShards, 2);
    world
        .kinesis
        .throttle_next(kinesis_stream_memory::Op::ShardIterator, 3);
    world
        .kinesis
        .fail_next(kinesis_stream_memory::Op::ShardIterator, 2);
    let report = world
        .import()
        .run(world.target(), STREAM, |_| {})
        .await
        .unwrap();
    assert_eq!(report.written(), 2);
    // A throttling that outlasts the retry window fails naming GetShardIterator and the shard.
    let lasting = World::new();
    lasting
        .kinesis
        .throttle_next(kinesis_stream_memory::Op::ShardIterator, 1_000_000);
    let started = Instant::now();
    let error = lasting
        .import()
        .run(lasting.target(), STREAM, |_| {})
        .await
        .unwrap_err();
    assert!(
        started.elapsed() >= DEFAULT_RETRY_WINDOW,
        "retried for the window"
    );
    assert_eq!(error.transient_operation(), Some("GetShardIterator"));
    assert_eq!(
        error.to_string(),
        "Kinesis GetShardIterator failed for shard `shardId-000000000000` of stream `orders`"
    );
    assert!(lasting.store.table().is_empty());
}
