//! Enhanced fan-out on `MemoryStream`: shards read by SubscribeToShard deliver exactly what
//! polling delivers, from the default start and every other, across subscription renewals,
//! dropped connections, throttled subscribes, takeovers, hand-overs, shard ends and KPL
//! aggregates. On paused time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kinesis_dispatch::Workers;
use kinesis_lease_core::LeaseStore;
use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
use kinesis_shard_reader::{KinesisApi, MemoryStream, Op, ReaderConfig, ReaderError, StartAt};

fn fan_out(mut config: ReaderConfig) -> ReaderConfig {
    config.fan_out = Some("app".to_owned());
    config
}

/// An instance reading stream `s` by fan-out from the horizon, over a store of its own on
/// `table`, recording into `log`.
fn by_fan_out(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    workers: Workers,
    log: &Log,
) -> Consumer {
    start_with_log(
        kinesis,
        Arc::new(MemoryLeaseStore::over(table)),
        fan_out(config("s", owner, StartAt::TrimHorizon)),
        workers,
        log.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn fan_out_from_the_default_start_delivers_everything_once_without_polling() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    // The default start: LATEST.
    let consumer = start(
        &kinesis,
        store,
        fan_out(ReaderConfig::new("s", "a")),
        Workers::ByKey(4),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(consumer.coordinator.held().len(), 2);
    assert_eq!(kinesis.live_subscriptions(), 2);
    for round in 0..5 {
        put_many(&kinesis, "s", 9, round * 100, 100);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    wait_for_count(&consumer.log, 500, Duration::from_secs(30)).await;
    assert_exactly_once(&consumer.log, 500);
    for (key, ns) in per_key(&consumer.log) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {ns:?}"
        );
    }
    assert_eq!(kinesis.calls(Op::GetRecords), 0, "nothing was polled");
    assert_eq!(kinesis.calls(Op::ShardIterator), 0);
    consumer.stop().await;
    assert_eq!(
        kinesis.live_subscriptions(),
        0,
        "stopping ends the subscriptions"
    );
}

#[tokio::test(start_paused = true)]
async fn subscriptions_are_renewed_and_recover_from_cuts_and_throttling() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    put_many(&kinesis, "s", 5, 0, 200);
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store,
        fan_out(config("s", "a", StartAt::TrimHorizon)),
        Workers::Unordered(3),
    );
    wait_for_count(&consumer.log, 200, Duration::from_secs(30)).await;
    // Twelve minutes with records now and then: each subscription's 5 minutes run out twice,
    // connections are cut twice, and subscribes are throttled and refused in between.
    let mut put = 200;
    for minute in 0..12 {
        put_many(&kinesis, "s", 5, put, 20);
        put += 20;
        if minute == 3 || minute == 8 {
            kinesis.throttle_next(Op::SubscribeToShard, 3);
            kinesis.fail_next(Op::SubscribeToShard, 2);
            kinesis.cut_subscriptions();
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    // Past the 5 minutes of the subscriptions made after the last cut.
    tokio::time::sleep(Duration::from_secs(120)).await;
    put_many(&kinesis, "s", 5, put, 20);
    put += 20;
    wait_for_count(&consumer.log, put, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_exactly_once(&consumer.log, put);
    // Per shard: the first subscribe, one after each cut, one when the last subscription's
    // 5 minutes ran out; and the 5 calls refused in each fault round.
    let subscribes = kinesis.calls(Op::SubscribeToShard);
    assert!(subscribes >= 2 * 4 + 2 * 5, "{subscribes} subscribes");
    assert_eq!(kinesis.live_subscriptions(), 2);
    consumer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_graceful_hand_over_by_fan_out_delivers_nothing_twice() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 3).unwrap();
    let table = MemoryLeaseTable::default();
    let log = Log::default();
    let a = by_fan_out(&kinesis, &table, "a", Workers::ByKey(3), &log);
    put_many(&kinesis, "s", 11, 0, 300);
    wait_for_count(&log, 300, Duration::from_secs(30)).await;
    let b = by_fan_out(&kinesis, &table, "b", Workers::ByKey(3), &log);
    put_many(&kinesis, "s", 11, 300, 300);
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.stop().await;
    put_many(&kinesis, "s", 11, 600, 300);
    wait_for_count(&log, 900, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_exactly_once(&log, 900);
    assert_eq!(b.coordinator.held().len(), 3);
    for (key, ns) in per_key(&log) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {ns:?}"
        );
    }
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_a_crash_the_next_owner_subscribes_from_the_checkpoint() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let table = MemoryLeaseTable::default();
    let log = Log::default();
    let a = by_fan_out(&kinesis, &table, "a", Workers::Serial, &log);
    put_many(&kinesis, "s", 7, 0, 400);
    wait_for_count(&log, 400, Duration::from_secs(30)).await;
    // Checkpoints written at the next renewal.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let b = by_fan_out(&kinesis, &table, "b", Workers::Serial, &log);
    a.crash();
    put_many(&kinesis, "s", 7, 400, 200);
    wait_for_distinct(&log, 600, Duration::from_secs(60)).await;
    // Everything after the checkpoint, and nothing before it, reached the new owner.
    let log = log.lock().unwrap().clone();
    let by_b: Vec<_> = log.iter().filter(|s| s.owner == "b").collect();
    assert!(
        by_b.iter().all(|s| s
            .payload
            .rsplit('#')
            .next()
            .unwrap()
            .parse::<usize>()
            .unwrap()
            >= 400),
        "b re-read records checkpointed before the crash"
    );
    assert_eq!(b.coordinator.held().len(), 2);
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_split_read_by_fan_out_reads_the_children_after_the_parent() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let consumer = start(
        &kinesis,
        store,
        fan_out(ReaderConfig::new("s", "a")),
        Workers::ByKey(2),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    put_many(&kinesis, "s", 13, 0, 200);
    kinesis.split_evenly("s", "shardId-000000000000").unwrap();
    put_many(&kinesis, "s", 13, 200, 200);
    wait_for_count(&consumer.log, 400, Duration::from_secs(60)).await;
    assert_exactly_once(&consumer.log, 400);
    for (key, ns) in per_key(&consumer.log) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {ns:?}"
        );
    }
    // The parent ended (SHARD_END), both children are held.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(consumer.coordinator.held().len(), 2);
    assert_eq!(kinesis.calls(Op::GetRecords), 0);
    consumer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_consumer_is_registered_once_and_shared_by_instances() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let table = MemoryLeaseTable::default();
    let log = Log::default();
    let a = by_fan_out(&kinesis, &table, "a", Workers::Serial, &log);
    let b = by_fan_out(&kinesis, &table, "b", Workers::Serial, &log);
    put_many(&kinesis, "s", 7, 0, 100);
    wait_for_count(&log, 100, Duration::from_secs(30)).await;
    let consumer = kinesis.describe_consumer("s", "app").await.unwrap();
    assert!(consumer.active);
    assert!(consumer.arn.contains("stream/s/consumer/app"));
    assert_eq!(kinesis.live_subscriptions(), 2);
    a.stop().await;
    b.stop().await;
    // Never deregistered by the library: other instances share it.
    assert!(kinesis.describe_consumer("s", "app").await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn kpl_aggregates_by_fan_out_are_delivered_once_across_a_hand_over() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let table = MemoryLeaseTable::default();
    let log = Log::default();
    let a = by_fan_out(&kinesis, &table, "a", Workers::ByKey(3), &log);
    put_aggregated(&kinesis, 5, 0, 250, 40, None).await;
    wait_for_count(&log, 250, Duration::from_secs(30)).await;
    let b = by_fan_out(&kinesis, &table, "b", Workers::ByKey(3), &log);
    put_aggregated(&kinesis, 5, 250, 250, 40, None).await;
    a.stop().await;
    put_aggregated(&kinesis, 5, 500, 250, 40, None).await;
    wait_for_count(&log, 750, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_exactly_once(&log, 750);
    let stats = b.coordinator.stats();
    assert_eq!(stats.iter().map(|s| s.kpl.malformed).sum::<u64>(), 0);
    for (key, ns) in per_key(&log) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {ns:?}"
        );
    }
    b.stop().await;
}

