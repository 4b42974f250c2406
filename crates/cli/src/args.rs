//! The command line as clap derive types: one subcommand per verb, the types are the docs.
//!
//! Parsing does no I/O, so tests parse argument lists without running anything.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::target::{parse_rfc3339, ResetTo};

/// The kinesis-broker operator's command line: see who reads which shard and how far behind
/// it is, free a lease, rewind or skip a shard, check which instances are alive.
///
/// AWS settings come from the standard chain: `AWS_REGION`, `AWS_PROFILE`, the credentials
/// files, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_KINESIS`.
/// Results go to stdout, progress and errors to stderr. Exit codes: 0 ok, 1 refused or not
/// found (or the table could not be read), 2 usage.
#[derive(Debug, Parser)]
#[command(name = "kinesis-broker", version, about, long_about)]
pub struct Cli {
    /// The AWS region (default: the standard chain, `AWS_REGION` or the profile's).
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One row per shard: owner, state (held, free, handed over, finished), checkpoint,
    /// counter, parents, and how far the checkpoint is behind the shard's tip.
    Leases(LeasesArgs),
    /// The roster: each instance's owner id, whether it is alive (its member row's counter
    /// moving within a renew interval), and the shards it holds.
    Members(MembersArgs),
    /// Frees one row, fenced on the counter read: its holder stops at its next renewal and
    /// another instance takes it, resuming after the stored checkpoint. Refuses a finished row.
    Release(ReleaseArgs),
    /// Moves checkpoints (rewind or skip), fenced on the counter read, and frees the rows so
    /// the next taker reads from there. Refuses rows held by a live member unless `--force`.
    Reset(ResetArgs),
    /// Imports a Java KCL application's checkpoints of the stream from its lease table:
    /// each shard resumes just after the KCL's last processed record (inside a KPL aggregate
    /// too), finished shards stay finished, parents are kept. Refuses while KCL workers still
    /// renew their leases (unless `--force`); never moves a row back; a second import changes
    /// nothing.
    #[command(name = "import-kcl")]
    ImportKcl(ImportKclArgs),
    /// Moves the stream's lease-table index (and its roster's) out of the single index row a
    /// release before paged indexes wrote into pages, so no item of the table grows with the
    /// stream. Run it once every instance runs a release with paged indexes: older ones read
    /// the single row only. Safe while instances run; a second run changes nothing.
    #[command(name = "migrate-index")]
    MigrateIndex(MigrateIndexArgs),
}

/// The lease table and the stream every command names.
#[derive(Debug, Clone, Args)]
pub struct TableArgs {
    /// The DynamoDB lease table.
    #[arg(long)]
    pub table: String,
    /// The Kinesis stream whose rows to read.
    #[arg(long)]
    pub stream: String,
    /// Print JSON instead of an aligned table.
    #[arg(long)]
    pub json: bool,
}

/// `leases`.
#[derive(Debug, Clone, Args)]
pub struct LeasesArgs {
    /// The table and stream.
    #[command(flatten)]
    pub table: TableArgs,
    /// Do not ask Kinesis how far each checkpoint is behind the tip.
    #[arg(long)]
    pub no_lag: bool,
}

/// `migrate-index`.
#[derive(Debug, Clone, Args)]
pub struct MigrateIndexArgs {
    /// The table and stream.
    #[command(flatten)]
    pub table: TableArgs,
}

/// `members`.
#[derive(Debug, Clone, Args)]
pub struct MembersArgs {
    /// The table and stream.
    #[command(flatten)]
    pub table: TableArgs,
    /// The brokers' renew interval: a live member renews its row at least this often. Liveness
    /// is judged over this plus one second.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub renew_interval: Duration,
}

/// `release`.
#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    /// The table and stream.
    #[command(flatten)]
    pub table: TableArgs,
    /// The shard whose row to free (`shardId-000000000001`).
    #[arg(long)]
    pub shard: String,
}

/// `reset`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("rows").required(true).args(["shard", "all"])))]
pub struct ResetArgs {
    /// The table and stream.
    #[command(flatten)]
    pub table: TableArgs,
    /// The shard whose checkpoint to move.
    #[arg(long)]
    pub shard: Option<String>,
    /// Every shard of the stream (finished ones are skipped unless `--force`).
    #[arg(long)]
    pub all: bool,
    /// Where to: `trim-horizon`, `latest`, `at-timestamp=RFC3339` or `after-sequence=N`.
    #[arg(long, value_parser = ResetTo::parse)]
    pub to: ResetTo,
    /// Also move rows held by a live member, and finished rows.
    #[arg(long)]
    pub force: bool,
    /// The brokers' renew interval, to judge whether a holder is alive (see `members`).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub renew_interval: Duration,
}

