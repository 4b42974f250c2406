//! The command line's checks that clap cannot express and that need no I/O: a shard named that
//! is one of the table's own rows, a sequence number given for every shard at once.
//!
//! [`run`](crate::run) makes them before it loads the AWS configuration, so a wrong command
//! line is told as such (exit code 2) even where no region is set; the commands make the ones
//! they depend on again, for callers that run them directly.

use kinesis_lease_core::{LeaseError, LeaseKey};

use crate::args::{Cli, Command, ResetArgs};
use crate::error::CliError;
use crate::target::ResetTo;
use crate::view;

/// Checks `cli` before anything is read or connected.
///
/// # Errors
///
/// [`CliError::Invalid`] naming what is wrong.
pub fn check(cli: &Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Release(args) => shard_key(&args.table.stream, &args.shard).map(drop),
        Command::Reset(args) => reset(args),
        Command::Leases(_)
        | Command::Members(_)
        | Command::ImportKcl(_)
        | Command::MigrateIndex(_) => Ok(()),
    }
}

/// The key of `shard` of `stream`, when it names a shard.
///
/// # Errors
///
/// [`CliError::Invalid`] for an invalid key (an empty name, a stream name with `:`) or one of
/// the table's own rows (`*`, `*epoch`, a member row).
pub fn shard_key(stream: &str, shard: &str) -> Result<LeaseKey, CliError> {
    let key = LeaseKey::new(stream, shard).map_err(invalid_key)?;
    if view::is_bookkeeping(&key) {
        return Err(CliError::Invalid {
            what: format!("shard `{shard}` of stream `{stream}`"),
            reason: "this names one of the table's own rows, not a shard".into(),
        });
    }
    Ok(key)
}

/// Checks `reset`'s arguments: the shard it names, and a sequence number only with `--shard`.
///
/// # Errors
///
/// [`CliError::Invalid`] naming what is wrong.
pub fn reset(args: &ResetArgs) -> Result<(), CliError> {
    match &args.shard {
        Some(shard) => shard_key(&args.table.stream, shard).map(drop),
        // A sequence number belongs to one shard: every other shard's reader would be refused
        // by Kinesis for good.
        None if matches!(args.to, ResetTo::AfterSequence(_)) => Err(CliError::Invalid {
            what: "--to after-sequence=N with --all".into(),
            reason: "a sequence number belongs to one shard; name it with --shard".into(),
        }),
        None => Ok(()),
    }
}

fn invalid_key(error: LeaseError) -> CliError {
    CliError::Invalid {
        what: "lease key".into(),
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn checked(line: &str) -> Result<(), CliError> {
        let cli = Cli::try_parse_from(std::iter::once("kinesis-broker").chain(line.split(' ')))
            .expect("parses");
        check(&cli)
    }

    #[test]
    fn wrong_command_lines_are_invalid_and_right_ones_pass() {
        for wrong in [
            "reset --table t --stream s --all --to after-sequence=5",
            "reset --table t --stream s --shard *epoch --to latest",
            "release --table t --stream s --shard *",
            "release --table t --stream a:b --shard shardId-1",
        ] {
            let error = checked(wrong).expect_err(wrong);
            assert!(
                matches!(error, CliError::Invalid { .. }),
                "{wrong}: {error}"
            );
            assert_eq!(error.exit_code(), 2, "{wrong}");
        }
        for right in [
            "reset --table t --stream s --all --to latest",
            "reset --table t --stream s --shard shardId-1 --to after-sequence=5",
            "release --table t --stream s --shard shardId-1",
            "leases --table t --stream s",
            "members --table t --stream s",
        ] {
            assert!(checked(right).is_ok(), "{right}");
        }
    }
}
