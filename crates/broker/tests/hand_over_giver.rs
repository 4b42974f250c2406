//! The giver of a planned hand-over lets the shard go as soon as the hand-over landed: its
//! `stats()` (and the simulation's check of who reads what) no longer list the shard, even when
//! the epoch bump that follows the hand-over waits for a table that does not answer.
//!
//! Found by the simulation (seed 11381): the giver was cut off from the lease table just after
//! its hand-over landed, its keeper waited up to a lease for the bump before it ended, and the
//! giver was listed as the shard's reader beside its taker for 8 s. And while every answer to a
//! hand-over that landed is lost, the giver still lists the shard but says whom it hands it to
//! (seed 9034). And a hand-over by load whose taker never hears the poke is taken once the
//! giver moves the epoch.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::{
    testing::{hash_key, MemoryStream},
    Broker, Checkpoint, Delivery, MemoryLeaseStore, MemoryLeaseTable, RunningBroker,
};
use kinesis_lease_core::testkit::Outage;
use kinesis_lease_core::{
    BoxFuture, Holder, Lease, LeaseError, LeaseKey, LeaseResult, Load, Outcome, Take,
};
use tokio::time::{sleep, Instant};

const STREAM: &str = "s";
const MEMBERS: &str = "s@members";

/// A memory store whose epoch bumps hang while `hang` is set; `bumps` counts the calls to
/// bump the stream's epoch. While `lose_hand_overs` is set, hand-overs land and their answers
/// are lost. With `deaf`, renewals answer without the pokes the row carries: its instance never
/// hears of a hand-over poked at it. With `mute`, its pokes answer as written and are not sent:
/// the member it pokes never hears of the hand-over, though it hears others' pokes. While
/// `roster_bumps_fail` is set, bumps of the roster's epoch fail: its instance's join is not
/// announced.
#[derive(Debug, Clone, Default)]
struct HangingBumps {
    inner: MemoryLeaseStore,
    hang: Arc<AtomicBool>,
    bumps: Arc<AtomicU32>,
    lose_hand_overs: Arc<AtomicBool>,
    deaf: bool,
    mute: bool,
    roster_bumps_fail: Arc<AtomicBool>,
}

impl HangingBumps {
    fn over(table: &MemoryLeaseTable) -> Self {
        HangingBumps {
            inner: MemoryLeaseStore::over(table),
            ..Default::default()
        }
    }

    /// `outcome` as this store answers it: without pokes when `deaf`.
    fn heard(&self, outcome: LeaseResult<Outcome>) -> LeaseResult<Outcome> {
        match outcome {
            Ok(Outcome::Written(mut row)) if self.deaf => {
                row.pokes = 0;
                row.poked = None;
                Ok(Outcome::Written(row))
            }
            other => other,
        }
    }
}

impl LeaseStore for HangingBumps {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.create(row)
    }
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.take(key, holder, take)
    }
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move { self.heard(self.inner.renew(key, holder, ttl, checkpoint).await) })
    }
    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            self.heard(
                self.inner
                    .renew_with_load(key, holder, ttl, checkpoint, load)
                    .await,
            )
        })
    }
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.checkpoint(key, holder, checkpoint)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.release(key, holder, checkpoint)
    }
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        self.inner.request(key, asker, holder)
    }
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.hand_over(key, holder, to, ttl, checkpoint).await;
            if self.lose_hand_overs.load(Ordering::SeqCst) {
                return Err(LeaseError::Unavailable {
                    operation: "hand_over",
                    resource: key.to_string(),
                    source: "the answer was lost (staged by the test)".into(),
                });
            }
            outcome
        })
    }
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        self.inner.delete(key, observed)
    }
    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        if self.mute {
            return Box::pin(async { Ok(true) });
        }
        self.inner.poke(member, about)
    }
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(async move {
            if stream == STREAM {
                self.bumps.fetch_add(1, Ordering::SeqCst);
            }
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if stream == MEMBERS && self.roster_bumps_fail.load(Ordering::SeqCst) {
                return Err(LeaseError::Unavailable {
                    operation: "bump_epoch",
                    resource: stream.to_owned(),
                    source: "injected, nothing bumped".into(),
                });
            }
            self.inner.bump_epoch(stream).await
        })
    }
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        self.inner.epoch(stream)
    }
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        self.inner.read(key)
    }
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        self.inner.list(stream)
    }
}

