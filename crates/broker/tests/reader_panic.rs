//! A shard reader that panics (a bug, or a library it calls) has its shard released with the due
//! checkpoint, and the shard is taken and read again. A review found that with the reader in a
//! task of its own the keeper went on renewing a shard nobody read, for as long as the process
//! lived; and before that, with reader and keeper joined in one task, the panic took the keeper
//! down with it and left the row unrenewed, which no other instance takes while the owner's
//! member row lives, and which its own instance still counted as held: read by nobody either.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::kinesis::{KinesisApi, PutEntry, PutOutcome, RecordsPage, Shard};
use kinesis_broker::lease::BoxFuture;
use kinesis_broker::testing::MemoryStream;
use kinesis_broker::{Broker, Delivery, MemoryLeaseStore, MemoryLeaseTable, ReaderError, StartAt};
use tokio::time::Instant;

const STREAM: &str = "s";

/// A `MemoryStream` whose first GetRecords panics.
#[derive(Debug, Clone)]
struct Panicking {
    kinesis: MemoryStream,
    panicked: Arc<AtomicBool>,
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
        if !self.panicked.swap(true, Ordering::SeqCst) {
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

/// A handler counting what it handled.
fn counting(
    handled: &Arc<AtomicUsize>,
) -> impl Fn(Delivery) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    let handled = handled.clone();
    move |_d: Delivery| {
        handled.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(()))
    }
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
    let table = MemoryLeaseTable::new();
    let panicked = Arc::new(AtomicBool::new(false));
    let mut broker = Broker::builder()
        .kinesis(Panicking {
            kinesis: kinesis.clone(),
            panicked: panicked.clone(),
        })
        .lease_store(MemoryLeaseStore::over(&table))
        .build()
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    broker
        .subscribe(STREAM)
        .start_at(StartAt::TrimHorizon)
        .handle(counting(&handled))
        .unwrap();
    let running = broker.start().await.unwrap();
    let waited = Instant::now();
    while !panicked.load(Ordering::SeqCst) {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the reader never read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let panic_at = Instant::now();
    while handled.load(Ordering::SeqCst) < 10 {
        assert!(
            panic_at.elapsed() < Duration::from_secs(60),
            "60 s after the reader panicked, {} of 10 handled: the shard is not read again",
            handled.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Released at once and taken at the next take round, not after the lease.
    assert!(
        panic_at.elapsed() <= Duration::from_secs(5),
        "read again after {:?}",
        panic_at.elapsed()
    );
    running.shutdown().await;
}
