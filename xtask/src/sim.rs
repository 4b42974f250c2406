//! `cargo xtask sim`: the seeded fleet simulation (crate `kinesis-sim`), in release mode.
//!
//! `cargo xtask sim --seed N` replays one seed and prints its history when it fails (add
//! `--history` to print it anyway); `cargo xtask sim --seeds N [--from M]` runs a campaign of
//! N seeds. `RUST_LOG=kinesis_fleet=debug,kinesis_shard_reader=debug` shows the brokers' own logs of a replay.

use std::process::Command;

use crate::root;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if !args.iter().any(|a| a == "--seed" || a == "--seeds") {
        return Err("usage: cargo xtask sim --seed N [--history] | --seeds N [--from M]".into());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .current_dir(root())
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "kinesis-sim",
            "--",
        ])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("the simulation found a failing seed (see above)".to_owned())
    }
}
