//! A shard reader that panics (a bug, or a library it calls) has its shard released with the due
//! checkpoint, and the shard is taken and read again. A review found that with the reader in a
//! task of its own the keeper went on renewing a shard nobody read, for as long as the process
//! lived; and before that, with reader and keeper joined in one task, the panic took the keeper
//! down with it and left the row unrenewed, which no other instance takes while the owner's
//! member row lives, and which its own instance still counted as held: read by nobody either.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::kinesis::{KinesisApi, PutEntry, PutOutcome, RecordsPage, Shard};
use kinesis_broker::lease::BoxFuture;
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, ReaderError, StartAt};
use tokio::sync::{watch, Notify};
use tokio::time::{timeout, Instant};

const STREAM: &str = "s";

/// A `MemoryStream` whose first GetRecords panics, saying so on `panicked`.
#[derive(Debug, Clone)]
struct Panicking {
    kinesis: MemoryStream,
    done: Arc<AtomicBool>,
    panicked: Arc<Notify>,
}

impl KinesisApi for Panicking {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        self.kinesis.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        self.kinesis.shard_iterator(stream, shard, position)
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
        if !self.done.swap(true, Ordering::SeqCst) {
            self.panicked.notify_one();
            panic!("a reader of {shard} hit a bug");
        }
        self.kinesis.get_records(stream, shard, iterator, limit)
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
        self.kinesis.put_records(stream, entries)
    }
}

/// A broker over `kinesis` whose first GetRecords panics, starting at `start` (the default when
/// `None`): the running broker, the panic's notice and the count of records handled.
async fn panicking_broker(
    kinesis: &MemoryStream,
    start: Option<StartAt>,
) -> (
    kinesis_broker::RunningBroker,
    Arc<Notify>,
    watch::Receiver<usize>,
) {
    let panicked = Arc::new(Notify::new());
    let mut broker = Broker::builder()
        .kinesis(Panicking {
            kinesis: kinesis.clone(),
            done: Arc::default(),
            panicked: panicked.clone(),
        })
        .lease_store(MemoryLeaseStore::over(&MemoryLeaseTable::new()))
        .build()
        .unwrap();
    let (count, handled) = watch::channel(0);
    let count = Arc::new(count);
    let subscription = broker.subscribe(STREAM);
    let subscription = match start {
        Some(start) => subscription.start_at(start),
        None => subscription,
    };
    subscription
        .handle(move |_d: Delivery| {
            count.send_modify(|n| *n += 1);
            std::future::ready(Ok::<(), std::io::Error>(()))
        })
        .unwrap();
    (broker.start().await.unwrap(), panicked, handled)
}

/// Waits until `n` records were handled, at most `bound` from `since`; how long it took.
async fn handled(
    mut count: watch::Receiver<usize>,
    n: usize,
    since: Instant,
    bound: Duration,
) -> Duration {
    let seen = timeout(bound, count.wait_for(|c| *c >= n)).await.is_ok();
    assert!(
        seen,
        "{bound:?} after the reader panicked, {} of {n} handled: the shard is not read again",
        *count.borrow()
    );
    since.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_panics_has_its_shard_released_and_read_again() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    for n in 0..10 {
        kinesis
            .put(STREAM, &format!("k{n}"), format!("r{n}"))
            .unwrap();
    }
    let (running, panicked, count) = panicking_broker(&kinesis, Some(StartAt::TrimHorizon)).await;
    timeout(Duration::from_secs(30), panicked.notified())
        .await
        .expect("the reader never read");
    let took = handled(count, 10, Instant::now(), Duration::from_secs(60)).await;
    // Released at once and taken at the next take round, not after the lease.
    assert!(took <= Duration::from_secs(5), "read again after {took:?}");
    running.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn at_the_default_start_what_is_put_while_the_shard_is_released_is_read() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let (running, panicked, count) = panicking_broker(&kinesis, None).await;
    timeout(Duration::from_secs(30), panicked.notified())
        .await
        .expect("the reader never read");
    // Put between the panic and the shard's next take: at LATEST, a reader that started over
    // from the tip would skip them.
    let since = Instant::now();
    for n in 0..10 {
        kinesis
            .put(STREAM, &format!("k{n}"), format!("r{n}"))
            .unwrap();
    }
    let took = handled(count, 10, since, Duration::from_secs(60)).await;
    assert!(took <= Duration::from_secs(5), "read again after {took:?}");
    running.shutdown().await;
}