/// `import-kcl`.
#[derive(Debug, Clone, Args)]
pub struct ImportKclArgs {
    /// The KCL application's DynamoDB lease table (its application name, unless it configured
    /// another). Only read.
    #[arg(long)]
    pub kcl_table: String,
    /// The lease table to write (`--table`, created when missing) and the stream.
    #[command(flatten)]
    pub table: TableArgs,
    /// In a multi-stream KCL table, the stream identifier whose leases to import
    /// (`account:stream:creationEpoch`), when the stream name alone names several.
    #[arg(long)]
    pub kcl_stream_key: Option<String>,
    /// Print the mapping and change nothing (the KCL's liveness is not watched).
    #[arg(long)]
    pub dry_run: bool,
    /// Write even while KCL workers renew their leases, and move rows that brokers hold,
    /// with a warning.
    #[arg(long)]
    pub force: bool,
    /// The KCL application's failover time (`failoverTimeMillis`): its lease counters must
    /// stand still this long before the import writes.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub failover_time: Duration,
    /// The KCL application's `AT_TIMESTAMP` start (RFC 3339), for leases it never
    /// checkpointed (the KCL stores the sentinel without the time).
    #[arg(long, value_parser = parse_time_arg)]
    pub at_timestamp: Option<u64>,
}

fn parse_time_arg(input: &str) -> Result<u64, String> {
    parse_rfc3339(input).map_err(|reason| format!("`{input}` is not an RFC 3339 time: {reason}"))
}

/// Parses `500ms`, `3s`, `2m` or a bare number of seconds.
///
/// # Errors
///
/// A message naming the input when it is none of these.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let bad = || format!("`{input}` is not a duration such as 500ms, 3s or 2m");
    let (digits, unit) = match input.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => input.split_at(at),
        None => (input, "s"),
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value.saturating_mul(60))),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kinesis-broker").chain(args.iter().copied()))
    }

    #[test]
    fn every_verb_parses_with_its_flags() {
        let cli = parse(&["leases", "--table", "t", "--stream", "s", "--json"]).unwrap();
        match cli.command {
            Command::Leases(a) => {
                assert_eq!(
                    (a.table.table.as_str(), a.table.stream.as_str()),
                    ("t", "s")
                );
                assert!(a.table.json && !a.no_lag);
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["members", "--table", "t", "--stream", "s"]).unwrap();
        assert!(
            matches!(cli.command, Command::Members(a) if a.renew_interval == Duration::from_secs(3))
        );
        let cli = parse(&["release", "--table", "t", "--stream", "s", "--shard", "x"]).unwrap();
        assert!(matches!(cli.command, Command::Release(a) if a.shard == "x"));
        let cli = parse(&[
            "reset", "--table", "t", "--stream", "s", "--all", "--to", "latest", "--force",
        ])
        .unwrap();
        assert!(
            matches!(cli.command, Command::Reset(a) if a.all && a.force && a.to == ResetTo::Latest)
        );
        let cli = parse(&[
            "--region",
            "eu-west-1",
            "leases",
            "--table",
            "t",
            "--stream",
            "s",
        ]);
        assert_eq!(cli.unwrap().region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn usage_errors_are_clap_errors_with_exit_code_two() {
        for args in [
            &["leases", "--table", "t"][..],
            &["reset", "--table", "t", "--stream", "s", "--to", "latest"],
            &[
                "reset", "--table", "t", "--stream", "s", "--shard", "x", "--all", "--to", "latest",
            ],
            &[
                "reset",
                "--table",
                "t",
                "--stream",
                "s",
                "--all",
                "--to",
                "yesterday",
            ],
            &[
                "members",
                "--table",
                "t",
                "--stream",
                "s",
                "--renew-interval",
                "3h",
            ],
            &["import-kcl"],
            &["import-kcl", "--table", "t", "--stream", "s"],
            &[
                "import-kcl",
                "--kcl-table",
                "k",
                "--table",
                "t",
                "--stream",
                "s",
                "--at-timestamp",
                "noon",
            ],
        ] {
            let err = parse(args).unwrap_err();
            assert_ne!(err.kind(), ErrorKind::DisplayHelp, "{args:?}");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    #[test]
    fn import_kcl_parses_with_its_flags() {
        let cli = parse(&[
            "import-kcl",
            "--kcl-table",
            "orders-app",
            "--table",
            "orders-leases",
            "--stream",
            "orders",
            "--kcl-stream-key",
            "123456789012:orders:1700000000",
            "--dry-run",
            "--failover-time",
            "3s",
            "--at-timestamp",
            "2026-12-01T10:00:00Z",
        ])
        .unwrap();
        match cli.command {
            Command::ImportKcl(a) => {
                assert_eq!(a.kcl_table, "orders-app");
                assert_eq!(
                    (a.table.table.as_str(), a.table.stream.as_str()),
                    ("orders-leases", "orders")
                );
                assert_eq!(
                    a.kcl_stream_key.as_deref(),
                    Some("123456789012:orders:1700000000")
                );
                assert!(a.dry_run && !a.force);
                assert_eq!(a.failover_time, Duration::from_secs(3));
                assert_eq!(a.at_timestamp, Some(1_796_119_200_000));
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&[
            "import-kcl",
            "--kcl-table",
            "k",
            "--table",
            "t",
            "--stream",
            "s",
            "--force",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::ImportKcl(a) if a.force && a.failover_time == Duration::from_secs(10) && a.at_timestamp.is_none()
        ));
    }

    #[test]
    fn durations_parse_in_their_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 s").is_err());
    }

    #[test]
    fn the_command_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
