//! The commands end to end against an in-process lease table (`MemoryLeaseStore`), on paused
//! time: what they print, what they write, what they refuse. The same commands run against
//! DynamoDB and Kinesis emulators in `tests/cli.rs` (`cargo xtask integ`).

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kinesis_broker_cli::commands::Context;
use kinesis_broker_cli::{run_with, Cli, CliError};
use kinesis_lease_core::testkit::Outage;
use kinesis_lease_core::{
    rules, Checkpoint, Holder, Lease, LeaseKey, LeaseStore, SequenceNumber, Take,
};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_memory::{MemoryStream, Op};
use serde_json::Value;

const TTL: Duration = Duration::from_secs(10);

fn ctx(store: &MemoryLeaseStore) -> Context {
    Context {
        table: "leases".into(),
        store: Arc::new(store.clone()),
        dynamo: None,
        kinesis: None,
        aws: None,
    }
}

/// The context of `store` with `kinesis` to ask.
fn ctx_with(store: &MemoryLeaseStore, kinesis: &MemoryStream) -> Context {
    Context {
        kinesis: Some(Arc::new(kinesis.clone())),
        ..ctx(store)
    }
}

async fn cli(store: &MemoryLeaseStore, args: &str) -> (Result<(), CliError>, String, String) {
    cli_in(&ctx(store), args).await
}

async fn cli_in(ctx: &Context, args: &str) -> (Result<(), CliError>, String, String) {
    let cli = Cli::try_parse_from(std::iter::once("kinesis-broker").chain(args.split_whitespace()))
        .expect("arguments parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let result = run_with(&cli, ctx, &mut out, &mut err).await;
    (
        result,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

async fn json(store: &MemoryLeaseStore, args: &str) -> Value {
    json_in(&ctx(store), args).await
}

async fn json_in(ctx: &Context, args: &str) -> Value {
    let (result, out, err) = cli_in(ctx, args).await;
    result.unwrap_or_else(|e| panic!("{args}: {e} ({err})"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args}: {e}: {out}"))
}

fn key(stream: &str, shard: &str) -> LeaseKey {
    LeaseKey::new(stream, shard).unwrap()
}

async fn create(store: &MemoryLeaseStore, stream: &str, shard: &str, cp: Option<Checkpoint>) {
    let row = Lease::new(key(stream, shard), Vec::new()).starting_at(cp);
    assert!(store.create(&row).await.unwrap());
}

async fn take(store: &MemoryLeaseStore, stream: &str, shard: &str, holder: &Holder) -> Lease {
    let k = key(stream, shard);
    let fence = store.read(&k).await.unwrap().map_or(0, |r| r.counter);
    store
        .take(&k, holder, &Take::fenced(TTL, fence))
        .await
        .unwrap()
        .written()
        .expect("taken")
}

fn seq(n: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, None).unwrap())
}

/// A stream `s` of four shards: 0 held by `a` (a member), 1 free at TRIM_HORIZON, 2 finished,
/// 3 handed over to `b`; `a` and `b` have member rows, and other rows exist beside.
async fn fleet() -> (MemoryLeaseStore, Holder, Holder) {
    let store = MemoryLeaseStore::new();
    let (a, b) = (Holder::new("a", "r1.a"), Holder::new("b", "r1.b"));
    for (shard, cp) in [
        ("shardId-0", None),
        ("shardId-1", Some(Checkpoint::TrimHorizon)),
        ("shardId-2", Some(Checkpoint::ShardEnd)),
        ("shardId-3", None),
    ] {
        create(&store, "s", shard, cp).await;
    }
    create(&store, "other", "shardId-0", None).await;
    take(&store, "s", "shardId-0", &a).await;
    assert!(store
        .renew(&key("s", "shardId-0"), &a, TTL, Some(&seq("42")))
        .await
        .unwrap()
        .is_written());
    let held = take(&store, "s", "shardId-3", &a).await;
    assert!(store
        .request(&held.key, "b", "a")
        .await
        .unwrap()
        .is_written());
    assert!(store
        .hand_over(&held.key, &a, "b", TTL, Some(&seq("7")))
        .await
        .unwrap()
        .is_written());
    for member in [&a, &b] {
        let k = key("s@members", &member.owner);
        take(&store, "s@members", k.shard(), member).await;
    }
    (store, a, b)
}

/// Renews `holder`'s member row every second, as a live broker would, until dropped.
fn keep_alive(store: &MemoryLeaseStore, holder: &Holder) -> tokio::task::JoinHandle<()> {
    let (store, holder) = (store.clone(), holder.clone());
    tokio::spawn(async move {
        let k = key("s@members", &holder.owner);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let _ = store.renew(&k, &holder, TTL, None).await;
        }
    })
}

#[tokio::test(start_paused = true)]
async fn leases_lists_shard_rows_only_sorted_with_their_state() {
    let (store, _, _) = fleet().await;
    let rows = json(&store, "leases --table leases --stream s --json").await;
    let rows = rows.as_array().unwrap();
    let shards: Vec<&str> = rows.iter().map(|r| r["shard"].as_str().unwrap()).collect();
    assert_eq!(shards, ["shardId-0", "shardId-1", "shardId-2", "shardId-3"]);
    let states: Vec<&str> = rows.iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["held", "free", "finished", "handed_over"]);
    assert_eq!(rows[0]["owner"], "a");
    assert_eq!(rows[0]["checkpoint"], "42");
    assert_eq!(rows[1]["owner"], Value::Null);
    assert_eq!(rows[1]["checkpoint"], "TRIM_HORIZON");
    assert_eq!(rows[2]["checkpoint"], "SHARD_END");
    assert_eq!(rows[3]["owner"], "b");
    assert!(rows[0]["counter"].as_u64().unwrap() >= 2);

    let (result, out, _) = cli(&store, "leases --table leases --stream s").await;
    result.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[4].contains("handed over"), "{out}");
    assert!(!out.contains('*') && !out.contains("@members"), "{out}");

    let (result, _, _) = cli(&store, "leases --table leases --stream nothing").await;
    let err = result.unwrap_err();
    assert!(matches!(err, CliError::StreamNotFound { ref stream, .. } if stream == "nothing"));
    assert_eq!(err.exit_code(), 1);
}

