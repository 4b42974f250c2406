//! `kinesis-broker`, the operator's command line for a kinesis-broker lease table.
//!
//! ```text
//! kinesis-broker leases  --table T --stream S [--json] [--no-lag]
//! kinesis-broker members --table T --stream S [--json] [--renew-interval 3s]
//! kinesis-broker release --table T --stream S --shard ID [--json]
//! kinesis-broker reset   --table T --stream S (--shard ID | --all)
//!                        --to trim-horizon|latest|at-timestamp=RFC3339|after-sequence=N
//!                        [--force] [--json]
//! kinesis-broker import-kcl --kcl-table K --table T --stream S [--kcl-stream-key KEY]
//!                        [--dry-run] [--force] [--failover-time 10s]
//!                        [--at-timestamp RFC3339] [--json]
//! ```
//!
//! Results go to stdout (an aligned table, or JSON with `--json`), progress and errors to
//! stderr. Exit codes: 0 ok, 1 refused or not found (or the table failed), 2 usage.
//!
//! # Layout
//!
//! Policy is pure and unit-tested apart from I/O: [`view`] classifies rows and judges
//! liveness from counter movement, [`target`] parses `--to` and decides what a reset may move,
//! [`lag`] reads how far behind a checkpoint is from one probe page, [`render`] prints
//! tables and JSON, [`usage`] checks what clap cannot and needs no I/O (before the AWS
//! configuration is read). [`commands`] gathers the observations, carries out the plan with fenced
//! writes ([`LeaseStore::evict`](kinesis_lease_core::LeaseStore::evict)) and prints;
//! [`aws`] builds the clients from the standard AWS chain. [`import`] runs `import-kcl`
//! through the `kinesis-kcl-import` crate, whose rules are pure and unit-tested there.
//!
//! # Writes
//!
//! Every write is conditional on the counter the command read: `release` frees a row (its
//! holder's next renewal is refused, so it stops reading); `reset` stores a new checkpoint and
//! frees the row in one write. A freed row is left in the operator's hold
//! ([`EVICTED_OWNER`](kinesis_lease_core::rules::EVICTED_OWNER)): instances take it once it
//! stood still for a lease, when the old holder has stopped for sure, and read after its
//! checkpoint. Both commands then bump the stream's epoch, so instances notice at once.
//! `reset --to after-sequence=N` first asks Kinesis for an iterator at `N` in the shard and
//! refuses a number Kinesis does not know there ([`CliError::SequenceNotInShard`]): no reader
//! could go on from it.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod args;
pub mod aws;
pub mod commands;
pub mod error;
pub mod import;
pub mod lag;
pub mod render;
pub mod target;
pub mod usage;
pub mod view;

use std::io::Write;

pub use args::{Cli, Command};
pub use error::CliError;

use commands::{Context, Io};

/// Runs a parsed command line against `ctx`, printing results to `out` and progress to `err`.
///
/// # Errors
///
/// [`CliError::Invalid`] for a wrong command line ([`usage::check`]); otherwise whatever the
/// command reports ([`CliError`]); [`CliError::exit_code`] gives the exit code.
pub async fn run_with<O: Write, E: Write>(
    cli: &Cli,
    ctx: &Context,
    out: &mut O,
    err: &mut E,
) -> Result<(), CliError> {
    usage::check(cli)?;
    let mut io = Io { out, err };
    match &cli.command {
        Command::Leases(args) => commands::leases(ctx, args, &mut io).await,
        Command::Members(args) => commands::members(ctx, args, &mut io).await,
        Command::Release(args) => commands::release(ctx, args, &mut io).await,
        Command::Reset(args) => commands::reset(ctx, args, &mut io).await,
        Command::ImportKcl(args) => {
            let aws = ctx.aws.as_ref().ok_or_else(|| CliError::Invalid {
                what: "command".into(),
                reason: "import-kcl reads the KCL's DynamoDB table and needs an AWS configuration"
                    .into(),
            })?;
            let kcl = kinesis_kcl_import::KclImport::dynamo(aws, args.kcl_table.clone());
            import::import_kcl(ctx, kcl, args, &mut io).await
        }
        Command::MigrateIndex(args) => commands::migrate_index(ctx, args, &mut io).await,
    }
}

/// Checks the command line ([`usage::check`], no I/O), then connects to AWS from the standard
/// chain (and `--region`) and runs it.
///
/// # Errors
///
/// [`CliError::Invalid`] for a wrong command line, before any AWS setting is looked at;
/// [`CliError::AwsSetting`] without a region; otherwise whatever the command reports.
pub async fn run<O: Write, E: Write>(cli: &Cli, out: &mut O, err: &mut E) -> Result<(), CliError> {
    usage::check(cli)?;
    let table = match &cli.command {
        Command::Leases(a) => &a.table.table,
        Command::Members(a) => &a.table.table,
        Command::Release(a) => &a.table.table,
        Command::Reset(a) => &a.table.table,
        Command::ImportKcl(a) => &a.table.table,
        Command::MigrateIndex(a) => &a.table.table,
    };
    let ctx = aws::connect(cli.region.clone(), table).await?;
    run_with(cli, &ctx, out, err).await
}
