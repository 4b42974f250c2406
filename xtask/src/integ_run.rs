//! Builds the integration test binaries of `kinesis-integ` and runs them side by side.
//!
//! `cargo test` runs test binaries one after another; these spend most of their time waiting
//! (lease durations, emulator round trips, the real KCL's start), so `INTEG_JOBS` (4 by
//! default), slowest first, of them run at once. Each binary's output is kept in
//! `target/integ-logs/NAME.log` and printed whole when it ends, so outputs never interleave;
//! a table of durations closes the run. The binaries run as `cargo test` would run them: from
//! the package's directory, with the extra arguments given (a name filter, `--nocapture`).

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::root;

/// The integration tests' package directory (its manifest lists the targets).
fn package_dir() -> PathBuf {
    root().join("tests")
}

/// `cargo SUB --workspace --all-features`, from the workspace root.
pub(crate) fn workspace_cargo(cargo: &str, sub: &str) -> Command {
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root())
        .arg(sub)
        .args(["--workspace", "--all-features"]);
    cmd
}

/// The `[[test]]` targets of `tests/Cargo.toml`, in the order listed.
pub(crate) fn targets() -> Result<Vec<String>, String> {
    let path = package_dir().join("Cargo.toml");
    let manifest = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let names = test_targets(&manifest);
    if names.is_empty() {
        return Err(format!("no [[test]] target in {}", path.display()));
    }
    Ok(names)
}

/// The names of the `[[test]]` sections of a manifest.
fn test_targets(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_test = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_test = line == "[[test]]";
            continue;
        }
        if !in_test {
            continue;
        }
        if let Some(value) = line.strip_prefix("name").map(str::trim_start) {
            if let Some(value) = value.strip_prefix('=') {
                names.push(value.trim().trim_matches('"').to_owned());
            }
        }
    }
    names
}

/// One built test binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binary {
    name: String,
    path: PathBuf,
}

/// What [`build`] built.
#[derive(Debug)]
pub(crate) struct Built {
    /// The integration test binaries, slowest first.
    pub(crate) tests: Vec<Binary>,
    /// The `kinesis-broker` command line, for `tests/cli.rs`.
    pub(crate) cli: PathBuf,
}

/// The command line's own integration test: selecting it makes cargo build the
/// `kinesis-broker` binary (cargo builds a package's binaries for its integration tests) with
/// the same features as everything else, instead of a `cargo build` of another feature set
/// (dev-dependencies' features count for tests, not for builds).
const CLI_TEST: &str = "import_kcl";

/// Targets known to take longest (over a minute each): started first, so the slowest is not
/// the last to begin.
const SLOW_FIRST: &[&str] = &[
    "balance_by_load",
    "kcl_import",
    "fault_crash",
    "fault_network",
    "cli",
    "rolling_deploy",
    "lease_dynamo",
];

/// Builds `targets` (and the command line) with the workspace's feature set; returns their
/// executables.
pub(crate) fn build(cargo: &str, targets: &[String]) -> Result<Built, String> {
    let mut cmd = workspace_cargo(cargo, "test");
    cmd.args(["--no-run", "--message-format=json-render-diagnostics"]);
    for target in targets.iter().map(String::as_str).chain([CLI_TEST]) {
        cmd.args(["--test", target]);
    }
    cmd.stdout(Stdio::piped());
    eprintln!("xtask: {cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot build the integration tests: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the integration tests failed ({})",
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut binaries: Vec<Binary> = stdout
        .lines()
        .filter_map(test_artifact)
        .filter(|b| targets.contains(&b.name))
        .collect();
    binaries.sort_by_key(|b| {
        SLOW_FIRST
            .iter()
            .position(|s| *s == b.name)
            .unwrap_or(SLOW_FIRST.len())
    });
    let cli = stdout.lines().find_map(cli_artifact).ok_or_else(|| {
        format!(
            "cargo built no kinesis-broker binary (through the `{CLI_TEST}` test of crates/cli)"
        )
    })?;
    let missing: Vec<&String> = targets
        .iter()
        .filter(|t| !binaries.iter().any(|b| &b.name == *t))
        .collect();
    if !missing.is_empty() {
        return Err(format!("cargo built no executable for {missing:?}"));
    }
    Ok(Built {
        tests: binaries,
        cli,
    })
}

/// The `kinesis-broker` executable a `compiler-artifact` message names, if it is that one.
fn cli_artifact(line: &str) -> Option<PathBuf> {
    if !line.contains("\"reason\":\"compiler-artifact\"")
        || !line.contains("\"kind\":[\"bin\"]")
        || !line.contains("kinesis-broker-cli")
    {
        return None;
    }
    let target = &line[line.find("\"target\":")?..];
    (json_string(target, "name")? == "kinesis-broker")
        .then(|| json_string(line, "executable").map(PathBuf::from))
        .flatten()
}

/// The test executable a `compiler-artifact` message of `cargo --message-format=json` names,
/// if it is one of `kinesis-integ`.
fn test_artifact(line: &str) -> Option<Binary> {
    if !line.contains("\"reason\":\"compiler-artifact\"")
        || !line.contains("\"kind\":[\"test\"]")
        || !line.contains("kinesis-integ")
    {
        return None;
    }
    let target = &line[line.find("\"target\":")?..];
    let name = json_string(target, "name")?;
    let path = json_string(line, "executable")?;
    Some(Binary {
        name,
        path: PathBuf::from(path),
    })
}

/// The string value of the first `"key":"..."` in `json` (cargo escapes only `"` and `\` in
/// the paths and names it writes here).
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut value = String::new();
    let mut chars = json[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(chars.next()?),
            c => value.push(c),
        }
    }
    None
}

