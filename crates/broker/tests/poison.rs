//! Poison records (issue 25): a record that fails on every attempt holds back only what must
//! stay behind it, in every dispatch mode, and operators see the processing lag.
//!
//! The scenario of the issue: 2,000 records over 50 partition keys on 4 shards, the handler
//! failing on every record of one key, the default retry policy (retry forever, backoff from
//! 100 ms to 30 s), 60 s of paused time. Measured with the loops retrying in place as before
//! the fix (the parking kept, the loop waiting for its parked record): of the records that
//! need not wait, serial left 1,210 of 1,401 unhandled, serial batches 1,202 of 1,401,
//! `workers(4)` 1,917 of 1,960, `workers(8).by_key()` 1,911 of 1,960, `workers(2).by_key()`
//! 1,947, batches on `workers(4).by_key()` 1,827; the full-window test saw a healthy shard read
//! 1 record. After: 0 in every mode. Paused time, one `MemoryStream`, the default
//! `MemoryLeaseStore`, the public API only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kinesis_broker::testing::{MemoryStream, TokioClock};
use kinesis_broker::{
    BatchFailure, Broker, Checkpoint, Delivery, RunningBroker, SequenceNumber, ShutdownReport,
};
use tokio::time::{sleep, Instant};

const STREAM: &str = "orders";
const RECORDS: u64 = 2_000;
const KEYS: u64 = 50;
const BAD: &str = "k7";

/// How the subscription handles.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Serial,
    Workers(usize),
    ByKey(usize),
    SerialBatch(usize),
    ByKeyBatch(usize, usize),
}

impl Mode {
    /// Records of a shard after its first bad one wait (serial: the shard is the unit).
    fn holds_shard(self) -> bool {
        matches!(self, Mode::Serial | Mode::SerialBatch(_))
    }
    fn ordered(self) -> bool {
        !matches!(self, Mode::Workers(_))
    }
}

/// One record put: its number, key, shard and sequence.
#[derive(Debug, Clone)]
struct Put {
    i: u64,
    key: String,
    shard: String,
    sequence: SequenceNumber,
}

/// What a run saw.
struct Seen {
    puts: Vec<Put>,
    /// Records handled (their handler returned `Ok`), in completion order.
    handled: Vec<u64>,
    /// The bad key's first record.
    first_bad: Put,
    /// The bad shard's checkpoint at the end.
    bad_checkpoint: Option<Checkpoint>,
    report: ShutdownReport,
}

fn sequence(text: &str) -> SequenceNumber {
    SequenceNumber::new(text, None).unwrap()
}

async fn started(broker: Broker) -> RunningBroker {
    let running = broker.start().await.unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while running.stats().shards(STREAM).len() < 4 {
        assert!(Instant::now() < until, "the broker took every shard");
        sleep(Duration::from_millis(100)).await;
    }
    // Every shard's first read opened its iterator at the tip (the default `LATEST`).
    sleep(Duration::from_secs(2)).await;
    running
}

fn put_all(kinesis: &MemoryStream) -> Vec<Put> {
    (0..RECORDS)
        .map(|i| {
            let key = format!("k{}", i % KEYS);
            let stored = kinesis.put(STREAM, &key, i.to_string()).unwrap();
            Put {
                i,
                key,
                shard: stored.shard,
                sequence: sequence(&stored.sequence),
            }
        })
        .collect()
}