#[tokio::test(start_paused = true)]
async fn members_are_judged_alive_by_their_counters_moving() {
    let (store, a, _b) = fleet().await;
    let live = keep_alive(&store, &a);
    let members = json(&store, "members --table leases --stream s --json").await;
    let members = members.as_array().unwrap();
    assert_eq!(members.len(), 2, "{members:?}");
    assert_eq!(members[0]["owner"], "a");
    assert_eq!(members[0]["alive"], true);
    assert!(members[0]["judged"]
        .as_str()
        .unwrap()
        .starts_with("counter"));
    assert_eq!(members[0]["shards"], serde_json::json!(["shardId-0"]));
    assert_eq!(members[1]["owner"], "b");
    assert_eq!(members[1]["alive"], false, "b never renews");
    assert_eq!(
        members[1]["shards"],
        serde_json::json!([]),
        "handed over, not taken yet"
    );
    live.abort();

    // `a` leaves: its member row is released.
    let k = key("s@members", "a");
    assert!(store.release(&k, &a, None).await.unwrap().is_written());
    let (result, out, _) = cli(&store, "members --table leases --stream s").await;
    result.unwrap();
    let a_line = out
        .lines()
        .find(|l| l.starts_with(" a") || l.starts_with("a"))
        .unwrap();
    assert!(a_line.contains("no") && a_line.contains("left"), "{out}");
}

