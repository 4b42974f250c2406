//! `FaultProxy`: an HTTP proxy on 127.0.0.1 between the brokers and one emulator, that adds
//! latency, cuts open connections, refuses new ones, answers a chosen share of calls with AWS
//! error bodies (throttling or 500) instead of forwarding them, and loses the responses of
//! chosen calls: it forwards them, waits for the emulator's whole response and closes the
//! client connection without answering, so the call took effect but its caller never heard.
//!
//! Each request is forwarded on a fresh upstream connection with `Connection: close`, and the
//! response relayed until the emulator closes; the client connection is closed after it. That
//! keeps the proxy free of HTTP response parsing; the AWS SDK reconnects as it would after any
//! server close.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What share of which calls to answer with an error.
#[derive(Debug, Clone)]
struct ErrorRule {
    /// A substring of the `X-Amz-Target` header (`GetRecords`, `UpdateItem`).
    target: String,
    /// 0.0 to 1.0.
    share: f64,
    /// `true`: HTTP 400 ProvisionedThroughputExceededException; `false`: HTTP 500.
    throttle: bool,
    /// Only calls whose body contains every one of these.
    body_has: Vec<String>,
    /// Instead: HTTP 400 with this error type and message.
    answer: Option<(String, String)>,
    /// How many more calls it applies to (`None`: every one).
    left: Option<u64>,
}

/// Which calls to forward and then leave unanswered.
#[derive(Debug, Clone)]
struct DropRule {
    /// A substring of the `X-Amz-Target` header (`UpdateItem`).
    target: String,
    /// Which of the matching calls.
    pick: Pick,
}

/// Which of the calls a [`DropRule`] matches it applies to.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// Each with this probability, 0.0 to 1.0.
    Share(f64),
    /// The next this many; the rule is spent when it reaches 0.
    Next(u64),
}

impl DropRule {
    /// Whether this call (whose target is `target`) loses its response; counts it if so.
    fn applies(&mut self, target: &str) -> bool {
        if !target.contains(&self.target) {
            return false;
        }
        match &mut self.pick {
            Pick::Share(share) => fastrand::f64() < *share,
            Pick::Next(0) => false,
            Pick::Next(left) => {
                *left -= 1;
                true
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    latency_ms: AtomicU64,
    refusing: AtomicBool,
    rules: Mutex<Vec<ErrorRule>>,
    drops: Mutex<Vec<DropRule>>,
    forwarded: AtomicU64,
    faulted: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    reads: crate::read_meter::ReadMeter,
}

/// A fault-injecting proxy; see the module docs. Dropping it stops it.
#[derive(Debug)]
pub struct FaultProxy {
    endpoint: String,
    state: Arc<State>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream` (`http://127.0.0.1:P`).
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream
            .strip_prefix("http://")
            .unwrap_or(upstream)
            .trim_end_matches('/')
            .to_owned();
        assert!(
            upstream.starts_with("127.0.0.1:") || upstream.starts_with("localhost:"),
            "proxy only to loopback: {upstream}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(State::default());
        let (cut, _) = watch::channel(0u64);
        let (s, c) = (state.clone(), cut.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if s.refusing.load(Ordering::SeqCst) {
                    s.refused.fetch_add(1, Ordering::SeqCst);
                    drop(client); // reset: the connection is refused
                    continue;
                }
                let (s, up, cut) = (s.clone(), upstream.clone(), c.subscribe());
                tokio::spawn(async move {
                    let _ = serve(client, &up, &s, cut).await;
                });
            }
        });
        Self {
            endpoint,
            state,
            cut,
            task,
        }
    }

    /// The proxy's endpoint URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Delay added before each request is forwarded.
    pub fn set_latency(&self, latency: Duration) {
        self.state
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// Drops every open connection now.
    pub fn cut_connections(&self) {
        self.cut.send_modify(|g| *g += 1);
    }

    /// While set, new connections are closed at once and open ones are cut: an outage.
    pub fn set_down(&self, down: bool) {
        self.state.refusing.store(down, Ordering::SeqCst);
        if down {
            self.cut_connections();
        }
    }

    /// Answers `share` of the calls whose `X-Amz-Target` contains `target` with HTTP 400
    /// `ProvisionedThroughputExceededException`.
    pub fn throttle(&self, target: &str, share: f64) {
        self.add_rule(target, share, true);
    }

    /// Answers `share` of the calls whose `X-Amz-Target` contains `target` with HTTP 500.
    pub fn fail(&self, target: &str, share: f64) {
        self.add_rule(target, share, false);
    }

    /// Removes every error rule.
    pub fn clear_errors(&self) {
        self.state.rules.lock().expect("rules").clear();
    }

    fn add_rule(&self, target: &str, share: f64, throttle: bool) {
        self.state.rules.lock().expect("rules").push(ErrorRule {
            target: target.to_owned(),
            share,
            throttle,
            body_has: Vec::new(),
            answer: None,
            left: None,
        });
    }

    /// Answers the next `times` calls whose `X-Amz-Target` contains `target` and whose body
    /// contains each of `body_has` with HTTP 400 `kind` and `message`, as the service refuses
    /// a request for what it holds (DynamoDB's `ValidationException` for an item past 400 KB,
    /// which the emulator does not enforce).
    pub fn refuse(&self, target: &str, body_has: &[&str], kind: &str, message: &str, times: u64) {
        self.state.rules.lock().expect("rules").push(ErrorRule {
            target: target.to_owned(),
            share: 1.0,
            throttle: false,
            body_has: body_has.iter().map(|b| (*b).to_owned()).collect(),
            answer: Some((kind.to_owned(), message.to_owned())),
            left: Some(times),
        });
    }

    /// (forwarded, answered with an error, refused) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.state.forwarded.load(Ordering::SeqCst),
            self.state.faulted.load(Ordering::SeqCst),
            self.state.refused.load(Ordering::SeqCst),
        )
    }