/// The issue's scenario under `mode`.
async fn poisoned(mode: Mode) -> Seen {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).unwrap();
    let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
    let handled: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sub = broker.subscribe(STREAM);
    let number = |d: &Delivery| -> u64 { String::from_utf8_lossy(d.payload()).parse().unwrap() };
    match mode {
        Mode::Serial | Mode::Workers(_) | Mode::ByKey(_) => {
            let sub = match mode {
                Mode::Workers(n) => sub.workers(n),
                Mode::ByKey(n) => sub.workers(n).by_key(),
                _ => sub,
            };
            let handled = handled.clone();
            sub.handle(move |d: Delivery| {
                let handled = handled.clone();
                async move {
                    if d.partition_key() == BAD {
                        return Err(std::io::Error::other("poison"));
                    }
                    handled.lock().unwrap().push(number(&d));
                    Ok(())
                }
            })
            .unwrap();
        }
        Mode::SerialBatch(size) | Mode::ByKeyBatch(_, size) => {
            let sub = match mode {
                Mode::ByKeyBatch(n, _) => sub.workers(n).by_key(),
                _ => sub,
            };
            let handled = handled.clone();
            sub.batch(size)
                .handle(move |batch: Vec<Delivery>| {
                    let handled = handled.clone();
                    async move {
                        let bad: Vec<usize> = (0..batch.len())
                            .filter(|&i| batch[i].partition_key() == BAD)
                            .collect();
                        let mut handled = handled.lock().unwrap();
                        for (i, d) in batch.iter().enumerate() {
                            if !bad.contains(&i) {
                                handled.push(number(d));
                            }
                        }
                        if bad.is_empty() {
                            Ok(())
                        } else {
                            Err(BatchFailure::items(bad, std::io::Error::other("poison")))
                        }
                    }
                })
                .unwrap();
        }
    }
    let running = started(broker).await;
    let puts = put_all(&kinesis);
    sleep(Duration::from_secs(60)).await;
    let first_bad = puts.iter().find(|p| p.key == BAD).unwrap().clone();
    let bad_checkpoint = running
        .stats()
        .shards(STREAM)
        .iter()
        .find(|s| s.shard == first_bad.shard)
        .and_then(|s| s.checkpoint.clone());
    let report = running.shutdown().await;
    let handled = handled.lock().unwrap().clone();
    Seen {
        puts,
        handled,
        first_bad,
        bad_checkpoint,
        report,
    }
}

/// The checks every mode shares.
fn check(mode: Mode, seen: &Seen) {
    let handled: BTreeSet<u64> = seen.handled.iter().copied().collect();
    let bad = &seen.first_bad;
    let must: Vec<&Put> = seen
        .puts
        .iter()
        .filter(|p| p.key != BAD)
        .filter(|p| !mode.holds_shard() || p.shard != bad.shard || p.i < bad.i)
        .collect();
    let missing: Vec<u64> = must
        .iter()
        .filter(|p| !handled.contains(&p.i))
        .map(|p| p.i)
        .collect();
    assert!(
        missing.is_empty(),
        "{mode:?}: {} of {} records that need not wait were not handled in 60 s (first {:?})",
        missing.len(),
        must.len(),
        missing.first()
    );
    if mode.ordered() {
        // Each key's records complete in put order (first completions).
        let mut seen_keys: BTreeMap<&str, u64> = BTreeMap::new();
        let mut first = BTreeSet::new();
        for i in &seen.handled {
            if !first.insert(*i) {
                continue;
            }
            let put = &seen.puts[*i as usize];
            if let Some(before) = seen_keys.insert(&put.key, *i) {
                assert!(before < *i, "{mode:?}: key {} out of order", put.key);
            }
        }
    }
    if mode.holds_shard() {
        let later: Vec<u64> = seen
            .puts
            .iter()
            .filter(|p| p.shard == bad.shard && p.i > bad.i && handled.contains(&p.i))
            .map(|p| p.i)
            .collect();
        // Serial batches settle the other keys of the batch the bad record failed in.
        let limit = match mode {
            Mode::SerialBatch(size) => size,
            _ => 0,
        };
        assert!(
            later.len() <= limit,
            "{mode:?}: {} records of the bad shard after its failing record were handled",
            later.len()
        );
    }
    match &seen.bad_checkpoint {
        Some(Checkpoint::Sequence(at)) => assert!(
            *at < bad.sequence,
            "{mode:?}: the checkpoint {at} passed the failing record {}",
            bad.sequence
        ),
        Some(other) => panic!("{mode:?}: checkpoint {other:?}"),
        None => {}
    }
    assert!(
        !seen.report.handlers_finished,
        "{mode:?}: the bad record still fails"
    );
    let abandoned = seen
        .report
        .abandoned
        .iter()
        .find(|s| s.sequence == bad.sequence)
        .unwrap_or_else(|| panic!("{mode:?}: the report names the failing record"));
    assert_eq!(abandoned.shard, bad.shard);
    assert_eq!(abandoned.partition_key.as_deref(), Some(BAD));
    assert!(abandoned.attempts >= 5, "{mode:?}: {abandoned:?}");
    assert!(
        seen.report
            .abandoned
            .iter()
            .all(|s| s.partition_key.as_deref() == Some(BAD)),
        "{mode:?}: only the bad key's records are abandoned: {:?}",
        seen.report.abandoned
    );
}