#[tokio::test(start_paused = true)]
async fn release_frees_a_row_fenced_and_refuses_finished_or_missing_rows() {
    let (store, a, _) = fleet().await;
    let before = store.read(&key("s", "shardId-0")).await.unwrap().unwrap();
    let out = json(
        &store,
        "release --table leases --stream s --shard shardId-0 --json",
    )
    .await;
    assert_eq!(out[0]["result"], "released");
    assert_eq!(out[0]["owner_before"], "a");
    assert_eq!(out[0]["counter_before"], before.counter);
    assert_eq!(out[0]["checkpoint"], "42", "the checkpoint stays");
    let after = store.read(&key("s", "shardId-0")).await.unwrap().unwrap();
    // The operator's hold: nobody's, taken once it stood still for a lease.
    assert!(rules::is_evicted(&after), "{after:?}");
    assert_eq!(after.counter, before.counter + 1);
    let listed = json(&store, "leases --table leases --stream s --json").await;
    assert_eq!(
        (&listed[0]["state"], &listed[0]["owner"]),
        (&Value::from("evicted"), &Value::Null)
    );
    assert_eq!(store.epoch("s").await.unwrap(), 1, "the others are told");
    assert!(
        !store
            .renew(&key("s", "shardId-0"), &a, TTL, None)
            .await
            .unwrap()
            .is_written(),
        "the holder's next renewal is refused"
    );

    let again = json(
        &store,
        "release --table leases --stream s --shard shardId-0 --json",
    )
    .await;
    assert_eq!(again[0]["result"], "already_free");

    let (result, _, _) = cli(
        &store,
        "release --table leases --stream s --shard shardId-2",
    )
    .await;
    assert!(matches!(result, Err(CliError::Refused { ref shard, .. }) if shard == "shardId-2"));
    let (result, _, _) = cli(
        &store,
        "release --table leases --stream s --shard shardId-9",
    )
    .await;
    assert!(
        matches!(result, Err(CliError::ShardNotFound { ref shard, .. }) if shard == "shardId-9")
    );
    let (result, _, _) = cli(&store, "release --table leases --stream s --shard *epoch").await;
    assert_eq!(
        result.unwrap_err().exit_code(),
        2,
        "a bookkeeping row is no shard"
    );
}