async fn start(
    kinesis: &MemoryStream,
    store: impl LeaseStore + 'static,
    owner: &str,
    by_load: bool,
) -> RunningBroker {
    let mut broker = Broker::builder()
        .kinesis(kinesis.clone())
        .lease_store(store)
        .owner_id(owner)
        .build()
        .expect("broker");
    let sub = broker.subscribe(STREAM);
    let sub = if by_load { sub.balance_by_load() } else { sub };
    sub.handle(|_d: Delivery| async { Ok::<(), std::io::Error>(()) })
        .expect("subscribe");
    broker.start().await.expect("start")
}

fn holds(broker: &RunningBroker, shard: &str) -> bool {
    broker
        .stats()
        .shards(STREAM)
        .iter()
        .any(|s| s.shard == shard)
}

/// `a` holds both shards; its epoch bumps then hang. `b` joins and asks for one; `a` hands it
/// over. Expected: within a take interval of the hand-over landing in the table, `a` no longer
/// lists the shard; it did send the bump, and once the table answers again the bump that
/// timed out is sent again (owed). Failed before the fix: `a` listed the shard until its bump
/// timed out, a lease after the hand-over.
#[tokio::test(start_paused = true)]
async fn a_giver_lets_the_shard_go_while_its_epoch_bump_hangs() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let hang = Arc::new(AtomicBool::new(false));
    let bumps = Arc::new(AtomicU32::new(0));
    let a = start(
        &kinesis,
        HangingBumps {
            inner: MemoryLeaseStore::over(&table),
            hang: hang.clone(),
            bumps: bumps.clone(),
            lose_hand_overs: Arc::default(),
            deaf: false,
            mute: false,
            roster_bumps_fail: Arc::default(),
        },
        "a",
        false,
    )
    .await;
    let until = Instant::now() + Duration::from_secs(20);
    while a.stats().shards(STREAM).len() < 2 {
        assert!(Instant::now() < until, "a never held both shards");
        sleep(Duration::from_millis(100)).await;
    }
    hang.store(true, Ordering::SeqCst);
    let bumps_before = bumps.load(Ordering::SeqCst);
    let b = start(&kinesis, MemoryLeaseStore::over(&table), "b", false).await;
    let reader = MemoryLeaseStore::over(&table);
    // The hand-over as the table shows it: a shard row now owned by b.
    let until = Instant::now() + Duration::from_secs(60);
    let (shard, handed_at) = loop {
        let rows = reader.list(STREAM).await.expect("list");
        if let Some(row) = rows.iter().find(|r| r.owner.as_deref() == Some("b")) {
            break (row.key.shard().to_owned(), Instant::now());
        }
        assert!(Instant::now() < until, "no shard was handed to b");
        sleep(Duration::from_millis(50)).await;
    };
    let until = handed_at + Duration::from_secs(1);
    while holds(&a, &shard) && Instant::now() < until {
        sleep(Duration::from_millis(50)).await;
    }
    let still = holds(&a, &shard);
    let late = handed_at.elapsed();
    let sent = bumps.load(Ordering::SeqCst) - bumps_before;
    // The table answers again: the bump that timed out (a lease after it was sent) is owed,
    // and the coordinator's next tick sends it again.
    hang.store(false, Ordering::SeqCst);
    sleep(Duration::from_secs(12)).await;
    let resent = bumps.load(Ordering::SeqCst) - bumps_before - sent;
    b.shutdown().await;
    a.shutdown().await;
    assert!(
        !still,
        "a still listed {shard} {late:?} after handing it to b (its epoch bump hangs)"
    );
    assert!(sent >= 1, "a never bumped the epoch after its hand-over");
    assert!(resent >= 1, "the bump that timed out was never sent again");
}

