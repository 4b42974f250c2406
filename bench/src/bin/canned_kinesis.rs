//! A Kinesis endpoint whose answers cost the same every time, for `drain`'s CPU figures.
//!
//! kinesis-local shares this machine's two cores with the process measured, and its answers
//! take it 0.1 to 1 s of its own work each, so the raw loop's CPU per record moved by a factor
//! of two from round to round within one run (2.1 to 4.6 ms per 1,000 records): too noisy to
//! resolve a change of 10 %. This server holds one read-only stream in memory, every
//! `GetRecords` answer rendered before it starts listening, so what it does per call is a
//! lookup and a write, the same for the raw loop and the broker.
//!
//! `canned_kinesis --shards N --records R --size B --keys K --limit L` prints
//! `LISTENING <port>` on 127.0.0.1 and serves `ListShards`, `GetShardIterator` (every type) and
//! `GetRecords` (awsJson1.1 over HTTP/1.1, keep-alive) until its standard input closes. Records
//! go to shards in turn; each shard's sequence numbers are 56 digits, increasing. A call for an
//! unknown stream, shard or iterator is answered with the error Kinesis gives.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The stream's name: the only one served.
const STREAM: &str = "canned";

/// One shard's records and its pre-rendered answers.
struct Shard {
    id: String,
    /// Sequence numbers, in order.
    sequences: Vec<String>,
    /// `GetRecords` answers by the position they start at, for the configured limit.
    pages: HashMap<usize, Arc<Vec<u8>>>,
}

struct Canned {
    shards: Vec<Shard>,
    limit: usize,
    /// Records of each shard, for answers not rendered in advance.
    records: Vec<Vec<Value>>,
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sequence(shard: usize, n: usize) -> String {
    format!("4959{shard:04}{n:048}")
}

impl Canned {
    fn build(shards: usize, records: usize, size: usize, keys: usize, limit: usize) -> Self {
        let mut per_shard: Vec<Vec<Value>> = vec![Vec::new(); shards];
        let mut sequences: Vec<Vec<String>> = vec![Vec::new(); shards];
        let arrival = 1_764_000_000.0_f64;
        for i in 0..records {
            let s = i % shards;
            let n = per_shard[s].len();
            let mut data = vec![b'x'; size];
            let tag = format!("{i}");
            data[..tag.len().min(size)].copy_from_slice(&tag.as_bytes()[..tag.len().min(size)]);
            let seq = sequence(s, n);
            per_shard[s].push(json!({
                "SequenceNumber": seq,
                "ApproximateArrivalTimestamp": arrival + i as f64 / 1_000.0,
                "Data": base64::engine::general_purpose::STANDARD.encode(&data),
                "PartitionKey": format!("key-{}", i % keys.max(1)),
            }));
            sequences[s].push(seq);
        }
        let mut canned = Self {
            shards: Vec::new(),
            limit,
            records: per_shard,
        };
        for (s, sequences) in sequences.into_iter().enumerate() {
            canned.shards.push(Shard {
                id: format!("shardId-{s:012}"),
                sequences,
                pages: HashMap::new(),
            });
        }
        for s in 0..shards {
            let mut at = 0;
            loop {
                let page = Arc::new(canned.render(s, at, limit));
                canned.shards[s].pages.insert(at, page);
                if at >= canned.records[s].len() {
                    break;
                }
                at = (at + limit).min(canned.records[s].len());
            }
        }
        canned
    }

    /// The `GetRecords` answer for shard `s` from position `at`, up to `limit` records.
    fn render(&self, s: usize, at: usize, limit: usize) -> Vec<u8> {
        let all = &self.records[s];
        let end = (at + limit).min(all.len());
        let page: Vec<Value> = all[at.min(end)..end].to_vec();
        let behind = if end >= all.len() { 0 } else { 1_000 };
        serde_json::to_vec(&json!({
            "Records": page,
            "NextShardIterator": format!("it/{s}/{end}"),
            "MillisBehindLatest": behind,
        }))
        .expect("a JSON value renders")
    }

    fn shard_index(&self, id: &str) -> Option<usize> {
        self.shards.iter().position(|s| s.id == id)
    }

