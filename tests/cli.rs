//! The `kinesis-broker` command line against moto (the lease table) and kinesis-local, with
//! a live broker holding the shards: every command, plain and JSON, as a process with its
//! exit code, stdout and stderr. `cargo xtask integ` builds the binary and passes its path as
//! `KINESIS_BROKER_BIN`.
//!
//! The scenario: broker `a` holds every shard (held rows, `a` alive); `reset` of a live
//! holder's row is refused; `release` frees a row and `a` takes it back; after `a`'s shutdown
//! the rows are free and `a` has left; `reset --all --to trim-horizon` is seen in the next
//! listing (with every record behind), and broker `b` started then reads every record again;
//! a reset to another shard's sequence number is refused, writing nothing.

use std::sync::Arc;
use std::time::Duration;

use kinesis_broker::lease::LeaseStore;
use kinesis_broker::{DynamoLeaseStore, StartAt};
use kinesis_integ::*;
use serde_json::Value;

struct Cli {
    account: String,
    table: String,
    stream: String,
}

impl Cli {
    /// `verb --table T --stream S extra..`, expecting exit code `code`.
    async fn expect(&self, code: i32, verb: &str, extra: &[&str]) -> (String, String) {
        let mut args = vec![verb, "--table", &self.table, "--stream", &self.stream];
        args.extend_from_slice(extra);
        let out = run_cli(&self.account, &args).await;
        let (stdout, stderr) = (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        );
        assert_eq!(
            out.status.code(),
            Some(code),
            "kinesis-broker {args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        (stdout, stderr)
    }

    /// `verb .. --json`, expecting success; the parsed array.
    async fn json(&self, verb: &str, extra: &[&str]) -> Vec<Value> {
        let mut extra = extra.to_vec();
        extra.push("--json");
        let (stdout, _) = self.expect(0, verb, &extra).await;
        match serde_json::from_str(&stdout) {
            Ok(Value::Array(rows)) => rows,
            other => panic!("{verb} --json: not an array: {other:?}\n{stdout}"),
        }
    }

    /// `leases --json`. Each row's lag is asked of Kinesis, which on a loaded machine may time
    /// out (kinesis-local is one Node process; a CI run beside a simulation campaign saw a
    /// 10 s GetShardIterator timeout): the command reports that per row as `lag_error`, and
    /// is then run again, up to three times in all.
    async fn leases(&self) -> Vec<Value> {
        let mut rows = self.json("leases", &[]).await;
        for _ in 0..2 {
            let transient = rows.iter().any(|r| {
                r["lag_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("a 5xx, a timeout or a dropped connection"))
            });
            if !transient {
                break;
            }
            rows = self.json("leases", &[]).await;
        }
        rows
    }
}

fn field<'a>(rows: &'a [Value], name: &str) -> Vec<&'a Value> {
    rows.iter().map(|r| &r[name]).collect()
}