#[tokio::test(start_paused = true)]
async fn serial_a_failing_record_holds_back_only_its_shard() {
    let seen = poisoned(Mode::Serial).await;
    check(Mode::Serial, &seen);
}

#[tokio::test(start_paused = true)]
async fn unordered_workers_a_failing_record_holds_no_worker() {
    let seen = poisoned(Mode::Workers(4)).await;
    check(Mode::Workers(4), &seen);
}

#[tokio::test(start_paused = true)]
async fn lanes_by_key_a_failing_key_holds_back_only_itself() {
    let seen = poisoned(Mode::ByKey(8)).await;
    check(Mode::ByKey(8), &seen);
}

#[tokio::test(start_paused = true)]
async fn lanes_fewer_than_keys_do_not_turn_a_bad_key_into_a_stalled_lane() {
    let seen = poisoned(Mode::ByKey(2)).await;
    check(Mode::ByKey(2), &seen);
}

#[tokio::test(start_paused = true)]
async fn serial_batches_failed_items_hold_back_only_their_shard() {
    let seen = poisoned(Mode::SerialBatch(10)).await;
    check(Mode::SerialBatch(10), &seen);
}

#[tokio::test(start_paused = true)]
async fn batches_on_lanes_by_key_failed_items_hold_back_only_their_key() {
    let seen = poisoned(Mode::ByKeyBatch(4, 10)).await;
    check(Mode::ByKeyBatch(4, 10), &seen);
}

/// Once the poisoned shard's settlement window is full it stops reading, and only it: the
/// other shards read and handle everything. Under lanes by key and unordered workers the
/// poisoned shard's healthy keys go on only until then: the failing record heads its shard's
/// window, so at most `max_unsettled` records of that shard are read past it (docs/lanes.md,
/// "Bound"). `max_unsettled(50)`.
async fn full_window(mode: Mode) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 4).unwrap();
    let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
    let handled: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let h = handled.clone();
    let sub = broker.subscribe(STREAM).max_unsettled(50);
    let sub = match mode {
        Mode::Workers(n) => sub.workers(n),
        Mode::ByKey(n) => sub.workers(n).by_key(),
        _ => sub,
    };
    sub.handle(move |d: Delivery| {
        let h = h.clone();
        async move {
            if d.partition_key() == BAD {
                return Err(std::io::Error::other("poison"));
            }
            h.lock()
                .unwrap()
                .insert(String::from_utf8_lossy(d.payload()).parse().unwrap());
            Ok(())
        }
    })
    .unwrap();
    let running = started(broker).await;
    let puts = put_all(&kinesis);
    sleep(Duration::from_secs(60)).await;
    let bad = puts.iter().find(|p| p.key == BAD).unwrap();
    let stats = running.stats();
    let per_shard: BTreeMap<&str, u64> = puts.iter().fold(BTreeMap::new(), |mut m, p| {
        *m.entry(p.shard.as_str()).or_default() += 1;
        m
    });
    let handled = handled.lock().unwrap().clone();
    for shard in stats.shards(STREAM) {
        let total = per_shard[shard.shard.as_str()];
        if shard.shard == bad.shard {
            assert!(
                shard.window <= 50,
                "{mode:?}: window {} over its bound",
                shard.window
            );
            assert!(
                shard.delivered < total,
                "{mode:?}: the poisoned shard stopped reading: {} of {total} read",
                shard.delivered
            );
            // What was read of its healthy keys is handled, up to the window's bound.
            let read: Vec<&Put> = puts
                .iter()
                .filter(|p| p.shard == bad.shard)
                .take(shard.delivered as usize)
                .collect();
            let healthy_read = read.iter().filter(|p| p.key != BAD).count();
            let healthy_handled = read
                .iter()
                .filter(|p| p.key != BAD && handled.contains(&p.i))
                .count();
            if mode.holds_shard() {
                assert!(healthy_handled < 50, "{mode:?}: {healthy_handled} handled");
            } else {
                assert_eq!(
                    healthy_handled, healthy_read,
                    "{mode:?}: healthy keys go on"
                );
            }
            let stuck = shard.stuck.as_ref().expect("the stuck record is reported");
            assert_eq!(stuck.sequence, bad.sequence, "{mode:?}");
            assert_eq!(stuck.partition_key.as_deref(), Some(BAD), "{mode:?}");
            assert!(stuck.since.is_some() && stuck.failing_for.is_some());
        } else {
            assert_eq!(
                shard.delivered, total,
                "{mode:?}: {} read to the tip",
                shard.shard
            );
            assert_eq!(shard.settled, total, "{mode:?}: {} handled", shard.shard);
        }
    }
    let healthy_missing = puts
        .iter()
        .filter(|p| p.shard != bad.shard && !handled.contains(&p.i))
        .count();
    assert_eq!(healthy_missing, 0, "{mode:?}");
    drop(running);
}