    /// The answer to one call: status and body.
    fn answer(&self, target: &str, body: &[u8]) -> (u16, Arc<Vec<u8>>) {
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let operation = target.rsplit('.').next().unwrap_or("");
        let error = |kind: &str, message: String| {
            let body = json!({ "__type": kind, "message": message });
            (400, Arc::new(body.to_string().into_bytes()))
        };
        let ok = |v: Value| (200, Arc::new(v.to_string().into_bytes()));
        let stream_ok = |r: &Value| {
            let name = r["StreamName"].as_str().or_else(|| {
                r["StreamARN"]
                    .as_str()
                    .and_then(|arn| arn.rsplit('/').next())
            });
            name.is_none() || name == Some(STREAM)
        };
        match operation {
            "ListShards" => {
                if !stream_ok(&request) {
                    return error("ResourceNotFoundException", "Stream not found".to_owned());
                }
                let n = self.shards.len() as u128;
                let step = u128::MAX / n;
                let shards: Vec<Value> = self
                    .shards
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let start = step * i as u128;
                        let end = if i as u128 + 1 == n {
                            u128::MAX
                        } else {
                            step * (i as u128 + 1) - 1
                        };
                        json!({
                            "ShardId": s.id,
                            "HashKeyRange": {
                                "StartingHashKey": start.to_string(),
                                "EndingHashKey": end.to_string(),
                            },
                            "SequenceNumberRange": { "StartingSequenceNumber": sequence(i, 0) },
                        })
                    })
                    .collect();
                ok(json!({ "Shards": shards }))
            }
            "GetShardIterator" => {
                if !stream_ok(&request) {
                    return error("ResourceNotFoundException", "Stream not found".to_owned());
                }
                let shard = request["ShardId"].as_str().unwrap_or("");
                let Some(s) = self.shard_index(shard) else {
                    return error(
                        "ResourceNotFoundException",
                        format!("Shard {shard} not found"),
                    );
                };
                let seqs = &self.shards[s].sequences;
                let after = |seq: &str| seqs.iter().position(|x| x.as_str() > seq);
                let given = request["StartingSequenceNumber"].as_str().unwrap_or("");
                let at = match request["ShardIteratorType"].as_str().unwrap_or("") {
                    "LATEST" => seqs.len(),
                    "AT_SEQUENCE_NUMBER" => seqs
                        .iter()
                        .position(|x| x.as_str() >= given)
                        .unwrap_or(seqs.len()),
                    "AFTER_SEQUENCE_NUMBER" => after(given).unwrap_or(seqs.len()),
                    _ => 0,
                };
                ok(json!({ "ShardIterator": format!("it/{s}/{at}") }))
            }
            "GetRecords" => {
                let iterator = request["ShardIterator"].as_str().unwrap_or("");
                let mut parts = iterator.split('/').skip(1);
                let (Some(s), Some(at)) = (
                    parts.next().and_then(|s| s.parse::<usize>().ok()),
                    parts.next().and_then(|a| a.parse::<usize>().ok()),
                ) else {
                    return error(
                        "InvalidArgumentException",
                        format!("Invalid ShardIterator {iterator}"),
                    );
                };
                if s >= self.shards.len() {
                    return error(
                        "InvalidArgumentException",
                        format!("Invalid ShardIterator {iterator}"),
                    );
                }
                let limit = request["Limit"].as_u64().map_or(self.limit, |l| l as usize);
                match self.shards[s].pages.get(&at) {
                    Some(page) if limit == self.limit => (200, page.clone()),
                    _ => (200, Arc::new(self.render(s, at, limit))),
                }
            }
            other => error(
                "UnknownOperationException",
                format!("{other} is not served by canned_kinesis"),
            ),
        }
    }
}

/// Serves one connection's calls, one after another, until the client closes it.
async fn serve(mut socket: TcpStream, canned: Arc<Canned>) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        // Read until the request's head is complete.
        let (head_len, target, content_length) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let header = |name: &str| {
                        request
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| String::from_utf8_lossy(h.value).into_owned())
                    };
                    let target = header("x-amz-target").unwrap_or_default();
                    let length = header("content-length")
                        .and_then(|l| l.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    break (len, target, length);
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
                }
            }
            let mut chunk = [0u8; 8 * 1024];
            let n = socket.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        while buf.len() < head_len + content_length {
            let mut chunk = [0u8; 8 * 1024];
            let n = socket.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let (status, body) = canned.answer(&target, &buf[head_len..head_len + content_length]);
        buf.drain(..head_len + content_length);
        let reason = if status == 200 { "OK" } else { "Bad Request" };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nx-amzn-RequestId: canned\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(&body).await?;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let canned = Arc::new(Canned::build(
        arg(&args, "--shards", 4).max(1),
        arg(&args, "--records", 20_000),
        arg(&args, "--size", 512),
        arg(&args, "--keys", 50),
        arg(&args, "--limit", 1_000).max(1),
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        println!("LISTENING {port}");
        // Stops when the parent closes our standard input (or exits).
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
                line.clear();
            }
            let _ = stop_tx.send(());
        });
        loop {
            tokio::select! {
                _ = &mut stop_rx => return,
                accepted = listener.accept() => {
                    let Ok((socket, _)) = accepted else { continue };
                    let _ = socket.set_nodelay(true);
                    tokio::spawn(serve(socket, canned.clone()));
                }
            }
        }
    });
}
