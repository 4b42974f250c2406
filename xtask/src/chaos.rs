//! `cargo xtask chaos [--seed N] [--minutes M] [--processes P] [--shards S] [--seeds K]
//! [--previous REV]`: the
//! chaos campaign of real processes on the emulators (see `tests/bin/chaos/` for the faults
//! and the checks).
//!
//! Builds the runner and the consumer (`kinesis-integ`'s `chaos` and `chaos-consumer`
//! binaries, with `--workspace --all-features`),
//! starts kinesis-local and moto on free ports of 127.0.0.1 (or uses `AWS_ENDPOINT_URL`), and
//! runs the runner once per seed: `--seed N` alone replays one seed; `--seeds K` runs K seeds
//! from N (or from a random one). Logs go to `target/chaos/<seed>/`. Stops the emulators by
//! PID, also on failure; fails when any seed found a violation.
//!
//! `--previous REV` makes each run a rolling deploy from the release at git revision REV to
//! this one (see the runner's docs): REV's tree is exported to `target/chaos-previous/REV/`
//! and its `chaos-consumer` built there, in a target directory of its own (a cold build of
//! the AWS SDK the first time: both workspaces would put their consumer at the same path).

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
    let previous = value("--previous")
        .map(|rev| previous_consumer(&rev))
        .transpose()?;
    // Everything but --seed, --seeds and --previous goes to the runner.
    let mut passed = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--seed" || args[i] == "--seeds" || args[i] == "--previous" {
            i += 2;
            continue;
        }
        passed.push(args[i].clone());
        i += 1;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .current_dir(root())
        // The feature set of `cargo test --workspace --all-features`, so that the AWS SDK's
        // crates built for the tests serve here too: `--workspace`, and an example among the
        // targets, since cargo turns on what dev-dependencies ask for only when it builds a
        // target that uses them (without it the SDK built a second time in a cold CI run:
        // 47 s of its 926).
        .args([
            "build",
            "--workspace",
            "--all-features",
            "--bin",
            "chaos",
            "--bin",
            "chaos-consumer",
            "--example",
            "quickstart",
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
        if let Some(previous) = &previous {
            cmd.env("CHAOS_PREVIOUS", previous);
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

/// Exports git revision `rev` of this repository and builds its `chaos-consumer` (see the
/// module docs); returns the binary's path.
fn previous_consumer(rev: &str) -> Result<std::path::PathBuf, String> {
    let commit = Command::new("git")
        .current_dir(root())
        .args(["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !commit.status.success() {
        return Err(format!("--previous {rev}: not a commit of this repository"));
    }
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_owned();
    let dir = target_dir().join("chaos-previous").join(&commit);
    let tree = dir.join("tree");
    if !tree.exists() {
        // Exported beside it and renamed once whole: an export cut short is never reused.
        let partial = dir.join("tree.partial");
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
        let mut archive = Command::new("git")
            .current_dir(root())
            .args(["archive", "--format=tar", &commit])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run git archive: {e}"))?;
        let status = Command::new("tar")
            .args(["-x", "-C"])
            .arg(&partial)
            .stdin(archive.stdout.take().ok_or("git archive: no output")?)
            .status()
            .map_err(|e| format!("cannot run tar: {e}"))?;
        let archived = archive.wait().map_err(|e| format!("git archive: {e}"))?;
        if !status.success() || !archived.success() {
            return Err(format!("exporting {commit} failed"));
        }
        std::fs::rename(&partial, &tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    }
    eprintln!("xtask: chaos: building the previous release's consumer ({commit})");
    let mut build = build_bins(&tree, &["chaos-consumer"]);
    build.env("CARGO_TARGET_DIR", dir.join("target"));
    let status = build
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("building the consumer of {commit} failed"));
    }
    Ok(dir.join("target").join("debug").join("chaos-consumer"))
}

/// `cargo build --workspace --all-features` of the named binaries, in the workspace at `root`.
fn build_bins(root: &std::path::Path, bins: &[&str]) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--workspace", "--all-features"]);
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    cmd
}
