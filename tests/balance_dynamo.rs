//! Fair shares and hand-overs on a DynamoDB lease table (moto) and kinesis-local, with
//! instances whose wall clocks differ by up to 10 s.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kinesis_broker::{lease::Clock, Broker, DynamoLeaseStore, RunningBroker, StartAt};
use kinesis_integ::*;

/// The system clock shifted by an offset.
#[derive(Debug, Clone, Copy)]
struct Skewed(i64);

impl Clock for Skewed {
    fn now_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        (now + self.0) as u64
    }
}

fn broker(
    config: &aws_config::SdkConfig,
    table: &str,
    owner: &str,
    skew: i64,
    stream: &str,
    log: &Log,
) -> Broker {
    let store = DynamoLeaseStore::new(config, table).with_clock(Skewed(skew));
    let mut broker = Broker::builder()
        .sdk_config(config)
        .lease_store(store)
        .owner_id(owner)
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .take_interval(Duration::from_millis(500))
        .list_interval(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let (l, o) = (log.clone(), owner.to_owned());
    broker
        .subscribe(stream)
        .start_at(StartAt::TrimHorizon)
        .workers(4)
        .by_key()
        .handle(move |d: kinesis_broker::Delivery| {
            let (l, o) = (l.clone(), o.clone());
            async move {
                l.lock().unwrap().push((
                    o,
                    d.shard().to_owned(),
                    d.partition_key().to_owned(),
                    String::from_utf8_lossy(d.payload()).into_owned(),
                ));
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    broker
}

/// Waits until the brokers hold `want` shards each, checking every 100 ms that no shard is
/// held by two.
async fn settle(brokers: &[&RunningBroker], stream: &str, want: &[usize], limit: Duration) {
    let limit = patience(limit);
    let started = tokio::time::Instant::now();
    loop {
        let mut seen = std::collections::HashSet::new();
        let mut counts = Vec::new();
        for b in brokers {
            let shards = b.stats().shards(stream).to_vec();
            counts.push(shards.len());
            for s in shards {
                assert!(seen.insert(s.shard.clone()), "{} held twice", s.shard);
            }
        }
        if counts == want {
            eprintln!("settled at {counts:?} in {:?}", started.elapsed());
            return;
        }
        assert!(
            started.elapsed() < limit,
            "counts {counts:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_two_three_instances_on_six_shards_with_skewed_clocks() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("balance");
    create_stream(&client, &stream, 6).await;
    let table = unique_name("leases");
    DynamoLeaseStore::new(&config, &table)
        .ensure_table()
        .await
        .unwrap();
    let log = Log::default();
    let a = broker(&config, &table, "a", -5_000, &stream, &log)
        .start()
        .await
        .unwrap();
    put_records(&client, &stream, 24, 0, 300).await;
    settle(&[&a], &stream, &[6], Duration::from_secs(10)).await;
    let b = broker(&config, &table, "b", 5_000, &stream, &log)
        .start()
        .await
        .unwrap();
    put_records(&client, &stream, 24, 300, 300).await;
    settle(&[&a, &b], &stream, &[3, 3], Duration::from_secs(40)).await;
    let c = broker(&config, &table, "c", 0, &stream, &log)
        .start()
        .await
        .unwrap();
    put_records(&client, &stream, 24, 600, 300).await;
    settle(&[&a, &b, &c], &stream, &[2, 2, 2], Duration::from_secs(40)).await;
    put_records(&client, &stream, 24, 900, 300).await;
    // c leaves: its shards are handed over.
    c.shutdown().await;
    assert_released(&config, &table, &stream, "c").await;
    let left = tokio::time::Instant::now();
    loop {
        let held = a.stats().shards(&stream).len() + b.stats().shards(&stream).len();
        if held == 6 {
            break;
        }
        assert!(
            left.elapsed() < patience(Duration::from_secs(5)),
            "survivors hold {held} of 6"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "survivors held all 6 shards {:?} after c left",
        left.elapsed()
    );
    put_records(&client, &stream, 24, 1_200, 300).await;
    wait_for_count(&log, 1_500, Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.shutdown().await;
    b.shutdown().await;
    // Planned moves only: every record exactly once, each key in order.
    assert_exactly_once_in_key_order(&log, 1_500);
}
