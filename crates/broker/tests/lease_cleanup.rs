//! No part of the lease table grows with the stream's history (issue: rows of finished shards
//! were never deleted and the index row listed every shard ever seen). A stream resharded 50
//! times, read at the default start by two instances, ends with a row per shard the stream
//! still lists, and a member row per running instance; nothing put is lost on the way.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";

type Handled = Arc<Mutex<BTreeSet<String>>>;

async fn start(
    kinesis: &MemoryStream,
    table: &MemoryLeaseTable,
    owner: &str,
    handled: &Handled,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(table))
        .owner_id(owner)
        .build()
        .unwrap();
    let handled = handled.clone();
    broker
        .subscribe(STREAM)
        .handle(move |d: Delivery| {
            let handled = handled.clone();
            async move {
                let payload = String::from_utf8(d.payload().to_vec()).unwrap();
                handled.lock().unwrap().insert(payload);
                Ok::<(), std::io::Error>(())
            }
        })
        .unwrap();
    broker.start().await.unwrap()
}

async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if check() {
            return true;
        }
        sleep(Duration::from_millis(100)).await;
    }
    check()
}

fn open_shards(kinesis: &MemoryStream) -> Vec<kinesis_broker::kinesis::Shard> {
    kinesis
        .shards(STREAM)
        .unwrap()
        .into_iter()
        .filter(|s| s.ending_sequence.is_none())
        .collect()
}

async fn rows(table: &MemoryLeaseTable, stream: &str) -> Vec<kinesis_broker::lease::Lease> {
    MemoryLeaseStore::over(table).list(stream).await.unwrap()
}

fn held(running: &[&RunningBroker]) -> usize {
    running.iter().map(|r| r.stats().shards(STREAM).len()).sum()
}

