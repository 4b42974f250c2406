//! Each held shard's load, averaged over the last minute (records and bytes handled, handler
//! time), in `stats()` and on the shard's row; the instance's total and capacity on its member
//! row; a new holder starts from the load the row carried. Paused time, a `MemoryStream`, the
//! default start (`LATEST`) and timings, handlers that wait 20 ms per record.

use std::time::Duration;

use kinesis_broker::testing::{hash_key, MemoryStream};
use kinesis_broker::{
    lease::{LeaseKey, LeaseStore},
    Broker, BrokerError, Delivery, Load, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use tokio::time::sleep;

const STREAM: &str = "s";
/// Handler time per record.
const COST: Duration = Duration::from_millis(20);
/// Payload bytes per record.
const SIZE: usize = 100;

/// A partition key of the first (`low`) or second shard of a two-shard stream.
fn key_of(low: bool) -> String {
    (0..)
        .map(|i| format!("k{i}"))
        .find(|k| (hash_key(k) < 1u128 << 127) == low)
        .expect("some key hashes into each half")
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    capacity: f64,
) -> RunningBroker {
    start_with(kinesis, table, owner, capacity, false).await
}

async fn start_with(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    capacity: f64,
    quiet: bool,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM).capacity(capacity);
    let sub = if quiet { sub.quiet_idle_shards() } else { sub };
    sub.handle(|_d: Delivery| async {
        sleep(COST).await;
        Ok::<(), std::io::Error>(())
    })
    .expect("subscribe");
    broker.start().await.expect("start")
}

/// Puts `hot` records a second on the first shard and one a second on the second, for `secs`.
async fn feed(kinesis: &MemoryStream, hot: u32, secs: u64) {
    let (hot_key, cold_key) = (key_of(true), key_of(false));
    for _ in 0..secs {
        for _ in 0..hot {
            kinesis.put(STREAM, &hot_key, vec![0u8; SIZE]).expect("put");
        }
        kinesis
            .put(STREAM, &cold_key, vec![0u8; SIZE])
            .expect("put");
        sleep(Duration::from_secs(1)).await;
    }
}

fn near(what: &str, got: u64, want: u64) {
    let (low, high) = (want * 9 / 10, want * 11 / 10);
    assert!(
        (low..=high).contains(&got),
        "{what}: {got}, want {want} within 10 %"
    );
}

async fn row_load(table: &MemoryLeaseTable, key: &LeaseKey) -> Option<Load> {
    let store = MemoryLeaseStore::over(table);
    store.read(key).await.expect("read").expect("row").load
}

#[tokio::test(start_paused = true)]
async fn a_hot_and_a_cold_shard_publish_their_loads_and_the_member_row_their_sum() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start(&kinesis, &table, "a", 2.0).await;
    // Past the take rounds and the pinned `LATEST` start, then four minutes of steady load.
    sleep(Duration::from_secs(5)).await;
    feed(&kinesis, 10, 240).await;
    let stats = a.stats();
    let shards = stats.shards(STREAM);
    assert_eq!(shards.len(), 2, "{shards:?}");
    let hot = shards[0].load.expect("the hot shard's load");
    let cold = shards[1].load.expect("the cold shard's load");
    // 10 records a second of 100 bytes, 20 ms each; one a second on the other.
    near("hot records a minute", hot.records_per_min, 600);
    near("hot bytes a minute", hot.bytes_per_min, 60_000);
    near("hot handler ms a minute", hot.busy_ms_per_min, 12_000);
    near("cold records a minute", cold.records_per_min, 60);
    near("cold handler ms a minute", cold.busy_ms_per_min, 1_200);
    assert_eq!(hot.capacity_milli, None, "a shard has no capacity");
    let total = stats.streams[0].load;
    assert_eq!(
        (
            total.records_per_min,
            total.busy_ms_per_min,
            total.capacity_milli
        ),
        (
            hot.records_per_min + cold.records_per_min,
            hot.busy_ms_per_min + cold.busy_ms_per_min,
            Some(2_000)
        ),
        "the instance's total and capacity"
    );
    // On the rows, as the last renewal (at most 3 s ago) wrote them.
    let hot_row = row_load(&table, &LeaseKey::new(STREAM, &shards[0].shard).unwrap())
        .await
        .expect("the hot row carries its load");
    near("hot row's handler ms", hot_row.busy_ms_per_min, 12_000);
    let member = row_load(&table, &LeaseKey::member(STREAM, "a").unwrap())
        .await
        .expect("the member row carries the total");
    near("member row's handler ms", member.busy_ms_per_min, 13_200);
    assert_eq!(member.capacity_milli, Some(2_000));
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_holder_starts_from_the_load_its_row_carried() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start(&kinesis, &table, "a", 1.0).await;
    sleep(Duration::from_secs(5)).await;
    feed(&kinesis, 10, 120).await;
    a.shutdown().await;
    // A new instance takes both rows, on a stream gone quiet: its first figures are the
    // ones the rows carried, not zero, and they fade from there.
    let b = start(&kinesis, &table, "b", 1.0).await;
    sleep(Duration::from_secs(2)).await;
    let stats = b.stats();
    let shards = stats.shards(STREAM);
    assert_eq!(shards.len(), 2, "{shards:?}");
    let hot = shards[0].load.expect("the load the row carried");
    assert!(
        hot.busy_ms_per_min > 9_000,
        "a hot shard does not look idle to its new holder: {hot:?}"
    );
    sleep(Duration::from_secs(240)).await;
    let faded = b.stats().shards(STREAM)[0].load.expect("load");
    assert!(
        faded.busy_ms_per_min < 1_000,
        "no records, no load: {faded:?}"
    );
    b.shutdown().await;
}

/// With quiet idle shards a row is written only when its checkpoint moves; a shard that turns
/// idle must not go on showing its hot figure in the table for as long as it stays idle.
#[tokio::test(start_paused = true)]
async fn a_quiet_row_does_not_keep_a_hot_load_once_its_shard_is_idle() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start_with(&kinesis, &table, "a", 1.0, true).await;
    sleep(Duration::from_secs(5)).await;
    feed(&kinesis, 10, 120).await;
    let shard = a.stats().shards(STREAM)[0].shard.clone();
    let key = LeaseKey::new(STREAM, &shard).unwrap();
    let hot = row_load(&table, &key).await.expect("load");
    assert!(hot.busy_ms_per_min > 9_000, "hot: {hot:?}");
    // Idle for five minutes: nothing to checkpoint, the average falls to nothing.
    sleep(Duration::from_secs(300)).await;
    let idle = row_load(&table, &key).await.expect("load");
    assert!(
        idle.busy_ms_per_min <= 600,
        "the row still shows {idle:?} for an idle shard"
    );
    a.shutdown().await;
}

#[tokio::test]
async fn a_capacity_out_of_range_is_refused_naming_the_setting_and_the_stream() {
    for capacity in [0.0, -1.0, f64::NAN, f64::INFINITY, 1_000.5] {
        let mut broker = Broker::builder()
            .kinesis(MemoryStream::new())
            .lease_store(MemoryLeaseStore::new())
            .owner_id("a")
            .build()
            .expect("broker");
        let refused = broker
            .subscribe(STREAM)
            .capacity(capacity)
            .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) });
        match refused {
            Err(BrokerError::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "capacity");
                assert!(reason.contains("`s`"), "{reason}");
            }
            other => panic!("capacity {capacity}: {other:?}"),
        }
    }
}
