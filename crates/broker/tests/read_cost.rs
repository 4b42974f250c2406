//! What an instance reads from the lease table in steady state stays the same however many
//! instances share the stream and however many shards it has. A roster listing every lease
//! read every member's row: each instance read something of every other every ten seconds,
//! and the fleet's reads grew with the square of its size (12.1 RCU/s per instance at 100
//! instances against 3.1 at 10). Counted here on paused time through the DynamoDB bill of
//! every call ([`Billed`]), after every instance holds its share; and what each item costs.

use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use kinesis_lease_dynamo::{Bill, Billed};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";
const STEADY: Duration = Duration::from_secs(60);

/// Reads of one instance in steady state: items a minute, and read units a second.
#[derive(Debug, Clone, Copy)]
struct PerInstance {
    items_a_minute: f64,
    units_a_second: f64,
}

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    billed: &Billed,
    i: usize,
) -> RunningBroker {
    let store = billed.wrap(Arc::new(MemoryLeaseStore::over(table)));
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(format!("i{i:03}"))
        .build()
        .expect("broker");
    broker
        .subscribe(STREAM)
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker.start().await.expect("start")
}

/// Runs `instances` on `shards` until each holds its share, then bills a minute of steady
/// state.
async fn steady_reads(shards: u32, instances: usize) -> PerInstance {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, shards).expect("stream");
    let table = MemoryLeaseTable::new();
    let billed = Billed::new();
    let mut running = Vec::new();
    for i in 0..instances {
        running.push(start(&kinesis, &table, &billed, i).await);
    }
    let share = (shards as usize).div_ceil(instances);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let counts: Vec<usize> = running
            .iter()
            .map(|r| r.stats().shards(STREAM).len())
            .collect();
        let fair = counts.iter().all(|&c| c + 1 >= share && c <= share);
        if fair && counts.iter().sum::<usize>() == shards as usize {
            break;
        }
        assert!(
            Instant::now() < until,
            "{shards} x {instances}: never fair: {counts:?}"
        );
        sleep(Duration::from_millis(100)).await;
    }
    // Past every join's listing and the first renewals.
    sleep(Duration::from_secs(20)).await;
    let before: Bill = billed.bill();
    sleep(STEADY).await;
    let after = billed.bill();
    for r in running {
        r.shutdown().await;
    }
    let n = instances as f64;
    PerInstance {
        items_a_minute: (after.items_read - before.items_read) as f64
            / n
            / (STEADY.as_secs_f64() / 60.0),
        units_a_second: (after.read_units - before.read_units) / n / STEADY.as_secs_f64(),
    }
}

#[tokio::test(start_paused = true)]
async fn reads_per_instance_do_not_grow_with_the_number_of_instances() {
    let few = steady_reads(24, 3).await;
    let many = steady_reads(24, 12).await;
    assert!(
        many.items_a_minute <= few.items_a_minute * 1.05,
        "per instance, 12 instances read {many:?}, 3 read {few:?}"
    );
    assert!(
        many.units_a_second <= few.units_a_second * 1.05,
        "per instance, 12 instances read {many:?}, 3 read {few:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn reads_per_instance_do_not_grow_with_the_number_of_shards() {
    let small = steady_reads(12, 3).await;
    let big = steady_reads(96, 3).await;
    assert!(
        big.items_a_minute <= small.items_a_minute * 1.05,
        "per instance, 96 shards read {big:?}, 12 read {small:?}"
    );
}

/// The steady state's reads, item by item: the epoch item every take interval (the stream's
/// epoch and the roster's count together, 0.5 RCU/s), the watched member every list interval
/// (eventually consistent while it shows the member alive, 0.25), and once a lease the member
/// after it and the roster's own epoch (0.05 each): 0.85 RCU/s, 102 items a minute. Before the
/// roster's count moved into the epoch item and the watch read eventually consistent, 1.35
/// RCU/s (126 items).
#[tokio::test(start_paused = true)]
async fn an_idle_instance_reads_085_read_units_a_second() {
    let reads = steady_reads(24, 3).await;
    assert!(
        reads.units_a_second <= 0.86,
        "per instance, {reads:?} (expected 0.85 RCU/s)"
    );
    assert!(
        reads.items_a_minute <= 103.0,
        "per instance, {reads:?} (expected 102 items a minute)"
    );
}