/// A hand-over whose every answer is lost, staged: `a` holds both shards of a 2-shard stream,
/// every answer to its hand-overs is then lost (the writes land), and `b` joins and asks for
/// one. Returns once the table shows a row handed to `b`.
struct LostAnswers {
    a: RunningBroker,
    b: RunningBroker,
    /// Set while the answers are lost.
    lose: Arc<AtomicBool>,
    /// The shard handed to `b`.
    shard: String,
    /// When the table first showed it handed over.
    handed_at: Instant,
    /// Kept alive for the brokers.
    _kinesis: MemoryStream,
}

async fn lost_answers(by_load: bool) -> LostAnswers {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let lose = Arc::new(AtomicBool::new(false));
    let a = start(
        &kinesis,
        HangingBumps {
            lose_hand_overs: lose.clone(),
            ..HangingBumps::over(&table)
        },
        "a",
        by_load,
    )
    .await;
    let until = Instant::now() + Duration::from_secs(20);
    while a.stats().shards(STREAM).len() < 2 {
        assert!(Instant::now() < until, "a never held both shards");
        sleep(Duration::from_millis(100)).await;
    }
    lose.store(true, Ordering::SeqCst);
    let b = start(&kinesis, MemoryLeaseStore::over(&table), "b", by_load).await;
    let reader = MemoryLeaseStore::over(&table);
    // The hand-over as the table shows it: a shard row now owned by b.
    let until = Instant::now() + Duration::from_secs(60);
    let (shard, handed_at) = loop {
        let rows = reader.list(STREAM).await.expect("list");
        if let Some(row) = rows.iter().find(|r| r.owner.as_deref() == Some("b")) {
            break (row.key.shard().to_owned(), Instant::now());
        }
        assert!(Instant::now() < until, "no shard was handed to b");
        sleep(Duration::from_millis(50)).await;
    };
    LostAnswers {
        a,
        b,
        lose,
        shard,
        handed_at,
        _kinesis: kinesis,
    }
}

/// `a` holds both shards; every answer to its hand-overs is lost (the writes land). `b` joins
/// and asks for one; the row is b's once the hand-over landed, while `a` retries the write
/// until an answer comes or its lease lapses. All that while `a` still lists the shard, but says whom
/// it hands it to (`handing_to`): nothing of it is delivered or handled there any more. Seed
/// 9034 of the simulation counted such a giver as the shard's second reader.
#[tokio::test(start_paused = true)]
async fn a_giver_whose_hand_over_answers_are_lost_says_whom_it_hands_to() {
    let staged = lost_answers(false).await;
    let (a, b, lose, shard) = (staged.a, staged.b, staged.lose, staged.shard);
    // The shard is b's (b reads it at its next listing); a lists it too, handing it to b,
    // until its retries end.
    let mut seen_handing = false;
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        let stats = a.stats();
        let listed = stats.shards(STREAM).iter().find(|s| s.shard == shard);
        if let Some(listed) = listed {
            assert_eq!(
                listed.handing_to.as_deref(),
                Some("b"),
                "a lists {shard}, handed to b, as its own"
            );
            seen_handing = true;
        }
        sleep(Duration::from_millis(50)).await;
    }
    lose.store(false, Ordering::SeqCst);
    assert!(
        seen_handing,
        "a never listed {shard} while its hand-over answers were lost"
    );
    assert!(!holds(&a, &shard), "a still lists {shard} a lease later");
    b.shutdown().await;
    a.shutdown().await;
}

/// The stream of the test by load: 4 even shards.
const LOAD_SHARDS: u32 = 4;

/// A partition key of shard `i` of the stream's even shards.
fn key_of(i: u32) -> String {
    let step = u128::MAX / u128::from(LOAD_SHARDS) + 1;
    (0..)
        .map(|n| format!("k{n}"))
        .find(|k| hash_key(k) / step == u128::from(i))
        .expect("some key hashes into each shard")
}

