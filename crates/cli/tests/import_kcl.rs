//! `import-kcl` end to end against a fake KCL table, a `MemoryLeaseStore` and a
//! `MemoryStream`, on paused time (the liveness watch takes none): what it prints, writes and
//! refuses. The real KCL runs in `tests/kcl_import.rs` (`cargo xtask integ`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use clap::Parser;
use kinesis_broker_cli::commands::{Context, Io};
use kinesis_broker_cli::import::import_kcl;
use kinesis_broker_cli::{Cli, CliError, Command};
use kinesis_kcl_import::{ImportError, KclImport, KclRow, KclTable};
use kinesis_lease_core::{BoxFuture, LeaseKey, LeaseStore};
use kinesis_lease_memory::MemoryLeaseStore;
use kinesis_stream_memory::MemoryStream;
use serde_json::Value;

#[derive(Debug, Default)]
struct Fake {
    rows: Mutex<Vec<KclRow>>,
    live: AtomicBool,
}

#[derive(Debug, Clone, Default)]
struct FakeKcl(Arc<Fake>);

impl KclTable for FakeKcl {
    fn name(&self) -> &str {
        "orders-app"
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<KclRow>, ImportError>> {
        let mut rows = self.0.rows.lock().unwrap();
        if self.0.live.load(Ordering::SeqCst) {
            rows.iter_mut().for_each(|r| r.counter += 1);
        }
        let rows = rows.clone();
        Box::pin(async move { Ok(rows) })
    }
}

/// The KCL's table, the lease store and the context; the KCL's checkpoint of shard 0 (a
/// record of it, inside an aggregate: subsequence 4).
fn world() -> (FakeKcl, MemoryLeaseStore, Context, String) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("orders", 2).unwrap();
    // Kinesis opens an iterator only at a sequence number of the shard.
    let processed = (0..)
        .map(|i| kinesis.put("orders", &format!("key-{i}"), "x").unwrap())
        .find(|stored| stored.shard == "shardId-000000000000")
        .map(|stored| stored.sequence)
        .unwrap_or_default();
    let kcl = FakeKcl::default();
    *kcl.0.rows.lock().unwrap() = vec![
        KclRow {
            checkpoint: Some(processed.clone()),
            checkpoint_subsequence: 4,
            owner: Some("worker-1".into()),
            ..KclRow::lease("shardId-000000000000", 17)
        },
        KclRow {
            checkpoint: Some("TRIM_HORIZON".into()),
            ..KclRow::lease("shardId-000000000001", 2)
        },
    ];
    let store = MemoryLeaseStore::new();
    let ctx = Context {
        table: "orders-leases".into(),
        store: Arc::new(store.clone()),
        dynamo: None,
        kinesis: Some(Arc::new(kinesis)),
        aws: None,
    };
    (kcl, store, ctx, processed)
}

async fn run(kcl: &FakeKcl, ctx: &Context, flags: &str) -> (Result<(), CliError>, String, String) {
    let line =
        format!("import-kcl --kcl-table orders-app --table orders-leases --stream orders {flags}");
    let cli = Cli::try_parse_from(std::iter::once("kinesis-broker").chain(line.split_whitespace()))
        .expect("arguments parse");
    let Command::ImportKcl(args) = &cli.command else {
        panic!("import-kcl")
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut io = Io {
        out: &mut out,
        err: &mut err,
    };
    let result = import_kcl(ctx, KclImport::new(kcl.clone()), args, &mut io).await;
    (
        result,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_prints_the_plan_and_the_import_writes_it_once() {
    let (kcl, store, ctx, processed) = world();
    let imported = format!("{processed}/4");
    let (result, out, err) = run(&kcl, &ctx, "--dry-run").await;
    result.unwrap();
    assert!(
        out.contains("KCL CHECKPOINT") && out.contains(&imported),
        "{out}"
    );
    assert!(out.contains("create"), "{out}");
    assert!(err.contains("dry run: 2 rows would be written"), "{err}");
    assert!(store.table().is_empty(), "a dry run writes nothing");

    let (result, out, err) = run(&kcl, &ctx, "--json").await;
    result.unwrap();
    let lines: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(lines[0]["result"], "created");
    assert_eq!(lines[0]["checkpoint"], imported.as_str());
    assert_eq!(lines[1]["checkpoint"], "TRIM_HORIZON");
    assert!(
        err.contains("watching") && err.contains("2 rows written"),
        "{err}"
    );
    let row = store
        .read(&LeaseKey::new("orders", "shardId-000000000000").unwrap())
        .await
        .unwrap()
        .expect("imported");
    assert_eq!(
        row.checkpoint.map(|c| c.to_string()).as_deref(),
        Some(imported.as_str())
    );

    let (result, out, err) = run(&kcl, &ctx, "").await;
    result.unwrap();
    assert!(
        out.contains("unchanged") && !out.contains("created"),
        "{out}"
    );
    assert!(err.contains("nothing to write"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_running_kcl_is_refused_with_exit_code_one_and_nothing_written() {
    let (kcl, store, ctx, _) = world();
    kcl.0.live.store(true, Ordering::SeqCst);
    let (result, out, _) = run(&kcl, &ctx, "--failover-time 3s").await;
    let error = result.unwrap_err();
    assert_eq!(error.exit_code(), 1);
    let text = kinesis_lease_core::ErrorChain(&error).to_string();
    assert!(
        text.contains("KCL workers still run") && text.contains("orders-app"),
        "{text}"
    );
    assert!(out.is_empty());
    assert!(store.table().is_empty());
}