/// Waits until every row of `stream` satisfies `ok` (real time: I/O to the emulators).
async fn wait_rows(
    store: &DynamoLeaseStore,
    stream: &str,
    what: &str,
    ok: impl Fn(&kinesis_broker::lease::Lease) -> bool,
) {
    let limit = patience(Duration::from_secs(30));
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let rows = store.list(stream).await.expect("list");
        if !rows.is_empty() && rows.iter().all(&ok) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rows not {what} within {limit:?}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn every_command_against_a_live_broker_then_after_its_shutdown() {
    let account = unique_account();
    let (config, client) = kinesis_client(&account).await;
    let stream = unique_name("cli");
    create_stream(&client, &stream, 3).await;
    let table = unique_name("cli-leases");
    let store = DynamoLeaseStore::new(&config, &table);
    store.ensure_table().await.expect("table");
    let cli = Cli {
        account: account.clone(),
        table: table.clone(),
        stream: stream.clone(),
    };
    put_records(&client, &stream, 12, 0, 30).await;
    let log = Log::default();
    let a = logging_broker(
        &config,
        Arc::new(DynamoLeaseStore::new(&config, &table)),
        "a",
        &stream,
        StartAt::TrimHorizon,
        &log,
    )
    .start()
    .await
    .expect("start a");
    wait_for_count(&log, 30, Duration::from_secs(30)).await;
    wait_rows(
        &store,
        &stream,
        "held by a with a sequence checkpoint",
        |r| {
            r.owner.as_deref() == Some("a")
                && matches!(r.checkpoint, Some(kinesis_broker::Checkpoint::Sequence(_)))
        },
    )
    .await;

    // Held rows, one per shard, sorted; no bookkeeping row among them.
    let rows = cli.leases().await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let shards: Vec<&str> = rows.iter().map(|r| r["shard"].as_str().unwrap()).collect();
    let mut sorted = shards.clone();
    sorted.sort();
    assert_eq!(shards, sorted);
    assert!(
        shards.iter().all(|s| s.starts_with("shardId-")),
        "{shards:?}"
    );
    assert!(field(&rows, "owner").iter().all(|o| **o == "a"));
    assert!(field(&rows, "state").iter().all(|s| **s == "held"));
    for row in &rows {
        let cp = row["checkpoint"].as_str().unwrap();
        assert!(cp.bytes().all(|b| b.is_ascii_digit()), "{row}");
        assert!(row["behind_ms"].is_u64(), "asked Kinesis: {row}");
        assert_eq!(row["lag_error"], Value::Null, "{row}");
    }
    let (plain, _) = cli.expect(0, "leases", &[]).await;
    assert_eq!(plain.lines().count(), 4, "{plain}");
    assert!(plain.lines().next().unwrap().contains("CHECKPOINT"));
    assert_eq!(plain.matches(" held ").count(), 3, "{plain}");

    // The roster: a is alive and holds the three shards.
    let members = cli.json("members", &[]).await;
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0]["owner"], "a");
    assert_eq!(members[0]["alive"], true, "{members:?}");
    assert_eq!(members[0]["shards"].as_array().unwrap().len(), 3);
    let (plain, _) = cli.expect(0, "members", &[]).await;
    assert!(plain.lines().nth(1).unwrap().contains("yes"), "{plain}");

    // A live holder's row is not reset without --force, and nothing is written.
    let first = shards[0].to_owned();
    let (_, stderr) = cli
        .expect(1, "reset", &["--shard", &first, "--to", "trim-horizon"])
        .await;
    assert!(
        stderr.contains("live member") && stderr.contains(&table),
        "{stderr}"
    );

    // release frees a row, fenced on the counter read; a takes it back.
    // (a renews every 3 s: on a loaded machine a renewal may land between two commands, so
    // each command's own read is what the fence is checked against.)
    let before = cli.json("leases", &["--no-lag"]).await;
    let released = cli.json("release", &["--shard", &first]).await;
    assert_eq!(released[0]["result"], "released", "{released:?}");
    assert_eq!(released[0]["owner_before"], "a");
    let (read, written) = (
        released[0]["counter_before"].as_u64().unwrap(),
        released[0]["counter"].as_u64().unwrap(),
    );
    assert!(
        read >= before[0]["counter"].as_u64().unwrap(),
        "{before:?} {released:?}"
    );
    assert_eq!(
        written,
        read + 1,
        "fenced on the counter it read, written once: {released:?}"
    );
    // In the operator's hold until it stood still for a lease: nobody's, taken later (unless
    // the machine is so slow that the lease passed before the next command read it).
    let held_back = cli.json("leases", &["--no-lag"]).await;
    if held_back[0]["counter"].as_u64() == Some(written) {
        assert_eq!(
            (&held_back[0]["state"], &held_back[0]["owner"]),
            (&Value::from("evicted"), &Value::Null),
            "{held_back:?}"
        );
    }
    wait_rows(&store, &stream, "held by a again", |r| {
        r.owner.as_deref() == Some("a") && r.token.is_some()
    })
    .await;
    let after = cli.json("leases", &["--no-lag"]).await;
    assert!(
        after[0]["counter"].as_u64().unwrap() >= before[0]["counter"].as_u64().unwrap() + 2,
        "released, then taken again: {before:?} {after:?}"
    );
    let (plain, _) = cli.expect(0, "release", &["--shard", &first]).await;
    assert!(plain.contains("released"), "{plain}");

    // Not found and usage errors.
    let (_, stderr) = cli
        .expect(1, "release", &["--shard", "shardId-999999"])
        .await;
    assert!(
        stderr.contains("shardId-999999") && stderr.contains(&stream) && stderr.contains(&table),
        "{stderr}"
    );
    let missing = run_cli(
        &account,
        &["leases", "--table", "no-such-table", "--stream", &stream],
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("`no-such-table` does not exist"));
    let usage = run_cli(&account, &["reset", "--table", &table, "--stream", &stream]).await;
    assert_eq!(usage.status.code(), Some(2));

    // After a's shutdown: released rows, checkpoints kept, a gone from the roster.
    let report = a.shutdown().await;
    assert!(report.handlers_finished);
    let rows = cli.json("leases", &[]).await;
    // Released by the shutdown; the one released again above stays in the operator's hold
    // (nobody took it before the shutdown).
    assert!(
        field(&rows, "state")
            .iter()
            .all(|s| **s == "free" || **s == "evicted"),
        "{rows:?}"
    );
    assert!(
        field(&rows, "owner").iter().all(|o| o.is_null()),
        "{rows:?}"
    );
    assert!(rows.iter().all(|r| r["checkpoint"].is_string()), "{rows:?}");
    // Another shard's sequence number is refused (Kinesis does not find it in this shard,
    // which holds records), naming it, and nothing is written.
    let foreign = rows[1]["checkpoint"].as_str().unwrap().to_owned();
    let (_, stderr) = cli
        .expect(
            1,
            "reset",
            &[
                "--shard",
                &first,
                "--to",
                &format!("after-sequence={foreign}"),
            ],
        )
        .await;
    assert!(
        stderr.contains(&foreign) && stderr.contains(&first) && stderr.contains("is not of shard"),
        "{stderr}"
    );
    let unchanged = cli.json("leases", &["--no-lag"]).await;
    assert_eq!(
        (&unchanged[0]["checkpoint"], &unchanged[0]["counter"]),
        (&rows[0]["checkpoint"], &rows[0]["counter"]),
        "nothing written: {unchanged:?}"
    );
    let (plain, _) = cli.expect(0, "leases", &["--no-lag"]).await;
    assert_eq!(
        plain.matches(" free ").count() + plain.matches(" evicted ").count(),
        3,
        "{plain}"
    );
    let members = cli.json("members", &[]).await;
    assert_eq!(
        (
            &members[0]["owner"],
            &members[0]["alive"],
            &members[0]["presence"]
        ),
        (&Value::from("a"), &Value::from(false), &Value::from("left")),
        "{members:?}"
    );

    // A reset of every row, seen in the next listing, with every record behind it again.
    let reset = cli.json("reset", &["--all", "--to", "trim-horizon"]).await;
    assert_eq!(reset.len(), 3);
    assert!(
        field(&reset, "result").iter().all(|r| **r == "reset"),
        "{reset:?}"
    );
    let rows = cli.leases().await;
    assert!(
        field(&rows, "checkpoint")
            .iter()
            .all(|c| **c == "TRIM_HORIZON"),
        "{rows:?}"
    );
    let behind: u64 = rows
        .iter()
        .map(|r| {
            r["behind_records"]
                .as_u64()
                .unwrap_or_else(|| panic!("exact count: {r}"))
        })
        .sum();
    assert_eq!(
        behind, 30,
        "every record is behind a TRIM_HORIZON checkpoint: {rows:?}"
    );
    let (plain, _) = cli
        .expect(
            0,
            "reset",
            &[
                "--shard",
                &first,
                "--to",
                "at-timestamp=2026-01-01T00:00:00Z",
            ],
        )
        .await;
    assert!(
        plain.contains("TRIM_HORIZON -> AT_TIMESTAMP:1767225600000"),
        "{plain}"
    );
    let (plain, _) = cli
        .expect(0, "reset", &["--shard", &first, "--to", "trim-horizon"])
        .await;
    assert!(plain.contains("reset"), "{plain}");

    // The next instance reads from the reset checkpoints: every record again.
    let again = Log::default();
    let b = logging_broker(
        &config,
        Arc::new(DynamoLeaseStore::new(&config, &table)),
        "b",
        &stream,
        StartAt::Latest,
        &again,
    )
    .start()
    .await
    .expect("start b");
    wait_for_count(&again, 30, Duration::from_secs(30)).await;
    assert_exactly_once_in_key_order(&again, 30);
    let members = cli.json("members", &[]).await;
    let by_owner = |id: &str| members.iter().find(|m| m["owner"] == id).cloned().unwrap();
    assert_eq!(by_owner("a")["alive"], false, "{members:?}");
    assert_eq!(by_owner("b")["alive"], true, "{members:?}");
    b.shutdown().await;
}

