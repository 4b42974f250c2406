//! Quiet idle shards (`quiet_idle_shards()`): a held row is written only when its checkpoint
//! moves, and the member row's renewal stands for the rest. What must not change: a keeper
//! learns within a renew interval that an operator freed its row (so nobody reads beside it),
//! a hand-over still happens, checkpoints are still written, and instances with and without the
//! option share a stream. Paused time, a `MemoryStream`, brokers with their own store over one
//! shared `MemoryLeaseTable`, default timings and the default start (`LATEST`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{
    lease::{LeaseKey, LeaseStore, Outcome},
    Broker, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_lease_dynamo::{Bill, Billed};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";

async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    quiet: bool,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = if quiet { sub.quiet_idle_shards() } else { sub };
    sub.handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker.start().await.expect("start")
}

/// The shards each running broker reads now, by owner id.
fn holdings(running: &[(&str, &RunningBroker)]) -> BTreeMap<String, Vec<String>> {
    running
        .iter()
        .map(|(id, r)| {
            let shards = r
                .stats()
                .shards(STREAM)
                .iter()
                .map(|s| s.shard.clone())
                .collect();
            ((*id).to_owned(), shards)
        })
        .collect()
}

/// Waits (sampling every 100 ms) until the brokers hold `total` shards between them, each
/// within one of the others, for at most `most`.
async fn fair(running: &[(&str, &RunningBroker)], total: usize, most: Duration) {
    let until = Instant::now() + most;
    loop {
        let counts: Vec<usize> = holdings(running).values().map(Vec::len).collect();
        let (lo, hi) = (counts.iter().min().copied(), counts.iter().max().copied());
        if counts.iter().sum::<usize>() == total && hi.zip(lo).is_some_and(|(h, l)| h <= l + 1) {
            return;
        }
        assert!(
            Instant::now() < until,
            "never fair within {most:?}: {counts:?}"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// Lease-table write requests of a minute of steady state by two instances on 12 idle shards.
async fn idle_minute(quiet: bool) -> u64 {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 12).expect("stream");
    let table = MemoryLeaseTable::new();
    let billed = Billed::new();
    let store = || billed.wrap(Arc::new(MemoryLeaseStore::over(&table)));
    let a = start(&kinesis, store(), "a", quiet).await;
    let b = start(&kinesis, store(), "b", quiet).await;
    fair(&[("a", &a), ("b", &b)], 12, Duration::from_secs(30)).await;
    sleep(Duration::from_secs(20)).await;
    let before: Bill = billed.bill();
    sleep(Duration::from_secs(60)).await;
    let after = billed.bill();
    a.shutdown().await;
    b.shutdown().await;
    after.write_requests - before.write_requests
}

#[tokio::test(start_paused = true)]
async fn idle_shards_are_not_written_with_the_option_and_are_renewed_without_it() {
    let renewing = idle_minute(false).await;
    let quiet = idle_minute(true).await;
    // Without the option: 12 rows and 2 member rows renewed every 3 s, 280 writes a minute.
    assert!(
        (270..=290).contains(&renewing),
        "without the option: {renewing:?}"
    );
    // With it: the 2 member rows alone, 40 a minute.
    assert!(
        quiet <= 42,
        "with the option, idle rows were written: {quiet:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_row_is_still_checkpointed_when_records_are_handled() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let a = start(&kinesis, MemoryLeaseStore::over(&table), "a", true).await;
    fair(&[("a", &a)], 2, Duration::from_secs(30)).await;
    // Past the pinned `LATEST` start, then records on both shards.
    sleep(Duration::from_secs(5)).await;
    for i in 0..40 {
        kinesis
            .put(STREAM, &format!("k{i}"), format!("r{i}"))
            .expect("put");
    }
    sleep(Duration::from_secs(10)).await;
    let store = MemoryLeaseStore::over(&table);
    let rows = store.list(STREAM).await.expect("list");
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert!(
            matches!(row.checkpoint, Some(Checkpoint::Sequence(_))),
            "checkpoint written at the next tick after the records settled: {row:?}"
        );
    }
    a.shutdown().await;
}

/// An operator frees a quiet row (as `kinesis-broker release` does: the evict pokes the
/// holder's member row) without bumping the epoch, so only the poke tells the holder. Its
/// keeper stops within a renew interval and a little, long before the row stood still for a
/// lease; nobody reads the shard beside it, and it is read again.
#[tokio::test(start_paused = true)]
async fn an_operators_release_of_a_quiet_row_stops_its_holder_before_anyone_takes_it() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).expect("stream");
    let table = MemoryLeaseTable::new();
    let store = || MemoryLeaseStore::over(&table);
    let a = start(&kinesis, store(), "a", true).await;
    let b = start(&kinesis, store(), "b", true).await;
    let both = [("a", &a), ("b", &b)];
    fair(&both, 4, Duration::from_secs(30)).await;
    // Well past every row's last write: the rows are idle.
    sleep(Duration::from_secs(30)).await;
    let shard = holdings(&both)["a"][0].clone();
    let key = LeaseKey::new(STREAM, shard.as_str()).expect("key");
    let operator = MemoryLeaseStore::over(&table);
    let row = operator.read(&key).await.expect("read").expect("row");
    sleep(Duration::from_secs(9)).await;
    let later = operator.read(&key).await.expect("read").expect("row");
    assert_eq!(
        later.counter, row.counter,
        "an idle quiet row is not written"
    );
    let member = LeaseKey::member(STREAM, "a").expect("member key");
    let evicted = operator
        .evict(&key, row.counter, None, Some(&member))
        .await
        .expect("evict");
    assert!(matches!(evicted, Outcome::Written(_)), "{evicted:?}");
    let at = Instant::now();
    let mut stopped = None;
    let mut read_again = None;
    while Instant::now() < at + Duration::from_secs(30) {
        let now = holdings(&both);
        let readers: Vec<&String> = now
            .iter()
            .filter(|(_, shards)| shards.contains(&shard))
            .map(|(id, _)| id)
            .collect();
        assert!(readers.len() <= 1, "two readers of {shard}: {now:?}");
        if stopped.is_none() && readers.is_empty() {
            stopped = Some(at.elapsed());
        }
        if stopped.is_some() && read_again.is_none() && !readers.is_empty() {
            read_again = Some(at.elapsed());
        }
        sleep(Duration::from_millis(50)).await;
    }
    let stopped = stopped.expect("the holder never stopped");
    assert!(
        stopped <= Duration::from_millis(3_500),
        "the holder stopped {stopped:?} after the evict (a renew interval and a little)"
    );
    let read_again = read_again.expect("never read again");
    assert!(
        read_again >= Duration::from_secs(10),
        "taken {read_again:?} after the evict: before it stood still for a lease"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// The same release made by a command line of an earlier release, which does not poke: the
/// epoch bump it makes has every instance list the rows, and the listing nudges the holder.
#[tokio::test(start_paused = true)]
async fn a_release_without_a_poke_is_noticed_from_the_listing_it_causes() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).expect("stream");
    let table = MemoryLeaseTable::new();
    let store = || MemoryLeaseStore::over(&table);
    let a = start(&kinesis, store(), "a", true).await;
    let b = start(&kinesis, store(), "b", true).await;
    let both = [("a", &a), ("b", &b)];
    fair(&both, 4, Duration::from_secs(30)).await;
    sleep(Duration::from_secs(30)).await;
    let shard = holdings(&both)["b"][0].clone();
    let key = LeaseKey::new(STREAM, shard.as_str()).expect("key");
    let operator = MemoryLeaseStore::over(&table);
    let row = operator.read(&key).await.expect("read").expect("row");
    let evicted = operator
        .evict(&key, row.counter, None, None)
        .await
        .expect("evict");
    assert!(matches!(evicted, Outcome::Written(_)));
    operator.bump_epoch(STREAM).await.expect("bump");
    let at = Instant::now();
    loop {
        let now = holdings(&both);
        if !now["b"].contains(&shard) {
            break;
        }
        assert!(
            at.elapsed() < Duration::from_secs(4),
            "the holder still reads {shard} {:?} after the release: {now:?}",
            at.elapsed()
        );
        sleep(Duration::from_millis(50)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// An instance with the option holds every shard, idle; one without it starts. The quiet holder
/// learns of the request from the poke and hands shards over: the two end even, and no shard
/// ever has two readers.
#[tokio::test(start_paused = true)]
async fn a_quiet_holder_hands_shards_over_to_an_instance_without_the_option() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 8).expect("stream");
    let table = MemoryLeaseTable::new();
    let store = || MemoryLeaseStore::over(&table);
    let a = start(&kinesis, store(), "a", true).await;
    fair(&[("a", &a)], 8, Duration::from_secs(30)).await;
    sleep(Duration::from_secs(30)).await;
    let b = start(&kinesis, store(), "b", false).await;
    let both = [("a", &a), ("b", &b)];
    let at = Instant::now();
    loop {
        let now = holdings(&both);
        let mut seen = std::collections::HashSet::new();
        for shards in now.values() {
            for shard in shards {
                assert!(
                    seen.insert(shard.clone()),
                    "two readers of {shard}: {now:?}"
                );
            }
        }
        if now["a"].len() == 4 && now["b"].len() == 4 {
            break;
        }
        // Three hand-overs after the join, each asked at most every three leases of the
        // asker's, none waiting for a quiet holder's write.
        assert!(
            at.elapsed() < Duration::from_secs(100),
            "not even {:?} after the join: {now:?}",
            at.elapsed()
        );
        sleep(Duration::from_millis(50)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A quiet instance holds 12 idle shards alone; another starts with a take interval of 4 s
/// and is handed six of them, one request at a time, each request more than a member renewal
/// (3 s) after the last, each followed by a poke of the holder's member row naming the row
/// asked for. Only that row's keeper writes (the renewal that finds the request, a renewal
/// while the hand-over settles, the hand-over): 16 row writes here; the other quiet keepers
/// pass over a poke about another row. With every poke checked by a write (before pokes named
/// their row, or planted: `Quiet::pass_over` never passing), 67. Requests closer
/// together than a member renewal (the default take interval of 1 s) still make every quiet
/// keeper write once per renewal that shows them.
#[tokio::test(start_paused = true)]
async fn a_hand_over_request_makes_only_the_asked_rows_keeper_write() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 12).expect("stream");
    let table = MemoryLeaseTable::new();
    let holder_bill = Billed::new();
    let a = start(
        &kinesis,
        holder_bill.wrap(Arc::new(MemoryLeaseStore::over(&table))),
        "a",
        true,
    )
    .await;
    fair(&[("a", &a)], 12, Duration::from_secs(30)).await;
    sleep(Duration::from_secs(30)).await;
    let before = holder_bill.bill();
    let at = Instant::now();
    let mut asker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(MemoryLeaseStore::over(&table))
        .owner_id("b")
        .take_interval(Duration::from_secs(4))
        .build()
        .expect("broker");
    asker
        .subscribe(STREAM)
        .quiet_idle_shards()
        .handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    let b = asker.start().await.expect("start");
    fair(&[("a", &a), ("b", &b)], 12, Duration::from_secs(300)).await;
    let took = at.elapsed();
    let writes = holder_bill.bill().write_requests - before.write_requests;
    a.shutdown().await;
    b.shutdown().await;
    // The member row's renewals over the hand-overs (one per 3 s, and one more at each end).
    let member = took.as_secs() / 3 + 2;
    let rows = writes.saturating_sub(member);
    eprintln!(
        "6 hand-overs in {took:?}: the holder wrote {writes} times, {rows} beside its member row"
    );
    assert!(
        rows <= 3 * 6,
        "the holder wrote {rows} rows for 6 hand-over requests ({writes} writes in {took:?})"
    );
}