/// The four polling calls of `KinesisApi`, forwarded to the `MemoryStream` in `self.$field`.
macro_rules! forward_polling {
    ($field:tt) => {
        fn list_shards<'a>(
            &'a self,
            stream: &'a str,
        ) -> kinesis_lease_core::BoxFuture<'a, Result<Vec<kinesis_shard_reader::Shard>, ReaderError>>
        {
            self.$field.list_shards(stream)
        }
        fn shard_iterator<'a>(
            &'a self,
            stream: &'a str,
            shard: &'a str,
            position: &'a StartAt,
        ) -> kinesis_lease_core::BoxFuture<'a, Result<String, ReaderError>> {
            self.$field.shard_iterator(stream, shard, position)
        }
        fn get_records<'a>(
            &'a self,
            stream: &'a str,
            shard: &'a str,
            iterator: &'a str,
            limit: usize,
        ) -> kinesis_lease_core::BoxFuture<'a, Result<kinesis_shard_reader::RecordsPage, ReaderError>>
        {
            self.$field.get_records(stream, shard, iterator, limit)
        }
        fn put_records<'a>(
            &'a self,
            stream: &'a str,
            entries: &'a [kinesis_shard_reader::PutEntry],
        ) -> kinesis_lease_core::BoxFuture<
            'a,
            Result<Vec<kinesis_shard_reader::PutOutcome>, ReaderError>,
        > {
            self.$field.put_records(stream, entries)
        }
    };
}