/// Loads to publish and compare: a record a second on each of the stream's shards, for a
/// minute.
async fn a_minute_of_load(kinesis: &MemoryStream) {
    let keys: Vec<String> = (0..LOAD_SHARDS).map(key_of).collect();
    for second in 0..60u64 {
        for key in &keys {
            kinesis.put(STREAM, key, second.to_string()).expect("put");
        }
        sleep(Duration::from_secs(1)).await;
    }
}

/// `giver` and a `taker` that never hears of pokes share 4 shards by load. A row of the
/// giver's is marked wanted by the taker (as a move by load marks it); the giver hands it over
/// and pokes the taker, which does not hear it. Expected: the taker holds the shard within
/// 8.5 s of the hand-over: the giver moves the epoch 7 s after the poke (two renew intervals
/// and a take interval), and the taker's next take tick lists and takes it (measured: 7 s).
/// Without that fallback the taker lists only at one of its own comparisons that finds the
/// giver holding another number of shards than its listing showed: 9 s here, and the test
/// fails.
#[tokio::test(start_paused = true)]
async fn a_hand_over_whose_taker_missed_the_poke_is_taken_after_the_epoch_moves() {
    fastrand::seed(6);
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, LOAD_SHARDS).expect("stream");
    let table = MemoryLeaseTable::new();
    let giver = start(&kinesis, MemoryLeaseStore::over(&table), "instance-0", true).await;
    let taker = HangingBumps {
        deaf: true,
        ..HangingBumps::over(&table)
    };
    let taker = start(&kinesis, taker, "instance-1", true).await;
    a_minute_of_load(&kinesis).await;
    let store = MemoryLeaseStore::over(&table);
    let rows = store.list(STREAM).await.expect("list");
    let row = rows
        .iter()
        .find(|r| r.is_held_by("instance-0"))
        .expect("a row held by the giver");
    let shard = row.key.shard().to_owned();
    let marked = store
        .request(&row.key, "instance-1", "instance-0")
        .await
        .expect("request");
    assert!(
        matches!(marked, Outcome::Written(_)),
        "not marked: {marked:?}"
    );
    // The giver's keeper hands the row over at its next renewal (within 3 s).
    let mut gone_at = None;
    for tenth in 0..50u64 {
        sleep(Duration::from_millis(100)).await;
        if !holds(&giver, &shard) {
            gone_at = Some(tenth);
            break;
        }
    }
    assert!(gone_at.is_some(), "the marked row was never handed over");
    let mut taken_after = None;
    for tenth in 1..=200u64 {
        sleep(Duration::from_millis(100)).await;
        if holds(&taker, &shard) {
            taken_after = Some(Duration::from_millis(tenth * 100));
            break;
        }
    }
    let taken_after =
        taken_after.expect("the shard handed to a taker that missed the poke was never taken");
    eprintln!("taken {taken_after:?} after the hand-over");
    assert!(
        taken_after <= Duration::from_millis(8_500),
        "taken only {taken_after:?} after the hand-over"
    );
    giver.shutdown().await;
    taker.shutdown().await;
}

