//! `cargo xtask sim`: the seeded fleet simulation (crate `kinesis-sim`), in release mode.
//!
//! `cargo xtask sim --seed N` replays one seed and prints its history when it fails (add
//! `--history` to print it anyway); `cargo xtask sim --seeds N [--from M]` runs a campaign of
//! N seeds. `RUST_LOG=kinesis_fleet=debug,kinesis_shard_reader=debug` shows the brokers' own logs of a replay.
//! `--load-seed N [--history]` and `--load-seeds N [--from M]` do the same for the load
//! simulation (balancing by load; `kinesis_sim::load`); `--bursty` draws each second's puts
//! (Poisson) rather than putting exactly each shard's rate.

use std::process::Command;

use crate::root;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let flags = ["--seed", "--seeds", "--load-seed", "--load-seeds"];
    if !args.iter().any(|a| flags.contains(&a.as_str())) {
        return Err(
            "usage: cargo xtask sim --seed N [--history] | --seeds N [--from M] | \
                    --load-seed N [--history] | --load-seeds N [--from M] [--bursty]"
                .into(),
        );
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