/// A `KinesisApi` that only polls (a user's own implementation written before fan-out).
#[derive(Debug)]
struct PollingOnly(MemoryStream);

impl KinesisApi for PollingOnly {
    forward_polling!(0);
}

#[tokio::test(start_paused = true)]
async fn fan_out_over_an_api_without_it_is_a_typed_error_and_takes_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let (sender, _receiver) = kinesis_dispatch::channel(64);
    let coordinator = kinesis_shard_reader::Coordinator::spawn(
        fan_out(ReaderConfig::new("s", "a")),
        Arc::new(PollingOnly(kinesis.clone())),
        store.clone(),
        sender,
    );
    let error = tokio::time::timeout(Duration::from_secs(10), coordinator.failed())
        .await
        .expect("the subscription fails");
    assert!(
        matches!(&*error, ReaderError::Refused { operation: "RegisterStreamConsumer", resource, .. } if resource == "s"),
        "{error:?}"
    );
    assert!(coordinator.held().is_empty());
    assert!(store
        .list("s")
        .await
        .unwrap()
        .iter()
        .all(|l| l.owner.is_none()));
}

/// A consumer deregistered while a closed parent shard is still being read: ResourceNotFound
/// on the subscription means the consumer is gone, not the shard. It is registered again and
/// the rest of the parent is read; concluding the shard ended would lose its tail.
#[tokio::test(start_paused = true)]
async fn a_deregistered_consumer_is_registered_again_and_nothing_is_lost() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    // More than one event's worth (10,000) in the parent, which is closed by a split.
    put_many(&kinesis, "s", 17, 0, 10_500);
    kinesis.split_evenly("s", "shardId-000000000000").unwrap();
    put_many(&kinesis, "s", 17, 10_500, 100);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let (g, s) = (gate.clone(), seen.clone());
    let handler = kinesis_dispatch::Handler::one(move |d: kinesis_dispatch::Delivery| {
        let (g, s) = (g.clone(), s.clone());
        async move {
            // The first record waits until the test has deregistered the consumer.
            let first = s.lock().unwrap().is_empty();
            if first {
                g.acquire().await.unwrap().forget();
            }
            s.lock()
                .unwrap()
                .insert(String::from_utf8_lossy(d.payload()).into_owned());
            Ok::<(), std::io::Error>(())
        }
    });
    let (sender, receiver) = kinesis_dispatch::channel(64);
    let dispatch =
        kinesis_dispatch::Dispatcher::spawn(receiver, handler, Default::default()).unwrap();
    let coordinator = kinesis_shard_reader::Coordinator::spawn(
        fan_out(config("s", "a", StartAt::TrimHorizon)),
        Arc::new(kinesis.clone()),
        Arc::new(MemoryLeaseStore::new()),
        sender,
    );
    // The reader is inside the parent's first event.
    while kinesis.live_subscriptions() == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    kinesis.deregister_consumer("s", "app").await.unwrap();
    gate.add_permits(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().len() < 10_600 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of 10,600 handled",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        kinesis.describe_consumer("s", "app").await.is_ok(),
        "registered again"
    );
    coordinator.stop_reading();
    dispatch.shutdown(Duration::from_secs(5)).await;
    coordinator.release_all().await;
}

/// A `MemoryStream` whose first subscription to each shard never sends anything (a
/// half-open connection).
#[derive(Debug)]
struct Silent {
    inner: MemoryStream,
    silenced: std::sync::Mutex<std::collections::HashSet<String>>,
}

#[derive(Debug)]
struct Hangs;

impl kinesis_shard_reader::ShardSubscription for Hangs {
    fn next_event(
        &mut self,
    ) -> kinesis_lease_core::BoxFuture<
        '_,
        Result<Option<kinesis_shard_reader::ShardEvent>, ReaderError>,
    > {
        Box::pin(std::future::pending())
    }
}