    /// Loses the response of `share` of the calls whose `X-Amz-Target` contains `target`: each
    /// is forwarded, the emulator's whole response awaited (so the call took effect), and then
    /// the client connection is closed without an answer, as when a response is lost on the
    /// way back. The caller sees a dropped connection and cannot tell whether the call landed.
    pub fn drop_responses(&self, target: &str, share: f64) {
        self.add_drop(target, Pick::Share(share));
    }

    /// As [`drop_responses`](Self::drop_responses), for the next `n` calls whose
    /// `X-Amz-Target` contains `target` only; later ones are answered again.
    pub fn drop_next_responses(&self, target: &str, n: u64) {
        self.add_drop(target, Pick::Next(n));
    }

    /// Removes every response-dropping rule.
    pub fn clear_drops(&self) {
        self.state.drops.lock().expect("drops").clear();
    }

    fn add_drop(&self, target: &str, pick: Pick) {
        self.state.drops.lock().expect("drops").push(DropRule {
            target: target.to_owned(),
            pick,
        });
    }

    /// What DynamoDB would bill for the reads answered through this proxy so far, counted from
    /// the responses (see [`Reads`](crate::Reads)).
    pub fn reads(&self) -> crate::Reads {
        self.state.reads.reads()
    }

    /// How many calls were forwarded and then left unanswered so far (they also count as
    /// forwarded in [`counts`](Self::counts)).
    pub fn dropped(&self) -> u64 {
        self.state.dropped.load(Ordering::SeqCst)
    }
}

/// Reads one request head and body from `client`.
async fn read_request(client: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some((head, body)))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn refusal(kind: &str, message: &str) -> Vec<u8> {
    let body =
        format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{kind}","message":"{message}"}}"#);
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-ErrorType: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn error_response(throttle: bool, target: &str) -> Vec<u8> {
    let (status, kind, message) = if throttle {
        (
            "400 Bad Request",
            "ProvisionedThroughputExceededException",
            "Rate exceeded (injected by the fault proxy)",
        )
    } else {
        (
            "500 Internal Server Error",
            "InternalFailure",
            "Internal failure (injected by the fault proxy)",
        )
    };
    let body = format!(r#"{{"__type":"{kind}","message":"{message} for {target}"}}"#);
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-ErrorType: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn serve(
    mut client: TcpStream,
    upstream: &str,
    state: &State,
    mut cut: watch::Receiver<u64>,
) -> std::io::Result<()> {
    cut.mark_unchanged();
    let work = async {
        let Some((head, body)) = read_request(&mut client).await? else {
            return Ok(());
        };
        let latency = state.latency_ms.load(Ordering::SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        let target = header(&head, "x-amz-target").unwrap_or_default().to_owned();
        let rule = state
            .rules
            .lock()
            .expect("rules")
            .iter_mut()
            .find(|r| {
                target.contains(&r.target)
                    && r.left != Some(0)
                    && r.body_has
                        .iter()
                        .all(|needle| contains(&body, needle.as_bytes()))
                    && fastrand::f64() < r.share
            })
            .map(|r| {
                if let Some(left) = &mut r.left {
                    *left -= 1;
                }
                r.clone()
            });
        if let Some(rule) = rule {
            state.faulted.fetch_add(1, Ordering::SeqCst);
            let response = match &rule.answer {
                Some((kind, message)) => refusal(kind, message),
                None => error_response(rule.throttle, &target),
            };
            client.write_all(&response).await?;
            return client.shutdown().await;
        }
        let drop_response = state
            .drops
            .lock()
            .expect("drops")
            .iter_mut()
            .any(|r| r.applies(&target));
        let mut upstream_conn = TcpStream::connect(upstream).await?;
        // Forward with `Connection: close` so the response ends when the emulator closes.
        let mut rewritten = String::new();
        for line in head.trim_end_matches("\r\n\r\n").split("\r\n") {
            if line.to_ascii_lowercase().starts_with("connection:") {
                continue;
            }
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
        rewritten.push_str("Connection: close\r\n\r\n");
        upstream_conn.write_all(rewritten.as_bytes()).await?;
        upstream_conn.write_all(&body).await?;
        state.forwarded.fetch_add(1, Ordering::SeqCst);
        if drop_response {
            // The whole response, to be sure the emulator finished the call; returning then
            // drops the client connection unanswered.
            let mut response = Vec::new();
            upstream_conn.read_to_end(&mut response).await?;
            state.dropped.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        if target.ends_with("GetItem") {
            // Reads are relayed whole, to bill them from the response's items.
            let mut response = Vec::new();
            upstream_conn.read_to_end(&mut response).await?;
            if let Some(at) = response.windows(4).position(|w| w == b"\r\n\r\n") {
                state.reads.bill(&target, &body, &response[at + 4..]);
            }
            client.write_all(&response).await?;
            return client.shutdown().await;
        }
        tokio::io::copy(&mut upstream_conn, &mut client).await?;
        client.shutdown().await
    };
    tokio::select! {
        out = work => out,
        _ = cut.changed() => Ok(()), // dropped: the connection is cut
    }
}
