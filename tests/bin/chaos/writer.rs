//! The campaign's writer: records over a few keys, some of them KPL-aggregated, all the while.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use kinesis_kpl::{Aggregator, Pushed};

use crate::unix_ms;

/// How many keys the writer spreads its records over.
pub(crate) const KEYS: usize = 24;
/// Every this many batches, one is a single KPL-aggregated record.
const AGGREGATED_EVERY: usize = 4;
/// Records per batch (and sub-records per aggregate).
const BATCH: usize = 4;

/// A record the writer had acknowledged: (shard, sequence, place in its aggregate), with its
/// key and the time of the acknowledgement.
#[derive(Debug, Clone)]
pub(crate) struct Put {
    pub(crate) shard: String,
    pub(crate) sequence: String,
    pub(crate) subsequence: Option<u64>,
    pub(crate) key: String,
    pub(crate) at: u128,
}

/// One batch to put: the entries, and per entry the user records' keys (one for a plain
/// record, several for an aggregate).
struct Batch {
    entries: Vec<PutRecordsRequestEntry>,
    keys: Vec<Vec<String>>,
}

/// Puts records over `KEYS` keys, about 40 a second, until `stop`; each key's payloads count
/// up (`key#n`). Every fourth batch is one KPL-aggregated record of four records of one key
/// (stored on that key's shard, as the KPL does), the rest plain records.
pub(crate) async fn writer(
    client: aws_sdk_kinesis::Client,
    stream: String,
    puts: Arc<Mutex<Vec<Put>>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut counts = [0u64; KEYS];
    let mut n = 0usize;
    let mut batches = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    // With `CHAOS_QUIET=1` (the consumers run quiet idle shards) or in a rolling deploy
    // (`CHAOS_PREVIOUS`: the new processes run them), puts come in bursts of 10 s every 40 s,
    // so rows go idle for longer than a lease and faults meet idle rows.
    let quiet = std::env::var("CHAOS_QUIET").is_ok_and(|v| v == "1")
        || std::env::var_os("CHAOS_PREVIOUS").is_some();
    let began = tokio::time::Instant::now();
    while !*stop.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        if quiet && began.elapsed().as_millis() % 40_000 >= 10_000 {
            continue;
        }
        let mut next_payload = |k: usize| {
            let payload = format!("k{k}#{}", counts[k]);
            counts[k] += 1;
            payload
        };
        batches += 1;
        let batch = if batches.is_multiple_of(AGGREGATED_EVERY) {
            let k = n % KEYS;
            n += 1;
            let key = format!("k{k}");
            let mut aggregator = Aggregator::new();
            for _ in 0..BATCH {
                let pushed = aggregator
                    .push(&key, None, next_payload(k).into())
                    .expect("a small record fits an aggregate");
                assert_eq!(
                    pushed,
                    Pushed::Added,
                    "four small records fit one aggregate"
                );
            }
            let entry = aggregator.finish().expect("an aggregate of four records");
            Batch {
                entries: vec![PutRecordsRequestEntry::builder()
                    .partition_key(&entry.partition_key)
                    .explicit_hash_key(entry.explicit_hash_key.to_string())
                    .data(Blob::new(entry.data.to_vec()))
                    .build()
                    .expect("entry")],
                keys: vec![vec![key; BATCH]],
            }
        } else {
            let mut batch = Batch {
                entries: Vec::new(),
                keys: Vec::new(),
            };
            for _ in 0..BATCH {
                let k = n % KEYS;
                n += 1;
                let key = format!("k{k}");
                batch.entries.push(
                    PutRecordsRequestEntry::builder()
                        .partition_key(&key)
                        .data(Blob::new(next_payload(k)))
                        .build()
                        .expect("entry"),
                );
                batch.keys.push(vec![key]);
            }
            batch
        };
        // Retried until every entry landed, in order, so each key's payloads stay in order.
        loop {
            match client
                .put_records()
                .stream_name(&stream)
                .set_records(Some(batch.entries.clone()))
                .send()
                .await
            {
                Ok(out) if out.failed_record_count().unwrap_or(0) == 0 => {
                    let at = unix_ms();
                    let mut puts = puts.lock().expect("puts");
                    for (r, keys) in out.records().iter().zip(&batch.keys) {
                        let aggregated = keys.len() > 1;
                        for (sub, key) in keys.iter().enumerate() {
                            puts.push(Put {
                                shard: r.shard_id().unwrap_or_default().to_owned(),
                                sequence: r.sequence_number().unwrap_or_default().to_owned(),
                                subsequence: aggregated.then_some(sub as u64),
                                key: key.clone(),
                                at,
                            });
                        }
                    }
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}