impl KinesisApi for Silent {
    forward_polling!(inner);
    fn register_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> kinesis_lease_core::BoxFuture<'a, Result<kinesis_shard_reader::StreamConsumer, ReaderError>>
    {
        self.inner.register_consumer(stream, name)
    }
    fn describe_consumer<'a>(
        &'a self,
        stream: &'a str,
        name: &'a str,
    ) -> kinesis_lease_core::BoxFuture<'a, Result<kinesis_shard_reader::StreamConsumer, ReaderError>>
    {
        self.inner.describe_consumer(stream, name)
    }
    fn subscribe_to_shard<'a>(
        &'a self,
        stream: &'a str,
        consumer_arn: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> kinesis_lease_core::BoxFuture<
        'a,
        Result<Box<dyn kinesis_shard_reader::ShardSubscription>, ReaderError>,
    > {
        Box::pin(async move {
            if self.silenced.lock().unwrap().insert(shard.to_owned()) {
                return Ok(Box::new(Hangs) as Box<dyn kinesis_shard_reader::ShardSubscription>);
            }
            self.inner
                .subscribe_to_shard(stream, consumer_arn, shard, position)
                .await
        })
    }
}

/// A subscription that goes silent (a half-open connection) is renewed after 30 s without an
/// event: the shard is not held unread for ever.
#[tokio::test(start_paused = true)]
async fn a_silent_subscription_is_renewed() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    put_many(&kinesis, "s", 7, 0, 100);
    let silent = Silent {
        inner: kinesis.clone(),
        silenced: Default::default(),
    };
    let log = Log::default();
    let (sender, receiver) = kinesis_dispatch::channel(64);
    let l = log.clone();
    let handler = kinesis_dispatch::Handler::one(move |d: kinesis_dispatch::Delivery| {
        let l = l.clone();
        async move {
            l.lock().unwrap().push(Seen {
                owner: "a".into(),
                shard: d.shard().to_owned(),
                key: d.partition_key().to_owned(),
                sequence: d.sequence().to_string(),
                payload: String::from_utf8_lossy(d.payload()).into_owned(),
            });
            Ok::<(), std::io::Error>(())
        }
    });
    let dispatch =
        kinesis_dispatch::Dispatcher::spawn(receiver, handler, Default::default()).unwrap();
    let coordinator = kinesis_shard_reader::Coordinator::spawn(
        fan_out(config("s", "a", StartAt::TrimHorizon)),
        Arc::new(silent),
        Arc::new(MemoryLeaseStore::new()),
        sender,
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        log.lock().unwrap().is_empty(),
        "the first subscriptions are silent"
    );
    wait_for_count(&log, 100, Duration::from_secs(30)).await;
    assert_exactly_once(&log, 100);
    coordinator.stop_reading();
    dispatch.shutdown(Duration::from_secs(5)).await;
    coordinator.release_all().await;
}

/// As in Kinesis: a second subscription within 5 s of the first is refused; one after that
/// takes the shard over, and the first fails with `InUse` at its next event.
#[tokio::test(start_paused = true)]
async fn a_later_subscription_takes_the_shard_over() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let consumer = kinesis.register_consumer("s", "app").await.unwrap();
    let active = kinesis.describe_consumer("s", "app").await.unwrap();
    assert!(!active.active, "CREATING when first described");
    let shard = "shardId-000000000000";
    let mut first = kinesis
        .subscribe_to_shard("s", &consumer.arn, shard, &StartAt::TrimHorizon)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(matches!(
        kinesis
            .subscribe_to_shard("s", &consumer.arn, shard, &StartAt::TrimHorizon)
            .await,
        Err(ReaderError::Throttled { .. })
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(matches!(
        kinesis
            .subscribe_to_shard("s", &consumer.arn, shard, &StartAt::TrimHorizon)
            .await,
        Err(ReaderError::InUse { .. })
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut second = kinesis
        .subscribe_to_shard("s", &consumer.arn, shard, &StartAt::TrimHorizon)
        .await
        .unwrap();
    assert!(matches!(
        first.next_event().await,
        Err(ReaderError::InUse { .. })
    ));
    kinesis.put("s", "k", "x").unwrap();
    let event = second.next_event().await.unwrap().unwrap();
    assert_eq!(event.records.len(), 1);
    drop(first);
    assert_eq!(
        kinesis.live_subscriptions(),
        1,
        "the first's drop frees nothing of the second"
    );
}
