//! `import-kcl`: moves a Java KCL application's checkpoints into the lease table, through
//! [`KclImport`] (which reads, plans, watches the KCL and writes), and prints what it did.
//!
//! The lease table is created when missing (an import usually runs before any broker did);
//! a dry run plans against an empty table then, and creates nothing.

use std::io::Write;
use std::sync::Arc;

use kinesis_kcl_import::{ImportError, ImportReport, KclImport, KclMode, Target};
use kinesis_lease_core::{LeaseError, LeaseStore};
use kinesis_lease_memory::MemoryLeaseStore;
use serde::Serialize;

use crate::args::ImportKclArgs;
use crate::commands::{Context, Io};
use crate::error::CliError;
use crate::render::{json, or_dash, table};

/// One shard of an import, as `import-kcl` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportLine {
    /// The shard id.
    pub shard: String,
    /// The KCL's checkpoint as stored (`sequence/subsequence`, or a sentinel); `null` when the
    /// KCL has no lease of the shard.
    pub kcl_checkpoint: Option<String>,
    /// The KCL lease's owner (the worker that held it last).
    pub kcl_owner: Option<String>,
    /// `create`, `advance` (dry run) or `created`, `advanced`; `unchanged`, `skipped`.
    pub result: &'static str,
    /// The lease table's checkpoint before (`null`: no row).
    pub checkpoint_before: Option<String>,
    /// The lease table's checkpoint after (`null`: no row).
    pub checkpoint: Option<String>,
    /// Why, for people.
    pub note: String,
}

/// The lines of `report`.
pub fn import_lines(report: &ImportReport) -> Vec<ImportLine> {
    report
        .steps
        .iter()
        .map(|step| ImportLine {
            shard: step.shard.clone(),
            kcl_checkpoint: step.kcl.clone(),
            kcl_owner: step.kcl_owner.clone(),
            result: step.action.verb(report.dry_run),
            checkpoint_before: step.before.clone(),
            checkpoint: step.after.clone(),
            note: step.note.clone(),
        })
        .collect()
}

/// The aligned table of `import-kcl`.
pub fn import_table(lines: &[ImportLine]) -> String {
    let mut t = table(&[
        "SHARD",
        "KCL CHECKPOINT",
        "KCL OWNER",
        "RESULT",
        "CHECKPOINT",
        "NOTE",
    ]);
    for line in lines {
        let checkpoint = match (&line.checkpoint_before, &line.checkpoint) {
            (before, after) if before == after => or_dash(after.as_deref()),
            (None, Some(after)) => format!("(new) {after}"),
            (before, after) => format!(
                "{} -> {}",
                or_dash(before.as_deref()),
                or_dash(after.as_deref())
            ),
        };
        t.add_row(vec![
            line.shard.clone(),
            or_dash(line.kcl_checkpoint.as_deref()),
            or_dash(line.kcl_owner.as_deref()),
            line.result.to_owned(),
            checkpoint,
            line.note.clone(),
        ]);
    }
    t.to_string()
}

/// The summary line printed after the table, on stderr.
pub fn summary(report: &ImportReport) -> String {
    let mode = match &report.mode {
        KclMode::SingleStream => "single-stream leases".to_owned(),
        KclMode::MultiStream { identifier } => format!("multi-stream leases of `{identifier}`"),
    };
    let written = report.written();
    let rows = |n: usize| {
        if n == 1 {
            "1 row".to_owned()
        } else {
            format!("{n} rows")
        }
    };
    let what = match (report.dry_run, written) {
        (true, 0) => "dry run: nothing to write".to_owned(),
        (true, n) => format!(
            "dry run: {} would be written; nothing was changed (the KCL's liveness is checked by the real import)",
            rows(n)
        ),
        (false, 0) => {
            "nothing to write: every row is already at or past the KCL's checkpoint".to_owned()
        }
        (false, n) => format!("{} written", rows(n)),
    };
    let watched = report
        .watched
        .map(|w| {
            format!(
                "; the KCL's counters stood still for {:.1} s",
                w.as_secs_f64()
            )
        })
        .unwrap_or_default();
    let others = if report.other_entities > 0 {
        format!(
            " ({} of other KCL entities ignored)",
            rows(report.other_entities)
        )
    } else {
        String::new()
    };
    let leases = report.steps.iter().filter(|s| s.kcl.is_some()).count();
    format!(
        "{what}{watched}; read {leases} {mode} from `{}`{others}",
        report.kcl_table
    )
}

/// The [`KclImport`] the flags of `args` describe, over `import`'s table.
pub fn configure(import: KclImport, args: &ImportKclArgs) -> KclImport {
    let mut import = import.failover_time(args.failover_time).force(args.force);
    if let Some(key) = &args.kcl_stream_key {
        import = import.stream_key(key.clone());
    }
    if let Some(ms) = args.at_timestamp {
        import = import.at_timestamp_ms(ms);
    }
    import
}