#[tokio::test]
async fn a_missing_region_is_a_usage_error_naming_it() {
    let out = tokio::process::Command::new(cli_binary())
        .args(["leases", "--table", "t", "--stream", "s"])
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .expect("run kinesis-broker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no AWS region configured"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// `migrate-index` on a table of the release before paged indexes (its single index row
/// written raw, as that release wrote it): the stream's shards move into pages and are listed
/// by `leases` as before; a second run reports both indexes already paged.
#[tokio::test]
async fn migrate_index_moves_a_previous_releases_index_into_pages() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let account = unique_account();
    let config = sdk_config_for(&account).await;
    let cli = Cli {
        account,
        table: unique_name("migrate"),
        stream: "orders".into(),
    };
    let store = DynamoLeaseStore::new(&config, &cli.table);
    store.ensure_table().await.expect("ensure_table");
    let raw = aws_sdk_dynamodb::Client::new(&config);
    let shards: Vec<String> = (0..3).map(|n| format!("shardId-{n:012}")).collect();
    raw.put_item()
        .table_name(&cli.table)
        .item("lease_key", AttributeValue::S("orders:*".into()))
        .item("shards", AttributeValue::Ss(shards.clone()))
        .send()
        .await
        .expect("a legacy index row");
    for shard in &shards {
        raw.put_item()
            .table_name(&cli.table)
            .item("lease_key", AttributeValue::S(format!("orders:{shard}")))
            .item("lease_counter", AttributeValue::N("1".into()))
            .item("lease_expiry", AttributeValue::N("0".into()))
            .send()
            .await
            .expect("a legacy row");
    }
    let before = cli.json("leases", &["--no-lag"]).await;
    assert_eq!(before.len(), 3);

    let moved = cli.json("migrate-index", &[]).await;
    assert_eq!(field(&moved, "index"), ["orders", "orders@members"]);
    assert_eq!(field(&moved, "moved"), [3, 0]);
    assert_eq!(field(&moved, "already_paged"), [false, true]);
    let header = raw
        .get_item()
        .table_name(&cli.table)
        .key("lease_key", AttributeValue::S("orders:*".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(!header.contains_key("shards"), "{header:?}");
    assert_eq!(cli.json("leases", &["--no-lag"]).await.len(), 3);

    let again = cli.json("migrate-index", &[]).await;
    assert_eq!(field(&again, "already_paged"), [true, true]);
    let (text, _) = cli.expect(0, "migrate-index", &[]).await;
    assert!(text.contains("already paged"), "{text}");
}
