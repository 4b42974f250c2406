//! The Java KCL consumer of `tests/kcl/` as a process: started against the emulators, read
//! line by line from its standard output, stopped gracefully through its standard input.
//! `cargo xtask integ` builds it with Maven for each KCL version and passes the builds as
//! `KCL_CONSUMERS` (`version=dir,..`), or the reason there are none as
//! `KCL_CONSUMERS_SKIPPED`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::{endpoint, Service};

/// The KCL builds to run, `(version, directory)`; `None` when `cargo xtask integ` could not
/// build them (no Java or Maven), after printing why. Panics outside `cargo xtask integ`.
pub fn kcl_consumers() -> Option<Vec<(String, PathBuf)>> {
    if let Ok(list) = std::env::var("KCL_CONSUMERS") {
        return Some(
            list.split(',')
                .filter_map(|part| part.split_once('='))
                .map(|(v, dir)| (v.to_owned(), PathBuf::from(dir)))
                .collect(),
        );
    }
    if let Ok(why) = std::env::var("KCL_CONSUMERS_SKIPPED") {
        eprintln!("SKIPPED: the real-KCL test cannot run here: {why}");
        return None;
    }
    panic!(
        "neither KCL_CONSUMERS nor KCL_CONSUMERS_SKIPPED is set: run the integration suite with \
         `cargo xtask integ`, which builds the Java KCL consumer"
    );
}

/// The build of `version`, or `None` (skipped, said why).
pub fn kcl_consumer(version_prefix: &str) -> Option<(String, PathBuf)> {
    let consumers = kcl_consumers()?;
    let found = consumers
        .into_iter()
        .find(|(v, _)| v.starts_with(version_prefix));
    Some(found.unwrap_or_else(|| panic!("no KCL {version_prefix} build in KCL_CONSUMERS")))
}

/// What the consumer is asked to do.
#[derive(Debug, Clone)]
pub struct KclRun<'a> {
    /// The access key id (kinesis-local's account).
    pub account: &'a str,
    /// The stream.
    pub stream: &'a str,
    /// The application name: the KCL's lease table.
    pub app: &'a str,
    /// Records to process per shard.
    pub limits: &'a [(String, usize)],
    /// `failoverTimeMillis`.
    pub failover_ms: u64,
}

/// A running KCL consumer.
#[derive(Debug)]
pub struct KclProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    /// Its log (standard error).
    pub log: PathBuf,
    /// The records it processed: `shard TAB sequence TAB subsequence TAB payload` lines.
    pub out: PathBuf,
}

impl KclProcess {
    /// Starts the consumer built in `dir`.
    pub fn start(dir: &Path, run: &KclRun<'_>) -> Self {
        let work = std::env::temp_dir().join(format!("kcl-{}", run.app));
        std::fs::create_dir_all(&work).expect("kcl work dir");
        let (log, out) = (work.join("kcl.log"), work.join("processed.tsv"));
        let classpath = format!(
            "{}:{}",
            dir.join("kcl-consumer-0.1.0.jar").display(),
            dir.join("lib").join("*").display()
        );
        let limits = run
            .limits
            .iter()
            .map(|(shard, n)| format!("{shard}={n}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut child = Command::new("java")
            // A small, quick-starting JVM: two cores are shared with the emulators.
            .args(["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
            .args(["-cp", &classpath, "kinesisbroker.kcl.KclConsumer"])
            .env("KCL_STREAM", run.stream)
            .env("KCL_APP", run.app)
            .env("KCL_WORKER", format!("kcl-worker-{}", run.app))
            .env("KCL_KINESIS_ENDPOINT", endpoint(Service::Kinesis))
            .env("KCL_DYNAMODB_ENDPOINT", endpoint(Service::Dynamodb))
            .env("KCL_FAILOVER_MS", run.failover_ms.to_string())
            .env("KCL_LIMITS", limits)
            .env("KCL_OUT", &out)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", run.account)
            .env("AWS_SECRET_ACCESS_KEY", "integ-secret")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("kcl log"))
            .kill_on_drop(true)
            .spawn()
            .expect("start java (the KCL consumer)");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            log,
            out,
        }
    }

    /// Waits for a line starting with `prefix`; returns the lines read up to it, itself
    /// included. Panics (naming the log) after `limit` or when the process ends first.
    pub async fn wait_for(&mut self, prefix: &str, limit: Duration) -> Vec<String> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    let done = line.starts_with(prefix);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Ok(None) => panic!(
                    "the KCL consumer ended before `{prefix}` (after {seen:?}); see {}",
                    self.log.display()
                ),
                Err(_) => panic!(
                    "no `{prefix}` from the KCL consumer within {limit:?} (after {seen:?}); see {}",
                    self.log.display()
                ),
            }
        }
    }

    /// Asks for a graceful shutdown and waits until the process has exited; then the records
    /// it processed, as [`processed`](Self::processed) reads them.
    pub async fn stop(mut self, limit: Duration) -> Vec<(String, String, u64, String)> {
        let mut stdin = self.stdin.take().expect("stdin");
        stdin.write_all(b"stop\n").await.expect("write stop");
        drop(stdin);
        self.wait_for("KCL STOPPED", limit).await;
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("the KCL consumer exits after its shutdown")
            .expect("wait");
        assert!(
            status.success(),
            "KCL consumer: {status}; see {}",
            self.log.display()
        );
        self.processed()
    }

    /// The records it processed: `(shard, sequence, subsequence, payload)`.
    pub fn processed(&self) -> Vec<(String, String, u64, String)> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let mut parts = line.splitn(4, '\t');
                let mut next = || parts.next().expect("processed line").to_owned();
                let (shard, seq, sub, payload) = (next(), next(), next(), next());
                (shard, seq, sub.parse().expect("subsequence"), payload)
            })
            .collect()
    }
}
