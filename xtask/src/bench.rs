//! `cargo xtask bench`: every benchmark scenario, side by side in one run, as one table.
//!
//! Builds `kinesis-bench` in release mode, starts kinesis-local and moto (or uses
//! `AWS_ENDPOINT_URL`) for the scenarios that need them, runs each scenario binary, and prints
//! the `FIGURE` lines they report as one table. `cargo xtask bench NAME..` runs only those.

use std::process::{Command, Stdio};

use crate::{emulators, root};

/// The scenarios, in the order they run; true when it needs the emulators.
const SCENARIOS: &[(&str, bool)] = &[
    ("dispatch_overhead", false),
    ("dispatch_metrics", false),
    ("poison", false),
    ("scale", false),
    ("fleet_cost", false),
    ("fleet_balance", false),
    ("takeover", false),
    ("kpl_deaggregate", false),
    ("drain", true),
    ("dynamo_cost", true),
    ("dynamo_reads", true),
    ("failover", true),
    ("fan_out", true),
];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let chosen: Vec<(&str, bool)> = SCENARIOS
        .iter()
        .copied()
        .filter(|(name, _)| args.is_empty() || args.iter().any(|a| a == name))
        .collect();
    if chosen.is_empty() {
        return Err(format!(
            "no scenario named {args:?}; scenarios: {:?}",
            SCENARIOS.iter().map(|s| s.0).collect::<Vec<_>>()
        ));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .current_dir(root())
        .args(["build", "--release", "--package", "kinesis-bench", "--bins"])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err("building the benchmarks failed".to_owned());
    }
    // The metrics scenario is a package of its own, built in a cargo run of its own: built
    // together, the `metrics` feature would reach every other scenario's dispatch too.
    if chosen.iter().any(|(name, _)| *name == "dispatch_metrics") {
        let status = Command::new(&cargo)
            .current_dir(root())
            .args([
                "build",
                "--release",
                "--package",
                "kinesis-bench-metrics",
                "--bins",
            ])
            .status()
            .map_err(|e| format!("cannot run cargo build: {e}"))?;
        if !status.success() {
            return Err("building the metrics benchmark failed".to_owned());
        }
    }
    let mut endpoints: Vec<(&str, String)> = Vec::new();
    // Started just before the first scenario that needs them, so that their start-up does not
    // disturb the in-process scenarios.
    let mut running = Vec::new();
    let external = std::env::var("AWS_ENDPOINT_URL").is_ok();
    let mut figures = Vec::new();
    let mut failed = Vec::new();
    for (name, needs_emulators) in &chosen {
        if *needs_emulators && !external && running.is_empty() {
            emulators::install()?;
            let kinesis = emulators::start_kinesis()?;
            endpoints.push(("AWS_ENDPOINT_URL_KINESIS", kinesis.endpoint.clone()));
            running.push(kinesis);
            let moto = emulators::start_moto()?;
            endpoints.push(("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint.clone()));
            running.push(moto);
        }
        eprintln!("xtask: bench scenario {name}");
        let mut cmd = Command::new(crate::target_dir().join("release").join(name));
        cmd.current_dir(root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .envs(endpoints.iter().map(|(k, v)| (*k, v.as_str())));
        for (var, default) in [
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "000000000000"),
            ("AWS_SECRET_ACCESS_KEY", "bench-secret"),
        ] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, default);
            }
        }
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {name}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            match line.strip_prefix("FIGURE\t") {
                Some(figure) => {
                    figures.push(figure.split('\t').map(str::to_owned).collect::<Vec<_>>())
                }
                None => println!("  {line}"),
            }
        }
        if !out.status.success() {
            failed.push(name.to_string());
        }
    }
    drop(running);
    print_table(&figures);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("scenarios failed: {failed:?}"))
    }
}

fn print_table(rows: &[Vec<String>]) {
    let header = ["figure", "measured", "target", "verdict"];
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    println!();
    line(&header);
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
}