/// `a` holds both shards; every answer to its hand-overs is lost (the writes land). `b` joins
/// and asks for one; the row is handed to `b` in the table, while `a` retries until its lease
/// lapses and counts the shard as lost. Expected: `b` takes the row all the same, within a
/// lease and a few take intervals of the hand-over landing: `a`, not knowing whether its
/// hand-over landed, announces it as it would one that answered. Without that nothing moved
/// the epoch and nobody took the row while `b` lived: a row owned by a live member is its own
/// business (simulation seed 35785, placed by load: the shard stood unread from 82 s to the end
/// of the run, 170 s).
async fn a_hand_over_whose_every_answer_is_lost_is_taken(by_load: bool) {
    let staged = lost_answers(by_load).await;
    let (a, b, lose, shard, handed_at) = (
        staged.a,
        staged.b,
        staged.lose,
        staged.shard,
        staged.handed_at,
    );
    let until = handed_at + Duration::from_secs(30);
    while !holds(&b, &shard) && Instant::now() < until {
        sleep(Duration::from_millis(100)).await;
    }
    let taken_after = handed_at.elapsed();
    let taken = holds(&b, &shard);
    lose.store(false, Ordering::SeqCst);
    b.shutdown().await;
    a.shutdown().await;
    assert!(
        taken,
        "{shard}, handed to b while every answer was lost, was not taken by b in 30 s"
    );
    eprintln!("taken {taken_after:?} after the hand-over landed");
    // The giver retries until its lease lapses (at most a lease after the landing), then
    // announces; the taker's next take tick takes the row (measured: 7.1 s either way; 29.1 s
    // before, when a later comparison of counts happened to list the rows).
    assert!(
        taken_after <= Duration::from_secs(12),
        "taken only {taken_after:?} after the hand-over landed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hand_over_whose_every_answer_is_lost_is_taken_by_count() {
    a_hand_over_whose_every_answer_is_lost_is_taken(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_hand_over_whose_every_answer_is_lost_is_taken_by_load() {
    a_hand_over_whose_every_answer_is_lost_is_taken(true).await;
}

/// A giver hands a row over by load and the taker does not hear of it (the giver's poke is
/// `mute`, or the taker `deaf`); an operator then moves the row (`release --force`: an evict
/// that pokes the member the row names) and the epoch bump after it fails. Returns how long
/// after the evict the shard was read again (`None`: not in 40 s), checking all along that
/// no two instances read it, and how many times the taker bumped the epoch from the evict
/// until then.
async fn moved_while_handed(mute: bool, deaf: bool) -> (Option<Duration>, u32) {
    fastrand::seed(6);
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, LOAD_SHARDS).expect("stream");
    let table = MemoryLeaseTable::new();
    let giver = HangingBumps {
        mute,
        ..HangingBumps::over(&table)
    };
    let giver = start(&kinesis, giver, "instance-0", true).await;
    let taker = HangingBumps {
        deaf,
        ..HangingBumps::over(&table)
    };
    let taker_bumps = taker.bumps.clone();
    let taker = start(&kinesis, taker, "instance-1", true).await;
    a_minute_of_load(&kinesis).await;
    let operator = MemoryLeaseStore::over(&table);
    let rows = operator.list(STREAM).await.expect("list");
    let row = rows
        .iter()
        .find(|r| r.is_held_by("instance-0"))
        .expect("a row held by the giver");
    let (key, shard) = (row.key.clone(), row.key.shard().to_owned());
    let marked = operator
        .request(&key, "instance-1", "instance-0")
        .await
        .expect("request");
    assert!(matches!(marked, Outcome::Written(_)), "{marked:?}");
    let until = Instant::now() + Duration::from_secs(5);
    let handed = loop {
        let row = operator.read(&key).await.expect("read").expect("row");
        if row.owner.as_deref() == Some("instance-1") && row.token.is_none() {
            break row;
        }
        assert!(Instant::now() < until, "never handed over: {row:?}");
        sleep(Duration::from_millis(100)).await;
    };
    // The operator's move, as the command line makes it; its epoch bump fails.
    let member = LeaseKey::member(STREAM, "instance-1").expect("member key");
    let evicted = operator
        .evict(&key, handed.counter, None, Some(&member))
        .await
        .expect("evict");
    assert!(matches!(evicted, Outcome::Written(_)), "{evicted:?}");
    let at = Instant::now();
    let bumps_before = taker_bumps.load(Ordering::SeqCst);
    let mut read_again = None;
    let mut bumped = 0;
    while at.elapsed() < Duration::from_secs(40) {
        let readers = [&giver, &taker].iter().filter(|b| holds(b, &shard)).count();
        assert!(readers <= 1, "two readers of {shard}");
        if readers == 1 && read_again.is_none() {
            read_again = Some(at.elapsed());
            bumped = taker_bumps.load(Ordering::SeqCst) - bumps_before;
        }
        sleep(Duration::from_millis(100)).await;
    }
    giver.shutdown().await;
    taker.shutdown().await;
    (read_again, bumped)
}

/// The taker never heard of the hand-over, and hears the operator's poke about a row it does
/// not hold: it reads the row, finds it in the operator's hold, and is the only instance that
/// knows of the move. Expected: it moves the epoch, and the row is read again once it stood
/// still for a lease: within 15 s of the evict (the taker's member renewal, 3 s; a take
/// interval; the hold, 10 s; a take interval; measured: 14 s), the taker having moved the
/// epoch (listing alone, it would take the row in time itself, and nobody else would know). Simulation seed 71074 (by load,
/// store delays): the taker returned, nothing was announced, and the shard stood unread from
/// 45 s to 140 s. Here, before the fix: 20 s, at a later comparison of loads that listed.
#[tokio::test(start_paused = true)]
async fn a_row_handed_over_and_moved_by_an_operator_is_announced_by_the_taker_poked_about_it() {
    let (read_again, bumped) = moved_while_handed(true, false).await;
    eprintln!("read again {read_again:?} after the evict; the taker bumped {bumped} times");
    assert!(bumped >= 1, "the taker did not announce the move");
    let read_again = read_again.expect("never read again after the operator's move");
    assert!(
        read_again >= Duration::from_secs(10),
        "read again {read_again:?} after the evict: before it stood still for a lease"
    );
    assert!(
        read_again <= Duration::from_secs(15),
        "read again only {read_again:?} after the evict"
    );
}

/// The same move while the taker hears no poke at all: only the giver, checking two renew
/// intervals and a take interval after its poke whether the row was taken, can see the move.
/// Expected: it moves the epoch then, and the row is read again within 18.5 s of the evict (up
/// to 7 s to the check, a take interval, the 10-s hold, a take interval; measured: 17 s).
/// Before, the giver's check saw no taker waiting and said nothing; the rows were listed at a
/// later comparison of loads that found a count the listing did not show: 20 s.
#[tokio::test(start_paused = true)]
async fn a_row_handed_to_a_deaf_taker_and_moved_by_an_operator_is_announced_by_the_giver() {
    let (read_again, _) = moved_while_handed(false, true).await;
    eprintln!("read again {read_again:?} after the evict");
    let read_again = read_again.expect("never read again after the operator's move");
    assert!(
        (Duration::from_secs(10)..=Duration::from_millis(18_500)).contains(&read_again),
        "read again {read_again:?} after the evict"
    );
}

/// A member whose join is not announced (its roster bumps fail) may not take shards until one
/// lands. Expected: no giver balancing by load gives it one meanwhile (it publishes no
/// capacity until then, as one shutting down does), and once its bump lands it gets its share.
/// Simulation seed 27312: a giver that had listed the roster for another reason saw the new
/// member, gave it a shard, and the shard stood unread 9.5 s after the hand-over (the bound
/// after a planned hand-over is 7.5 s) until the giver moved the epoch and the member, still
/// unannounced, took it at its next listing. Here, before the fix, the giver marked a row
/// wanted by the unannounced member.
#[tokio::test(start_paused = true)]
async fn a_member_whose_join_is_not_announced_is_given_nothing_by_load() {
    fastrand::seed(6);
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, LOAD_SHARDS).expect("stream");
    let table = MemoryLeaseTable::new();
    let giver = start(&kinesis, MemoryLeaseStore::over(&table), "instance-0", true).await;
    a_minute_of_load(&kinesis).await;
    let late = HangingBumps::over(&table);
    late.roster_bumps_fail.store(true, Ordering::SeqCst);
    let fail = late.roster_bumps_fail.clone();
    let late = start(&kinesis, late, "instance-1", true).await;
    // Once it joined, another change of the roster: the giver lists it, and sees the new
    // member.
    let operator = MemoryLeaseStore::over(&table);
    let member = LeaseKey::member(STREAM, "instance-1").expect("member key");
    let until = Instant::now() + Duration::from_secs(10);
    while operator.read(&member).await.expect("read").is_none() {
        assert!(Instant::now() < until, "instance-1 never joined");
        sleep(Duration::from_millis(100)).await;
    }
    operator.bump_epoch(MEMBERS).await.expect("bump");
    let keys: Vec<String> = (0..LOAD_SHARDS).map(key_of).collect();
    for tenth in 0..600u64 {
        if tenth % 10 == 0 {
            for key in &keys {
                kinesis.put(STREAM, key, tenth.to_string()).expect("put");
            }
        }
        for row in operator.list(STREAM).await.expect("list") {
            assert!(
                row.owner.as_deref() != Some("instance-1")
                    && row.wanted_by.as_deref() != Some("instance-1"),
                "a row given to a member not announced, {} s after its join: {row:?}",
                tenth / 10
            );
        }
        sleep(Duration::from_millis(100)).await;
    }
    // Its bump lands: it gets its share.
    fail.store(false, Ordering::SeqCst);
    let start = Instant::now();
    let mut got = None;
    for second in 0..60u64 {
        for key in &keys {
            kinesis.put(STREAM, key, second.to_string()).expect("put");
        }
        if got.is_none() && late.stats().shards(STREAM).len() == 2 {
            got = Some(start.elapsed());
        }
        sleep(Duration::from_secs(1)).await;
    }
    giver.shutdown().await;
    late.shutdown().await;
    let got = got.expect("no share in a minute after its join was announced");
    eprintln!("its share {got:?} after its bump could land");
    assert!(
        got <= Duration::from_secs(30),
        "its share only {got:?} after"
    );
}

/// A member's row shows its capacity once its join is announced, also when the announcement
/// lands while a renewal (showing none) is on its way: the next renewal goes at once, not a
/// renew interval later. Every call reaches the table 0.5 s late here, and a renewal's answer
/// comes 2 s after it landed: the first renewal, sent at the join, lands showing no capacity,
/// the roster bump lands beside it, and the renewal sent when its answer comes lands with the
/// capacity 2.5 s after the first (3 s, at the next tick, before the fix: found by review,
/// givers passed such a member over meanwhile).
#[tokio::test(start_paused = true)]
async fn a_member_shows_its_capacity_once_announced_though_a_renewal_was_on_its_way() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).expect("stream");
    let table = MemoryLeaseTable::new();
    let (store, switch) = Outage::wrap(Arc::new(MemoryLeaseStore::over(&table)));
    switch.slow(Duration::from_millis(500));
    switch.slow_renewals(Duration::from_secs(2));
    let started = Instant::now();
    let member = start(&kinesis, store, "instance-0", true).await;
    let operator = MemoryLeaseStore::over(&table);
    let key = LeaseKey::member(STREAM, "instance-0").expect("member key");
    let mut shown = None;
    let mut seen_none = None;
    while started.elapsed() < Duration::from_secs(10) {
        let capacity = operator
            .read(&key)
            .await
            .expect("read")
            .and_then(|row| row.load)
            .and_then(|load| load.capacity_milli);
        match capacity {
            Some(0) => seen_none = seen_none.or(Some(Instant::now())),
            Some(_) => {
                shown = Some(started.elapsed());
                break;
            }
            None => {}
        }
        sleep(Duration::from_millis(100)).await;
    }
    member.shutdown().await;
    let shown = shown.expect("the member row never showed a capacity");
    let none = seen_none.expect("the first renewal, before the announcement, shows no capacity");
    let after = started + shown - none;
    eprintln!("capacity shown {after:?} after the row showed none ({shown:?} after the start)");
    assert!(
        after <= Duration::from_millis(2_700),
        "capacity shown only {after:?} after the row showed none"
    );
}
