//! Broker processes for the multi-process tests: the `crash-broker` binary's log of handled
//! records, and a guard that kills every child still running when a test ends.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills every child still running when the test ends, passed or not.
pub struct Reaper(pub HashMap<&'static str, Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for child in self.0.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Reaper {
    /// Stops every child still running with SIGTERM (a graceful shutdown) and asserts that
    /// each exits successfully.
    pub fn stop_all(&mut self) {
        for (owner, mut child) in std::mem::take(&mut self.0) {
            Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill -TERM");
            let status = child.wait().expect("wait for a broker process");
            assert!(status.success(), "{owner} exited with {status}");
        }
    }
}

/// Starts a `crash-broker` process (`bin`: the test's `CARGO_BIN_EXE_crash-broker`) as `owner`
/// in `account` on `table` and `stream`, with `env` set: it logs the records it handles to
/// `dir/<owner>` (see [`read_log`]) and its own logs to `dir/<owner>.log`.
pub fn spawn_crash_broker(
    bin: &str,
    [account, table, stream]: [&str; 3],
    dir: &Path,
    owner: &str,
    env: &[(&str, &str)],
) -> Child {
    let log = std::fs::File::create(dir.join(format!("{owner}.log"))).expect("a log file");
    Command::new(bin)
        .args([account, table, stream, owner])
        .arg(dir.join(owner))
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn broker process")
}

/// Waits until the logs in `dir` of `owners` (one file each, named by owner) hold every
/// record index of `0..records`, for at most `limit` (`patience` applied here).
pub async fn wait_all_handled(dir: &Path, owners: &[&str], records: usize, limit: Duration) {
    let deadline = Instant::now() + crate::patience(limit);
    loop {
        let seen: HashSet<usize> = owners
            .iter()
            .flat_map(|o| read_log(&dir.join(o)))
            .map(|l| l.3)
            .collect();
        if seen.len() == records {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {records} records handled",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One handled record, as `crash-broker` logs it: (shard, sequence, key, payload index, unix
/// ms its handler began).
pub type Line = (String, String, String, usize, u128);

/// The records a `crash-broker` process logged at `path` (none when it wrote nothing yet).
/// Payloads end in `#<index>`.
pub fn read_log(path: &std::path::Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('\t');
            let (shard, seq, key, at, payload) = (
                parts.next()?,
                parts.next()?,
                parts.next()?,
                parts.next()?,
                parts.next()?,
            );
            let i = payload.rsplit('#').next()?.trim().parse().ok()?;
            let at = at.parse().ok()?;
            Some((shard.to_owned(), seq.to_owned(), key.to_owned(), i, at))
        })
        .collect()
}

/// Milliseconds since the Unix epoch, as `crash-broker` stamps its lines.
pub fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}