#[tokio::test(start_paused = true)]
async fn fifty_reshards_leave_a_row_per_listed_shard_and_lose_nothing() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let table = MemoryLeaseTable::new();
    let handled: Handled = Arc::default();
    let a = start(&kinesis, &table, "a", &handled).await;
    let b = start(&kinesis, &table, "b", &handled).await;
    // The default start is LATEST: put only once every shard is read.
    assert!(eventually(Duration::from_secs(5), || held(&[&a, &b]) == 2).await);
    let mut expected = BTreeSet::new();
    let mut most_rows = 0;
    for round in 0..50 {
        let open = open_shards(&kinesis);
        if round % 3 == 2 && open.len() > 1 {
            let (x, y) = open
                .iter()
                .flat_map(|x| open.iter().map(move |y| (x, y)))
                .find(|(x, y)| x.hash_range.1.checked_add(1) == Some(y.hash_range.0))
                .expect("two adjacent open shards");
            kinesis.merge_shards(STREAM, &x.id, &y.id).unwrap();
        } else {
            let widest = open
                .iter()
                .max_by_key(|s| s.hash_range.1 - s.hash_range.0)
                .unwrap();
            kinesis.split_evenly(STREAM, &widest.id).unwrap();
        }
        // Records right after the reshard land in children whose rows may not exist yet.
        for i in 0..6 {
            let payload = format!("r{round}-{i}");
            kinesis
                .put(STREAM, &format!("key-{round}-{i}"), payload.clone())
                .unwrap();
            expected.insert(payload);
        }
        let all = eventually(Duration::from_secs(60), || {
            handled.lock().unwrap().is_superset(&expected)
        })
        .await;
        let missing: Vec<String> = expected
            .difference(&handled.lock().unwrap())
            .cloned()
            .collect();
        if !all {
            for r in rows(&table, STREAM).await {
                eprintln!(
                    "row {} owner {:?} cp {:?} parents {:?} counter {}",
                    r.key,
                    r.owner,
                    r.checkpoint.as_ref().map(ToString::to_string),
                    r.parents,
                    r.counter
                );
            }
            for s in kinesis.shards(STREAM).unwrap() {
                eprintln!(
                    "shard {} parents {:?} {:?} open {}",
                    s.id,
                    s.parent,
                    s.adjacent_parent,
                    s.ending_sequence.is_none()
                );
            }
            eprintln!(
                "held a {:?} b {:?}",
                a.stats()
                    .shards(STREAM)
                    .iter()
                    .map(|s| s.shard.clone())
                    .collect::<Vec<_>>(),
                b.stats()
                    .shards(STREAM)
                    .iter()
                    .map(|s| s.shard.clone())
                    .collect::<Vec<_>>()
            );
        }
        assert!(all, "round {round}: records never handled: {missing:?}");
        // The closed shards age out of the stream once read to their end (as retention
        // trims them), which lets their rows go.
        let finished: BTreeSet<String> = rows(&table, STREAM)
            .await
            .into_iter()
            .filter(|r| r.is_finished())
            .map(|r| r.key.shard().to_owned())
            .collect();
        for shard in kinesis.shards(STREAM).unwrap() {
            if shard.ending_sequence.is_some() && finished.contains(&shard.id) {
                kinesis.trim_shard(STREAM, &shard.id).unwrap();
            }
        }
        most_rows = most_rows.max(rows(&table, STREAM).await.len());
    }
    // Instances list the stream's shards every 10 s; the janitor deletes at its next round.
    let listed = |kinesis: &MemoryStream| -> BTreeSet<String> {
        kinesis
            .shards(STREAM)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    let mut left = Vec::new();
    for _ in 0..60 {
        sleep(Duration::from_secs(1)).await;
        left = rows(&table, STREAM).await;
        if left
            .iter()
            .all(|r| listed(&kinesis).contains(r.key.shard()))
        {
            break;
        }
    }
    let stale: Vec<String> = left
        .iter()
        .filter(|r| !listed(&kinesis).contains(r.key.shard()))
        .map(|r| r.key.shard().to_owned())
        .collect();
    assert!(
        stale.is_empty(),
        "rows of shards gone from the stream: {stale:?}"
    );
    let open = open_shards(&kinesis).len();
    assert!(
        left.len() <= listed(&kinesis).len(),
        "{} rows for {} listed shards ({open} open)",
        left.len(),
        listed(&kinesis).len()
    );
    // Bounded: a finished row goes a lease after its shard left the listings (a create from an
    // older listing may still be on its way until then), so at this pace of one reshard every
    // few seconds up to about a lease's worth of trimmed rows wait (36 at most here; under 30
    // before that grace).
    assert!(
        most_rows <= 40,
        "at most {most_rows} rows at once over 50 reshards"
    );
    let members = rows(&table, &format!("{STREAM}@members")).await;
    assert_eq!(members.len(), 2, "{members:?}");
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        rows(&table, &format!("{STREAM}@members"))
            .await
            .iter()
            .all(|r| r.owner.is_none()),
        "an instance that left releases its member row"
    );
}

#[tokio::test(start_paused = true)]
async fn member_rows_of_crashed_instances_go_and_restarts_leave_none_behind() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).unwrap();
    let table = MemoryLeaseTable::new();
    let handled: Handled = Arc::default();
    let keeper = start(&kinesis, &table, "keeper", &handled).await;
    // Ten instances come and go: five shut down, five crash (dropped, nothing written).
    for i in 0..10 {
        let other = start(&kinesis, &table, &format!("guest-{i}"), &handled).await;
        sleep(Duration::from_secs(4)).await;
        if i % 2 == 0 {
            other.shutdown().await;
        } else {
            drop(other);
        }
    }
    // A crashed member is found dead a lease after its last renewal; the rows of members that
    // left or died are deleted once they stood still for ten leases.
    let members = format!("{STREAM}@members");
    let until = Instant::now() + Duration::from_secs(150);
    let mut left = rows(&table, &members).await;
    while left.len() > 1 && Instant::now() < until {
        sleep(Duration::from_secs(1)).await;
        left = rows(&table, &members).await;
    }
    assert_eq!(left.len(), 1, "member rows left: {left:?}");
    assert!(eventually(Duration::from_secs(20), || held(&[&keeper]) == 4).await);
    keeper.shutdown().await;
}