/// A binary running, its output going to `log`.
struct Running {
    binary: Binary,
    child: Child,
    log: PathBuf,
    started: Instant,
}

/// Runs every binary, `INTEG_JOBS` at a time; Err naming the ones that failed.
pub(crate) fn run_all(
    binaries: &[Binary],
    args: &[String],
    envs: &[(&str, String)],
) -> Result<(), String> {
    let jobs = std::env::var("INTEG_JOBS")
        .ok()
        .and_then(|j| j.parse::<usize>().ok())
        .filter(|j| *j > 0)
        .unwrap_or(4);
    let logs = crate::target_dir().join("integ-logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    eprintln!(
        "xtask: running {} integration test binaries, {jobs} at a time",
        binaries.len()
    );
    let started = Instant::now();
    let mut queue: VecDeque<&Binary> = binaries.iter().collect();
    let mut running: Vec<Running> = Vec::new();
    let mut done: Vec<(String, bool, Duration)> = Vec::new();
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < jobs {
            let Some(binary) = queue.pop_front() else {
                break;
            };
            running.push(spawn(binary, args, envs, &logs)?);
        }
        let mut i = 0;
        while i < running.len() {
            match running[i].child.try_wait() {
                Ok(None) => i += 1,
                Ok(Some(status)) => {
                    let finished = running.swap_remove(i);
                    done.push(report(&finished, status.success()));
                }
                Err(e) => {
                    let finished = running.swap_remove(i);
                    eprintln!("xtask: cannot wait for {}: {e}", finished.binary.name);
                    done.push(report(&finished, false));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "xtask: integration binaries, {:.0} s in all:",
        started.elapsed().as_secs_f64()
    );
    for (name, ok, took) in &done {
        let verdict = if *ok { "ok" } else { "FAILED" };
        eprintln!("  {name:<20} {verdict:<6} {:>6.1} s", took.as_secs_f64());
    }
    let failed: Vec<&str> = done
        .iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(name, _, _)| name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the integration suite failed: {failed:?}"))
    }
}

fn spawn(
    binary: &Binary,
    args: &[String],
    envs: &[(&str, String)],
    logs: &Path,
) -> Result<Running, String> {
    let log = logs.join(format!("{}.log", binary.name));
    let file = File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    let child = Command::new(&binary.path)
        .current_dir(package_dir())
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.path.display()))?;
    Ok(Running {
        binary: binary.clone(),
        child,
        log,
        started: Instant::now(),
    })
}

/// Prints a finished binary's whole output; returns its line of the summary.
fn report(finished: &Running, ok: bool) -> (String, bool, Duration) {
    let took = finished.started.elapsed();
    let output = std::fs::read_to_string(&finished.log).unwrap_or_default();
    let verdict = if ok { "ok" } else { "FAILED" };
    eprintln!(
        "xtask: ---- {} ({verdict}, {:.1} s; {}) ----\n{output}",
        finished.binary.name,
        took.as_secs_f64(),
        finished.log.display()
    );
    (finished.binary.name.clone(), ok, took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_targets_are_read_from_the_manifest() {
        let manifest = r#"
[package]
name = "kinesis-integ"

[[test]]
name = "lease_dynamo"
path = "lease_dynamo.rs"
test = false

[[bin]]
name = "crash-broker"

[[test]]
name = "cli"
"#;
        assert_eq!(test_targets(manifest), ["lease_dynamo", "cli"]);
    }

    #[test]
    fn test_artifacts_are_found_in_cargo_messages() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kinesis-integ@0.1.0","target":{"kind":["test"],"crate_types":["bin"],"name":"cli","src_path":"/w/tests/cli.rs"},"executable":"/w/target/debug/deps/cli-0a1b","fresh":true}"#;
        assert_eq!(
            test_artifact(line),
            Some(Binary {
                name: "cli".to_owned(),
                path: PathBuf::from("/w/target/debug/deps/cli-0a1b"),
            })
        );
        let library = line.replace(r#""kind":["test"]"#, r#""kind":["lib"]"#);
        assert_eq!(test_artifact(&library), None);
        let other = line.replace("kinesis-integ", "kinesis-broker");
        assert_eq!(test_artifact(&other), None);
    }

    #[test]
    fn the_cli_binary_is_found_in_cargo_messages() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/cli#kinesis-broker-cli@0.1.0","target":{"kind":["bin"],"crate_types":["bin"],"name":"kinesis-broker","src_path":"/w/crates/cli/src/main.rs"},"executable":"/w/target/debug/kinesis-broker","fresh":true}"#;
        assert_eq!(
            cli_artifact(line),
            Some(PathBuf::from("/w/target/debug/kinesis-broker"))
        );
        assert_eq!(
            cli_artifact(&line.replace("\"kinesis-broker\",\"src", "\"other\",\"src")),
            None
        );
        assert_eq!(
            cli_artifact(&line.replace("kinesis-broker-cli", "kinesis-integ")),
            None
        );
    }

    #[test]
    fn json_strings_are_unescaped() {
        assert_eq!(
            json_string(r#"{"a":"x\\y\"z","b":"w"}"#, "a").as_deref(),
            Some(r#"x\y"z"#)
        );
        assert_eq!(json_string(r#"{"b":"w"}"#, "a"), None);
    }
}
