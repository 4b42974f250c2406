//! Project automation, run as `cargo xtask <job>`; one file per job.
//!
//! Dependency-free on purpose: it must build in seconds on a fresh machine.

mod bench;
mod chaos;
mod emulators;
mod integ;
mod integ_run;
mod kcl;
mod layout;
mod sim;

use std::path::PathBuf;

/// The jobs.
const USAGE: &str = "usage: cargo xtask <job> [args]

jobs:
  integ [FILTER..]   install and start kinesis-local and moto on 127.0.0.1 (or use
                     AWS_ENDPOINT_URL when set), run the integration suite, stop them
  bench [NAME..]     run the benchmark scenarios (release build, emulators where needed)
                     and print one table of figures
  sim --seed N       replay one seed of the fleet simulation, with its history on failure
  sim --seeds N [--from M]
                     run a campaign of N simulation seeds (release build)
  chaos [--seed N] [--seeds K] [--minutes M] [--processes P] [--shards S]
                     a chaos campaign of real consumer processes on the emulators:
                     faults drawn from the seed, checked from the processes' logs
  layout             check the library crates' layout: no source file over 800 lines, no
                     import cycles between the files of a crate";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("integ") => integ::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("sim") => sim::run(&args[1..]),
        Some("chaos") => chaos::run(&args[1..]),
        Some("layout") => layout::run(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(err) = result {
        eprintln!("xtask: {err}");
        std::process::exit(1);
    }
}

/// The workspace root (the xtask crate's parent).
fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The target directory, where emulators are installed.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}