fn import_error(error: ImportError) -> CliError {
    match error {
        ImportError::Store {
            table,
            stream,
            source,
        } => CliError::store(&table, &stream, *source),
        other => CliError::Import(Box::new(other)),
    }
}

/// `import-kcl`: imports (or, `--dry-run`, plans) the KCL's leases of `--stream` from
/// `import`'s table into `ctx`'s lease table.
///
/// # Errors
///
/// [`CliError::Import`] for what the import refused or could not read (the KCL still running,
/// a held row, no leases of the stream, ...); [`CliError::TableNotFound`] and
/// [`CliError::Store`] for the lease table; [`CliError::Output`].
pub async fn import_kcl<O: Write, E: Write>(
    ctx: &Context,
    import: KclImport,
    args: &ImportKclArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let stream = &args.table.stream;
    let import = configure(import, args);
    let kinesis = ctx.kinesis.clone().ok_or_else(|| CliError::Invalid {
        what: "command".into(),
        reason: "import-kcl lists the stream's shards and needs Kinesis".into(),
    })?;
    let empty: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let mut store = ctx.store.clone();
    if let Some(dynamo) = &ctx.dynamo {
        match dynamo.check_table().await {
            Ok(()) => {}
            Err(LeaseError::TableNotFound { .. }) if args.dry_run => {
                io.note(&format!(
                    "lease table `{}` does not exist: planned against an empty table (the import creates it)",
                    ctx.table
                ));
                store = empty;
            }
            Err(LeaseError::TableNotFound { .. }) => {
                dynamo
                    .ensure_table()
                    .await
                    .map_err(|e| CliError::store(&ctx.table, stream, LeaseError::from(e)))?;
                io.note(&format!("created lease table `{}`", ctx.table));
            }
            Err(e) => return Err(CliError::store(&ctx.table, stream, e)),
        }
    }
    let target = Target {
        store: &*store,
        table: &ctx.table,
        kinesis: &*kinesis,
    };
    let result = if args.dry_run {
        import.plan(target, stream).await
    } else {
        import.run(target, stream, |note| io.note(note)).await
    };
    let report = result.map_err(import_error)?;
    let lines = import_lines(&report);
    if args.table.json {
        io.result(&json(&lines))?;
    } else {
        io.result(&import_table(&lines))?;
    }
    io.note(&summary(&report));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_kcl_import::{Action, Step};
    use kinesis_lease_core::{Lease, LeaseKey};

    fn report(dry_run: bool) -> ImportReport {
        let row = Lease::new(
            LeaseKey::new("orders", "shardId-000000000000").unwrap(),
            vec![],
        );
        let mut report = ImportReport::new("orders", "orders-app", KclMode::SingleStream);
        report.dry_run = dry_run;
        report.steps = vec![
            Step {
                shard: "shardId-000000000000".into(),
                kcl: Some("4959/3".into()),
                kcl_owner: Some("worker-1".into()),
                before: None,
                after: Some("4959/3".into()),
                action: Action::Create(row),
                note: "resumes after the KCL's checkpoint".into(),
            },
            Step {
                shard: "shardId-000000000001".into(),
                kcl: Some("SHARD_END".into()),
                kcl_owner: None,
                before: Some("SHARD_END".into()),
                after: Some("SHARD_END".into()),
                action: Action::Leave,
                note: "already at or past the KCL's checkpoint".into(),
            },
        ];
        report
    }

    #[test]
    fn the_table_shows_what_each_shard_becomes() {
        let lines = import_lines(&report(true));
        assert_eq!(lines[0].result, "create");
        let table = import_table(&lines);
        let first = table.lines().nth(1).expect("a row");
        for part in [
            "shardId-000000000000",
            "4959/3",
            "worker-1",
            "create",
            "(new) 4959/3",
        ] {
            assert!(first.contains(part), "{part}: {table}");
        }
        assert!(table.lines().nth(2).expect("a row").contains("unchanged"));
        assert_eq!(import_lines(&report(false))[0].result, "created");
    }

    #[test]
    fn json_lines_keep_their_field_names() {
        let value: serde_json::Value =
            serde_json::from_str(&json(&import_lines(&report(false)))).unwrap();
        let first = &value[0];
        for field in [
            "shard",
            "kcl_checkpoint",
            "kcl_owner",
            "result",
            "checkpoint_before",
            "checkpoint",
            "note",
        ] {
            assert!(first.get(field).is_some(), "{field}: {first}");
        }
        assert!(first["checkpoint_before"].is_null());
        assert_eq!(value[1]["kcl_owner"], serde_json::Value::Null);
    }

    #[test]
    fn the_summary_says_what_was_written_and_how_long_the_kcl_stood_still() {
        let mut done = report(false);
        done.watched = Some(std::time::Duration::from_secs(10));
        done.other_entities = 3;
        let text = summary(&done);
        for part in [
            "1 row written",
            "stood still for 10.0 s",
            "3 rows of other KCL entities",
            "`orders-app`",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(summary(&report(true)).starts_with("dry run: 1 row would be written"));
    }
}