#[tokio::test(start_paused = true)]
async fn a_full_window_stops_only_the_poisoned_shard() {
    full_window(Mode::Serial).await;
}

#[tokio::test(start_paused = true)]
async fn a_full_window_stops_the_poisoned_shard_under_lanes_by_key_too() {
    full_window(Mode::ByKey(8)).await;
}

#[tokio::test(start_paused = true)]
async fn a_full_window_stops_the_poisoned_shard_under_unordered_workers_too() {
    full_window(Mode::Workers(4)).await;
}

/// A key that fails three times and then recovers, while its later records keep arriving,
/// completes in order: none of its records is handled before an earlier one, in every ordered
/// mode (the issue's checks never see the bad key succeed).
#[tokio::test(start_paused = true)]
async fn a_key_that_recovers_completes_in_order() {
    for mode in [Mode::Serial, Mode::ByKey(2), Mode::ByKey(8)] {
        let kinesis = MemoryStream::new();
        kinesis.create_stream(STREAM, 4).unwrap();
        let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
        let handled: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let failures = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let sub = broker.subscribe(STREAM);
        let sub = match mode {
            Mode::ByKey(n) => sub.workers(n).by_key(),
            _ => sub,
        };
        let (h, f) = (handled.clone(), failures.clone());
        sub.handle(move |d: Delivery| {
            let (h, f) = (h.clone(), f.clone());
            async move {
                if d.partition_key() == BAD
                    && f.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3
                {
                    return Err(std::io::Error::other("not yet"));
                }
                let n = String::from_utf8_lossy(d.payload()).parse().unwrap();
                h.lock().unwrap().push((d.partition_key().to_owned(), n));
                Ok(())
            }
        })
        .unwrap();
        let running = started(broker).await;
        // Three waves, the later ones while the bad key is still failing or just recovered.
        let mut put = 0;
        for wave in 0..3 {
            for _ in 0..200 {
                kinesis
                    .put(STREAM, &format!("k{}", put % KEYS), put.to_string())
                    .unwrap();
                put += 1;
            }
            sleep(Duration::from_millis(150 * (wave + 1))).await;
        }
        sleep(Duration::from_secs(30)).await;
        let handled = handled.lock().unwrap().clone();
        assert_eq!(handled.len() as u64, put, "{mode:?}: every record handled");
        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        for (key, n) in &handled {
            if let Some(before) = last.insert(key.clone(), *n) {
                assert!(before < *n, "{mode:?}: {key} handled {n} after {before}");
            }
        }
        assert_eq!(
            failures.load(std::sync::atomic::Ordering::SeqCst),
            3 + 12,
            "{mode:?}"
        );
        drop(running);
    }
}

