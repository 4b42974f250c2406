//! Installing, starting and stopping the AWS-compatible emulators, on 127.0.0.1 only.
//!
//! - Kinesis: `kinesis-local@0.6.2` from npm (kinesis-mock, LocalStack's Kinesis engine).
//! - DynamoDB: `moto[server]==5.2.5` from PyPI, in a virtualenv.
//! - Not an emulator but a test partner: `aws-kinesis-agg@4.2.8` from npm, awslabs' codec of the
//!   KPL aggregated record format, which the KPL interop tests drive through
//!   `tests/support/kpl_agg.js`.
//!
//! All install under `target/emulators/` when missing. Each runs on free ports with its log
//! in `target/emulators/*.log`, and is stopped by its PID when the [`Emulator`] drops, which
//! also happens when the suite fails. On Ctrl-C the terminal signals the whole process group,
//! emulators included.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::target_dir;

const KINESIS_LOCAL: &str = "kinesis-local@0.6.2";
const MOTO: &str = "moto[server]==5.2.5";
const KINESIS_AGG: &str = "aws-kinesis-agg@4.2.8";

/// A running emulator; dropping it stops it.
pub(crate) struct Emulator {
    pub(crate) name: &'static str,
    pub(crate) endpoint: String,
    child: Child,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("xtask: stopped {} (pid {pid})", self.name);
    }
}

fn dir() -> PathBuf {
    target_dir().join("emulators")
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    eprintln!("xtask: {what}");
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {cmd:?} exited with {status}"))
    }
}

/// A port nobody listens on now.
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn log_file(name: &str) -> Result<(File, PathBuf), String> {
    let path = dir().join(format!("{name}.log"));
    let file = File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok((file, path))
}

/// Starts `cmd` and waits until `port` accepts connections.
fn start(name: &'static str, mut cmd: Command, port: u16) -> Result<Emulator, String> {
    let (log, log_path) = log_file(name)?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    let mut emulator = Emulator {
        name,
        endpoint: format!("http://127.0.0.1:{port}"),
        child,
    };
    let started = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            eprintln!(
                "xtask: {name} ready on {} (pid {}) in {:.1?}",
                emulator.endpoint,
                emulator.child.id(),
                started.elapsed()
            );
            return Ok(emulator);
        }
        if let Ok(Some(status)) = emulator.child.try_wait() {
            return Err(format!(
                "{name} exited with {status}; see {}",
                log_path.display()
            ));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "{name} did not listen on port {port} within 60 s; see {}",
                log_path.display()
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn kinesis_local_dir() -> PathBuf {
    dir()
        .join("kinesis")
        .join("node_modules")
        .join("kinesis-local")
}

fn moto_bin() -> PathBuf {
    dir().join("moto").join("bin").join("moto_server")
}

/// The `node_modules` holding aws-kinesis-agg, for `NODE_PATH`.
pub(crate) fn kinesis_agg_node_path() -> PathBuf {
    dir().join("kinesis-agg").join("node_modules")
}

/// Installs aws-kinesis-agg under `target/emulators/` unless already there.
pub(crate) fn install_kinesis_agg() -> Result<(), String> {
    std::fs::create_dir_all(dir())
        .map_err(|e| format!("cannot create {}: {e}", dir().display()))?;
    if !kinesis_agg_node_path()
        .join("aws-kinesis-agg")
        .join("index.js")
        .exists()
    {
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(dir().join("kinesis-agg"))
                .arg(KINESIS_AGG),
            &format!("installing {KINESIS_AGG}"),
        )?;
    }
    Ok(())
}

/// Installs both emulators under `target/emulators/` unless already there.
pub(crate) fn install() -> Result<(), String> {
    std::fs::create_dir_all(dir())
        .map_err(|e| format!("cannot create {}: {e}", dir().display()))?;
    if !kinesis_local_dir().join("main.js").exists() {
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(dir().join("kinesis"))
                .arg(KINESIS_LOCAL),
            &format!("installing {KINESIS_LOCAL}"),
        )?;
    }
    if !moto_bin().exists() {
        let venv = dir().join("moto");
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "creating a virtualenv for moto",
        )?;
        run(
            Command::new(venv.join("bin").join("pip")).args(["install", "--quiet", MOTO]),
            &format!("installing {MOTO}"),
        )?;
    }
    Ok(())
}

/// Starts kinesis-local on a free http port (and a free https port it insists on).
pub(crate) fn start_kinesis() -> Result<Emulator, String> {
    let (plain, tls) = (free_port()?, free_port()?);
    let home = kinesis_local_dir();
    let mut cmd = Command::new("node");
    cmd.arg(home.join("main.js"))
        .current_dir(dir())
        .env("KINESIS_MOCK_CERT_PATH", home.join("server.json"))
        .env("KINESIS_MOCK_PLAIN_PORT", plain.to_string())
        .env("KINESIS_MOCK_TLS_PORT", tls.to_string())
        .env("LOG_LEVEL", "WARN")
        // The default of 50 open shards is reached by the suite as a whole.
        .env("SHARD_LIMIT", "10000");
    for duration in [
        "CREATE_STREAM_DURATION",
        "DELETE_STREAM_DURATION",
        "SPLIT_SHARD_DURATION",
        "MERGE_SHARDS_DURATION",
        "UPDATE_SHARD_COUNT_DURATION",
        "REGISTER_STREAM_CONSUMER_DURATION",
        "DEREGISTER_STREAM_CONSUMER_DURATION",
    ] {
        cmd.env(duration, "0ms");
    }
    start("kinesis-local", cmd, plain)
}

/// moto's server, with one lock around every request.
///
/// moto's threaded server reads an item, checks the condition and writes without a lock, so
/// two racing conditional writes on one item can both land, which DynamoDB never allows (seen
/// here: two winners of one free lease). Serialising requests restores DynamoDB's per-item
/// atomicity; keep-alive connections still work, unlike with `threaded=False`.
const MOTO_SERIAL: &str = r#"
import sys, threading
from moto.moto_server import werkzeug_app

_lock = threading.Lock()
_call = werkzeug_app.DomainDispatcherApplication.__call__

def _serial(self, environ, start_response):
    with _lock:
        return list(_call(self, environ, start_response))

werkzeug_app.DomainDispatcherApplication.__call__ = _serial
from moto.server import main
main(sys.argv[1:])
"#;

/// Starts moto's server on a free port, requests serialised (see [`MOTO_SERIAL`]).
pub(crate) fn start_moto() -> Result<Emulator, String> {
    let port = free_port()?;
    let script = dir().join("moto_serial.py");
    std::fs::write(&script, MOTO_SERIAL)
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let mut cmd = Command::new(dir().join("moto").join("bin").join("python"));
    cmd.arg(script)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    start("moto", cmd, port)
}