/// A live holder renews its row every renew interval; an operator's read and fenced write can
/// straddle one renewal (the integration run of `cli` lost that race once on a loaded machine:
/// "the row was written since it was read (counter 5 -> 6, now held by `a`)"). The holding is
/// the same: `release` reads again and frees it, as `reset` does; a row taken by another
/// holder meanwhile is still refused, one its holder released meanwhile is reported free.
#[tokio::test(start_paused = true)]
async fn release_frees_a_row_its_holder_renewed_between_the_read_and_the_write() {
    let (store, a, b) = fleet().await;
    // Every call lands a second after it is made: the read at 1 s, the write at 2 s.
    let (slow, switch) = Outage::wrap(Arc::new(store.clone()));
    switch.slow(Duration::from_secs(1));
    let ctx = Context {
        store: Arc::new(slow),
        ..ctx(&store)
    };
    let row = key("s", "shardId-0");
    // `a` renews at 1.5 s, between them, and every 3 s after.
    let renewer = {
        let (store, a, row) = (store.clone(), a.clone(), row.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let mut tick = tokio::time::interval(Duration::from_secs(3));
            // Until a renewal is refused: the row was released.
            loop {
                tick.tick().await;
                if !store.renew(&row, &a, TTL, None).await.unwrap().is_written() {
                    break;
                }
            }
        })
    };
    let before = store.read(&row).await.unwrap().unwrap();
    let out = json_in(
        &ctx,
        "release --table leases --stream s --shard shardId-0 --json",
    )
    .await;
    renewer.abort();
    assert_eq!(out[0]["result"], "released", "{out}");
    assert_eq!(out[0]["owner_before"], "a");
    let after = store.read(&row).await.unwrap().unwrap();
    assert!(rules::is_evicted(&after), "{after:?}");
    assert_eq!(
        after.counter,
        before.counter + 2,
        "renewed once, evicted once"
    );
    assert_eq!(
        (&out[0]["counter_before"], &out[0]["counter"]),
        (
            &Value::from(before.counter + 1),
            &Value::from(after.counter)
        ),
        "reported: the counter the write was fenced on, and the one it wrote"
    );

    // Taken by `b` between the read and the write: another holding, refused.
    let other = key("s", "shardId-1");
    let taker = {
        let (store, b, other) = (store.clone(), b.clone(), other.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let fence = store.read(&other).await.unwrap().unwrap().counter;
            assert!(store
                .take(&other, &b, &Take::fenced(TTL, fence))
                .await
                .unwrap()
                .is_written());
        })
    };
    take(&store, "s", "shardId-1", &a).await;
    let (result, _, _) = cli_in(&ctx, "release --table leases --stream s --shard shardId-1").await;
    taker.await.unwrap();
    match result {
        Err(CliError::Refused { shard, reason, .. }) => {
            assert_eq!(shard, "shardId-1");
            assert!(reason.contains("now held by `b`"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.read(&other).await.unwrap().unwrap().owner.as_deref(),
        Some("b"),
        "nothing was changed"
    );

    // Released by its holder (a graceful shutdown) between the read and the write: free, as
    // asked; nothing written.
    let third = key("s", "shardId-3");
    take(&store, "s", "shardId-3", &a).await;
    let leaver = {
        let (store, a, third) = (store.clone(), a.clone(), third.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            assert!(store.release(&third, &a, None).await.unwrap().is_written());
        })
    };
    let out = json_in(
        &ctx,
        "release --table leases --stream s --shard shardId-3 --json",
    )
    .await;
    leaver.await.unwrap();
    let now = store.read(&third).await.unwrap().unwrap();
    assert_eq!(
        (
            &out[0]["result"],
            &out[0]["owner_before"],
            &out[0]["counter"]
        ),
        (
            &Value::from("already_free"),
            &Value::Null,
            &Value::from(now.counter)
        ),
        "{out}"
    );
    assert!(now.owner.is_none() && !rules::is_evicted(&now), "{now:?}");
}

#[tokio::test(start_paused = true)]
async fn reset_refuses_a_live_holder_unless_forced_and_says_what_it_changed() {
    let (store, a, _) = fleet().await;
    let live = keep_alive(&store, &a);
    let (result, out, _) = cli(
        &store,
        "reset --table leases --stream s --all --to trim-horizon",
    )
    .await;
    match result {
        Err(CliError::Refused { shard, reason, .. }) => {
            assert_eq!(shard, "shardId-0");
            assert!(reason.contains("live member") && reason.contains("nothing was written"));
        }
        other => panic!("{other:?}"),
    }
    assert!(out.is_empty());
    assert_eq!(
        store
            .read(&key("s", "shardId-1"))
            .await
            .unwrap()
            .unwrap()
            .counter,
        1,
        "nothing was written"
    );

    let out = json(
        &store,
        "reset --table leases --stream s --all --to at-timestamp=2026-12-01T10:00:00Z --force --json",
    )
    .await;
    let results: Vec<(&str, &str)> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["shard"].as_str().unwrap(), l["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        results,
        [
            ("shardId-0", "reset"),
            ("shardId-1", "reset"),
            ("shardId-2", "reset"),
            ("shardId-3", "reset"),
        ],
        "--force moves finished rows too"
    );
    let rows = store.list("s").await.unwrap();
    for row in &rows {
        assert_eq!(
            row.checkpoint,
            Some(Checkpoint::AtTimestamp(1_796_119_200_000))
        );
        assert!(rules::is_evicted(row), "{row:?}");
    }
    live.abort();
}

#[tokio::test(start_paused = true)]
async fn reset_moves_rows_of_dead_holders_and_skips_finished_ones() {
    let (store, _a, _) = fleet().await;
    // Nobody renews: `a` is not alive, so its row may be moved without --force.
    // A sequence number belongs to one shard: refused for --all, as a usage error.
    let (result, _, _) = cli(
        &store,
        "reset --table leases --stream s --all --to after-sequence=5",
    )
    .await;
    assert_eq!(result.unwrap_err().exit_code(), 2);
    let (result, out, err) = cli(&store, "reset --table leases --stream s --all --to latest").await;
    result.unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(err.contains("`a` is not alive"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(
        lines[3].contains("skipped") && lines[3].contains("SHARD_END"),
        "{out}"
    );
    let row = store.read(&key("s", "shardId-0")).await.unwrap().unwrap();
    assert!(rules::is_evicted(&row), "{row:?}");
    assert_eq!(row.checkpoint, Some(Checkpoint::Latest));
    assert_eq!(
        store
            .read(&key("s", "shardId-2"))
            .await
            .unwrap()
            .unwrap()
            .checkpoint,
        Some(Checkpoint::ShardEnd)
    );
    let listed = json(&store, "leases --table leases --stream s --json").await;
    assert_eq!(
        listed[0]["checkpoint"], "LATEST",
        "seen in the next listing"
    );

    let (result, _, _) = cli(
        &store,
        "reset --table leases --stream s --shard shardId-2 --to latest",
    )
    .await;
    assert!(
        matches!(result, Err(CliError::Refused { ref reason, .. }) if reason.contains("finished"))
    );
}

/// The shards of a fresh two-shard `MemoryStream`.
const SHARDS: [&str; 2] = ["shardId-000000000000", "shardId-000000000001"];

/// Stream `s` in Kinesis: two shards with at least three records each; every record's
/// sequence number, by shard.
fn kinesis_of_two() -> (MemoryStream, [Vec<String>; 2]) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let mut seqs: [Vec<String>; 2] = Default::default();
    for i in 0.. {
        if seqs.iter().all(|s| s.len() >= 3) {
            break;
        }
        let stored = kinesis
            .put("s", &format!("key-{i}"), format!("r{i}"))
            .unwrap();
        let on = SHARDS.iter().position(|s| *s == stored.shard).unwrap();
        seqs[on].push(stored.sequence);
    }
    (kinesis, seqs)
}

/// Free rows of both shards at TRIM_HORIZON.
async fn free_rows() -> MemoryLeaseStore {
    let store = MemoryLeaseStore::new();
    for shard in SHARDS {
        create(&store, "s", shard, Some(Checkpoint::TrimHorizon)).await;
    }
    store
}

/// The row of `shard` is as `free_rows` created it, and the epoch was never bumped.
async fn untouched(store: &MemoryLeaseStore, shard: &str) {
    let row = store.read(&key("s", shard)).await.unwrap().unwrap();
    assert_eq!(row.counter, 1, "nothing was written: {row:?}");
    assert_eq!(row.checkpoint, Some(Checkpoint::TrimHorizon));
    assert!(!rules::is_evicted(&row), "{row:?}");
    assert_eq!(store.epoch("s").await.unwrap(), 0, "nobody was told");
}

#[tokio::test(start_paused = true)]
async fn reset_to_a_sequence_number_not_of_the_shard_is_refused_naming_it_and_writes_nothing() {
    let (kinesis, seqs) = kinesis_of_two();
    let store = free_rows().await;
    let ctx = ctx_with(&store, &kinesis);
    // Another shard's record, and a number no record carries.
    for number in [seqs[1][0].as_str(), "99999999"] {
        let args = format!(
            "reset --table leases --stream s --shard {} --to after-sequence={number}",
            SHARDS[0]
        );
        let (result, out, _) = cli_in(&ctx, &args).await;
        let error = result.expect_err(&args);
        assert_eq!(error.exit_code(), 1, "{error}");
        assert!(
            matches!(&error, CliError::SequenceNotInShard { stream, shard, sequence, .. }
                if stream == "s" && shard == SHARDS[0] && sequence == number),
            "{error:?}"
        );
        let text = kinesis_lease_core::ErrorChain(&error).to_string();
        assert!(
            text.contains(number)
                && text.contains(SHARDS[0])
                && text.contains("stream `s`")
                && text.contains("InvalidArgumentException"),
            "{text}"
        );
        assert!(out.is_empty(), "{out}");
        untouched(&store, SHARDS[0]).await;
    }
    // Control: a number of the shard is written, and readers are told.
    let number = &seqs[0][1];
    let out = json_in(
        &ctx,
        &format!(
            "reset --table leases --stream s --shard {} --to after-sequence={number} --json",
            SHARDS[0]
        ),
    )
    .await;
    assert_eq!(out[0]["result"], "reset");
    let row = store.read(&key("s", SHARDS[0])).await.unwrap().unwrap();
    assert_eq!(row.checkpoint, Some(seq(number)));
    assert_eq!(store.epoch("s").await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn reset_reports_a_failing_kinesis_as_such_not_as_a_number_of_another_shard() {
    let (kinesis, seqs) = kinesis_of_two();
    let store = free_rows().await;
    let ctx = ctx_with(&store, &kinesis);
    let args = format!(
        "reset --table leases --stream s --shard {} --to after-sequence={}",
        SHARDS[0], seqs[0][1]
    );
    kinesis.fail_next(Op::ShardIterator, 1);
    kinesis.throttle_next(Op::ShardIterator, 1);
    for expected in ["throttled", "failed (a 5xx"] {
        let (result, out, _) = cli_in(&ctx, &args).await;
        let error = result.expect_err(&args);
        assert_eq!(error.exit_code(), 1, "{error}");
        assert!(
            matches!(&error, CliError::Kinesis { stream, shard, .. }
                if stream == "s" && shard == SHARDS[0]),
            "{error:?}"
        );
        let text = kinesis_lease_core::ErrorChain(&error).to_string();
        assert!(
            text.contains(expected) && text.contains(SHARDS[0]) && !text.contains("not of"),
            "{text}"
        );
        assert!(out.is_empty(), "{out}");
        untouched(&store, SHARDS[0]).await;
    }
    // Control: once Kinesis answers, the same reset is written.
    let (result, _, err) = cli_in(&ctx, &args).await;
    result.unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(kinesis.calls(Op::ShardIterator), 3);
}

#[tokio::test(start_paused = true)]
async fn leases_shows_a_shard_whose_checkpoint_kinesis_refuses_as_stuck_with_its_reason() {
    let (kinesis, seqs) = kinesis_of_two();
    let store = MemoryLeaseStore::new();
    // Shard 0 at shard 1's record (as a reset before the check could store): every reader's
    // GetShardIterator is refused. Control: shard 1 at its own first record.
    create(&store, "s", SHARDS[0], Some(seq(&seqs[1][0]))).await;
    create(&store, "s", SHARDS[1], Some(seq(&seqs[1][0]))).await;
    let ctx = ctx_with(&store, &kinesis);
    let rows = json_in(&ctx, "leases --table leases --stream s --json").await;
    let refused = rows[0]["checkpoint_refused"]
        .as_str()
        .unwrap_or_else(|| panic!("refused: {rows}"));
    assert!(
        refused.contains("InvalidArgumentException") && refused.contains(SHARDS[0]),
        "{refused}"
    );
    assert_eq!(rows[0]["lag_error"], Value::Null, "{rows}");
    assert_eq!(rows[0]["behind_records"], Value::Null, "{rows}");
    assert_eq!(rows[1]["checkpoint_refused"], Value::Null, "{rows}");
    assert_eq!(rows[1]["behind_records"], seqs[1].len() - 1, "{rows}");

    let (result, out, err) = cli_in(&ctx, "leases --table leases --stream s").await;
    result.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].contains(SHARDS[0]) && lines[1].contains("stuck"),
        "{out}"
    );
    assert!(!lines[2].contains("stuck"), "{out}");
    assert!(
        err.contains("stuck")
            && err.contains(SHARDS[0])
            && err.contains("InvalidArgumentException")
            && err.contains("reset"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn leases_calls_no_shard_stuck_when_kinesis_fails_or_the_shard_is_gone() {
    let (kinesis, seqs) = kinesis_of_two();
    let store = MemoryLeaseStore::new();
    create(&store, "s", SHARDS[0], Some(seq(&seqs[0][0]))).await;
    create(&store, "s", SHARDS[1], Some(seq(&seqs[1][0]))).await;
    // A row of a shard Kinesis no longer has (trimmed past retention).
    create(&store, "s", "shardId-000000000009", Some(seq(&seqs[0][0]))).await;
    let ctx = ctx_with(&store, &kinesis);
    kinesis.throttle_next(Op::ShardIterator, 2);
    let rows = json_in(&ctx, "leases --table leases --stream s --json").await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let failed = rows.iter().filter(|r| r["lag_error"].is_string()).count();
    assert!(failed >= 2, "two throttled, one gone: {rows:?}");
    assert!(
        rows[2]["lag_error"].as_str().unwrap().contains("not found"),
        "{rows:?}"
    );
    assert!(
        rows.iter().all(|r| r["checkpoint_refused"].is_null()),
        "{rows:?}"
    );
    // Control: once Kinesis answers, the shards it holds are measured.
    let rows = json_in(&ctx, "leases --table leases --stream s --json").await;
    for (i, shard) in seqs.iter().enumerate() {
        assert_eq!(rows[i]["behind_records"], shard.len() - 1, "{rows}");
    }
}

/// The one shard of a fresh one-shard `MemoryStream`.
const ONLY: &str = "shardId-000000000000";

/// `leases`' line of a row of `ONLY` at `checkpoint`, in a table of its own.
async fn lag_at(kinesis: &MemoryStream, checkpoint: Checkpoint) -> Value {
    let store = MemoryLeaseStore::new();
    create(&store, "s", ONLY, Some(checkpoint)).await;
    let ctx = ctx_with(&store, kinesis);
    json_in(&ctx, "leases --table leases --stream s --json").await[0].clone()
}

fn inside(number: &str, subsequence: u64) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(number, Some(subsequence)).unwrap())
}

#[tokio::test(start_paused = true)]
async fn leases_counts_a_plain_record_at_a_checkpoint_with_subsequence_zero_as_processed() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let mut seqs: Vec<String> = (0..3)
        .map(|i| kinesis.put("s", "k", format!("p{i}")).unwrap().sequence)
        .collect();
    // A record with the KPL magic that is no aggregate: the reader delivers it whole.
    let mut garbage = kinesis_kpl::MAGIC.to_vec();
    garbage.extend_from_slice(b"not a protobuf, no digest");
    seqs.push(kinesis.put("s", "k", garbage).unwrap().sequence);
    // As the KCL import writes a plain record's checkpoint: `n/0`.
    for (at, behind) in [(3, 0), (2, 1), (0, 3)] {
        let line = lag_at(&kinesis, inside(&seqs[at], 0)).await;
        assert_eq!(line["behind_records"], behind, "{}/0: {line}", seqs[at]);
        // Control: the same record checkpointed without a subsequence.
        let line = lag_at(&kinesis, seq(&seqs[at])).await;
        assert_eq!(line["behind_records"], behind, "{}: {line}", seqs[at]);
    }
}

#[tokio::test(start_paused = true)]
async fn leases_counts_only_the_sub_records_left_of_an_aggregate_the_checkpoint_is_inside() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    kinesis.put("s", "k", "p0").unwrap();
    let mut aggregator = kinesis_kpl::Aggregator::new();
    for i in 0..5 {
        let pushed = aggregator
            .push(
                &format!("key-{i}"),
                None,
                bytes::Bytes::from(format!("a{i}")),
            )
            .unwrap();
        assert_eq!(pushed, kinesis_kpl::Pushed::Added);
    }
    let aggregate = aggregator.finish().unwrap();
    let at = kinesis
        .put("s", &aggregate.partition_key, aggregate.data)
        .unwrap()
        .sequence;
    kinesis.put("s", "k", "p2").unwrap();
    // Sub-records after the subsequence, then the plain record after the aggregate.
    for (subsequence, behind) in [(0, 4 + 1), (1, 3 + 1), (4, 1)] {
        let line = lag_at(&kinesis, inside(&at, subsequence)).await;
        assert_eq!(line["behind_records"], behind, "{at}/{subsequence}: {line}");
        assert!(line["behind_ms"].is_u64(), "{line}");
    }
    // Control: the whole aggregate processed.
    let line = lag_at(&kinesis, seq(&at)).await;
    assert_eq!(line["behind_records"], 1, "{line}");
}