/// Processing lag grows while handlers are slower than arrivals and returns to 0 once they
/// catch up; `millis_behind` (the read lag) stays 0 meanwhile, since the reader keeps up.
#[tokio::test(start_paused = true)]
async fn processing_lag_grows_while_handlers_fall_behind_and_returns_to_zero() {
    // Arrival times and the processing lag move with the test's (paused) time.
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let clock = TokioClock::new(now_ms);
    let kinesis = MemoryStream::new().with_clock(clock);
    kinesis.create_stream(STREAM, 1).unwrap();
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .wall_clock(clock)
        .build()
        .unwrap();
    broker
        .subscribe(STREAM)
        .channel_capacity(10_000)
        .handle(|_d: Delivery| async {
            sleep(Duration::from_millis(100)).await;
            Ok::<(), std::io::Error>(())
        })
        .unwrap();
    let running = started_one(broker).await;
    let stats = running.stats_handle();
    // 20 s of one record every 50 ms: twice what the handler keeps up with.
    let mut lags = Vec::new();
    let mut behind = Vec::new();
    for i in 0..400 {
        kinesis.put(STREAM, "k", format!("{i}")).unwrap();
        sleep(Duration::from_millis(50)).await;
        if i % 40 == 39 {
            let shard = stats.stats().shards(STREAM)[0].clone();
            lags.push(shard.processing_lag_millis.unwrap());
            behind.push(shard.millis_behind.unwrap_or(0));
        }
    }
    assert!(
        lags.windows(2).all(|w| w[1] > w[0]) && *lags.last().unwrap() >= 9_000,
        "the processing lag grows: {lags:?}"
    );
    assert!(
        behind.iter().all(|b| *b <= 1_000),
        "the read keeps up: {behind:?}"
    );
    sleep(Duration::from_secs(25)).await;
    let shard = stats.stats().shards(STREAM)[0].clone();
    assert_eq!(shard.processing_lag_millis, Some(0), "caught up");
    assert_eq!(shard.in_flight, 0);
    let report = running.shutdown().await;
    assert!(report.handlers_finished && report.abandoned.is_empty());
}

async fn started_one(broker: Broker) -> RunningBroker {
    let running = broker.start().await.unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while running.stats().shards(STREAM).is_empty() {
        assert!(Instant::now() < until, "the broker took the shard");
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(2)).await;
    running
}

/// A payload that does not parse fails the same way every time: with a dead letter it goes
/// there at once (no retries); without one it is retried like any failure (never dropped).
#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn an_unparsable_payload_goes_to_the_dead_letter_at_once() {
    use kinesis_broker::RetryPolicy;
    #[derive(serde::Deserialize)]
    struct Order {
        #[allow(dead_code)]
        id: u64,
    }
    for dead_letter in [true, false] {
        let kinesis = MemoryStream::new();
        kinesis.create_stream(STREAM, 1).unwrap();
        let mut broker = Broker::builder().kinesis(kinesis.clone()).build().unwrap();
        let attempts: Arc<Mutex<u32>> = Arc::default();
        let letters: Arc<Mutex<Vec<String>>> = Arc::default();
        let handled: Arc<Mutex<u32>> = Arc::default();
        let mut policy = RetryPolicy::default().max_attempts(20);
        if dead_letter {
            let letters = letters.clone();
            policy = policy.then_dead_letter(move |d: Delivery, _e| {
                let letters = letters.clone();
                async move {
                    letters.lock().unwrap().push(d.sequence_text().to_owned());
                    Ok::<(), std::io::Error>(())
                }
            });
        } else {
            policy = RetryPolicy::default();
        }
        let (a, h) = (attempts.clone(), handled.clone());
        broker
            .subscribe(STREAM)
            .retry(policy)
            .handle(move |d: Delivery| {
                let (a, h) = (a.clone(), h.clone());
                async move {
                    *a.lock().unwrap() += 1;
                    let _order: Order = d.json()?;
                    *h.lock().unwrap() += 1;
                    Ok::<(), kinesis_broker::HandlerError>(())
                }
            })
            .unwrap();
        let running = started_one(broker).await;
        kinesis.put(STREAM, "k", "not json").unwrap();
        kinesis.put(STREAM, "k", r#"{"id": 1}"#).unwrap();
        sleep(Duration::from_secs(30)).await;
        let report = running.shutdown().await;
        let attempts = *attempts.lock().unwrap();
        if dead_letter {
            assert_eq!(
                attempts, 2,
                "one attempt each: no retries of the bad payload"
            );
            assert_eq!(letters.lock().unwrap().len(), 1);
            assert_eq!(*handled.lock().unwrap(), 1);
            assert!(report.abandoned.is_empty());
        } else {
            assert!(attempts > 5, "retried like any failure: {attempts}");
            assert_eq!(
                *handled.lock().unwrap(),
                0,
                "the key waits behind it (serial)"
            );
            assert_eq!(report.abandoned.len(), 1, "never dropped: {report:?}");
        }
    }
}
