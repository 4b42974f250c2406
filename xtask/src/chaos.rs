//! `cargo xtask chaos [--seed N] [--minutes M] [--processes P] [--shards S] [--seeds K]`: the
//! chaos campaign of real processes on the emulators (see `tests/bin/chaos/` for the faults
//! and the checks).
//!
//! Builds the runner and the consumer (`kinesis-integ`'s `chaos` and `chaos-consumer`
//! binaries, with `--workspace --all-features`),
//! starts kinesis-local and moto on free ports of 127.0.0.1 (or uses `AWS_ENDPOINT_URL`), and
//! runs the runner once per seed: `--seed N` alone replays one seed; `--seeds K` runs K seeds
//! from N (or from a random one). Logs go to `target/chaos/<seed>/`. Stops the emulators by
//! PID, also on failure; fails when any seed found a violation.

use std::process::Command;

use crate::{emulators, root, target_dir};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let first: u64 = match value("--seed") {
        Some(s) => s.parse().map_err(|_| format!("--seed {s}: not a number"))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(0),
    };
    let seeds: u64 = match value("--seeds") {
        Some(s) => s
            .parse()
            .map_err(|_| format!("--seeds {s}: not a number"))?,
        None => 1,
    };
    // Everything but --seed and --seeds goes to the runner.
    let mut passed = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--seed" || args[i] == "--seeds" {
            i += 2;
            continue;
        }
        passed.push(args[i].clone());
        i += 1;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .current_dir(root())
        // `--workspace`, closer to the feature set of `cargo test --workspace --all-features`.
        // The AWS SDK's crates still build a second time in a cold CI run (about a minute):
        // `cargo test` also turns on features its dev-dependencies ask for.
        .args([
            "build",
            "--workspace",
            "--all-features",
            "--bin",
            "chaos",
            "--bin",
            "chaos-consumer",
        ])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("building the chaos binaries failed".to_owned());
    }
    let runner = target_dir().join("debug").join("chaos");
    let mut endpoints = Vec::new();
    let mut running = Vec::new();
    if let Ok(url) = std::env::var("AWS_ENDPOINT_URL") {
        eprintln!("xtask: AWS_ENDPOINT_URL={url}: using it, starting nothing");
    } else {
        emulators::install()?;
        let kinesis = emulators::start_kinesis()?;
        endpoints.push(("AWS_ENDPOINT_URL_KINESIS", kinesis.endpoint.clone()));
        running.push(kinesis);
        let moto = emulators::start_moto()?;
        endpoints.push(("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint.clone()));
        running.push(moto);
    }
    let mut failed = Vec::new();
    for seed in first..first + seeds {
        let dir = target_dir().join("chaos").join(seed.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let mut cmd = Command::new(&runner);
        cmd.args(["--seed", &seed.to_string(), "--dir"])
            .arg(&dir)
            .args(&passed)
            .env("AWS_REGION", "us-east-1");
        for (var, value) in &endpoints {
            cmd.env(var, value);
        }
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run {}: {e}", runner.display()))?;
        if !status.success() {
            failed.push(seed);
        }
    }
    drop(running);
    if failed.is_empty() {
        eprintln!("xtask: chaos: {seeds} seed(s) from {first}: no violation");
        Ok(())
    } else {
        Err(format!(
            "chaos: violations with seed(s) {failed:?} (replay one: cargo xtask chaos --seed N)"
        ))
    }
}
