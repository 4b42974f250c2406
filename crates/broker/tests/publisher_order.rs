//! The publisher keeps each partition key's order through partial failures, plain and
//! aggregated: read back, every record is stored exactly once and each key's records follow
//! one another in the order given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kinesis_broker::{
    kinesis::{KinesisApi, PutOutcome},
    testing::MemoryStream,
    Publisher, PutEntry, StartAt,
};
use kinesis_lease_core::BoxFuture;
use kinesis_stream_core::{ReaderError, RecordsPage, Shard};

/// Kinesis that refuses each entry with probability `p` (seeded), as a throttled shard does,
/// and refuses every call after the first `calls` (when set), as a revoked permission does.
#[derive(Debug, Clone)]
struct Flaky {
    inner: MemoryStream,
    p: f64,
    rng: Arc<Mutex<fastrand::Rng>>,
    calls: Option<Arc<Mutex<u32>>>,
    /// ListShards refused, as for a role that may only put.
    deny_list: bool,
}

impl KinesisApi for Flaky {
    fn list_shards<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Shard>, ReaderError>> {
        if self.deny_list {
            return Box::pin(async move {
                Err(ReaderError::Refused {
                    operation: "ListShards",
                    resource: stream.to_owned(),
                    source: "AccessDeniedException".into(),
                })
            });
        }
        self.inner.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        position: &'a StartAt,
    ) -> BoxFuture<'a, Result<String, ReaderError>> {
        self.inner.shard_iterator(stream, shard, position)
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a str,
        shard: &'a str,
        iterator: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<RecordsPage, ReaderError>> {
        self.inner.get_records(stream, shard, iterator, limit)
    }

    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: &'a [PutEntry],
    ) -> BoxFuture<'a, Result<Vec<PutOutcome>, ReaderError>> {
        Box::pin(async move {
            if let Some(calls) = &self.calls {
                let mut left = calls.lock().unwrap();
                if *left == 0 {
                    return Err(ReaderError::Refused {
                        operation: "PutRecords",
                        resource: stream.to_owned(),
                        source: "AccessDeniedException".into(),
                    });
                }
                *left -= 1;
            }
            let refuse: Vec<bool> = {
                let mut rng = self.rng.lock().unwrap();
                entries.iter().map(|_| rng.f64() < self.p).collect()
            };
            let kept: Vec<PutEntry> = entries
                .iter()
                .zip(&refuse)
                .filter(|(_, r)| !**r)
                .map(|(e, _)| e.clone())
                .collect();
            let mut stored = self.inner.put_records(stream, &kept).await?.into_iter();
            Ok(refuse
                .iter()
                .map(|r| match r {
                    true => PutOutcome::Failed {
                        code: "ProvisionedThroughputExceededException".into(),
                        message: "Rate exceeded for shard".into(),
                    },
                    false => stored.next().expect("one outcome per kept entry"),
                })
                .collect())
        })
    }
}

/// Every record of the stream, KPL aggregates unpacked: (key, payload) in storage order per
/// shard.
async fn read_back(kinesis: &MemoryStream) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for shard in kinesis.shards("s").unwrap() {
        let it = kinesis
            .shard_iterator("s", &shard.id, &StartAt::TrimHorizon)
            .await
            .unwrap();
        let page = kinesis
            .get_records("s", &shard.id, &it, 10_000)
            .await
            .unwrap();
        for r in page.records {
            match kinesis_kpl::deaggregate(&r.payload).unwrap() {
                Some(subs) => out.extend(
                    subs.into_iter()
                        .map(|s| (s.partition_key, String::from_utf8(s.data.to_vec()).unwrap())),
                ),
                None => out.push((
                    r.partition_key,
                    String::from_utf8(r.payload.to_vec()).unwrap(),
                )),
            }
        }
    }
    out
}

async fn check(aggregated: bool, seed: u64) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 3).unwrap();
    let flaky = Flaky {
        inner: kinesis.clone(),
        p: 0.3,
        rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed))),
        calls: None,
        deny_list: false,
    };
    let mut publisher = Publisher::new(flaky, "s");
    if aggregated {
        publisher = publisher.aggregated_within(2_000);
    }
    let n = 1_500;
    let entries: Vec<PutEntry> = (0..n)
        .map(|i| PutEntry::new(format!("{i}"), format!("key-{}", i % 23)))
        .collect();
    let stored = publisher.put_all(entries).await.unwrap();
    assert_eq!(stored.len(), n);
    assert_eq!(
        stored.iter().any(|s| s.sequence.subsequence().is_some()),
        aggregated
    );
    let back = read_back(&kinesis).await;
    assert_eq!(back.len(), n, "each record stored exactly once");
    let mut per_key: HashMap<String, Vec<usize>> = HashMap::new();
    for (key, payload) in back {
        per_key
            .entry(key)
            .or_default()
            .push(payload.parse().unwrap());
    }
    for (key, ns) in per_key {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "aggregated={aggregated} seed={seed}: {key} out of order: {ns:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn plain_puts_keep_each_key_in_order_through_partial_failures() {
    for seed in 0..4 {
        check(false, seed).await;
    }
}

#[tokio::test(start_paused = true)]
async fn aggregated_puts_keep_each_key_in_order_through_partial_failures() {
    for seed in 0..4 {
        check(true, seed).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_put_that_stops_midway_says_which_records_were_stored() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let flaky = Flaky {
        inner: kinesis.clone(),
        p: 0.0,
        rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(1))),
        calls: Some(Arc::new(Mutex::new(1))),
        deny_list: false,
    };
    let entries = vec![
        PutEntry::new("a0", "a"),
        PutEntry::new("a1", "a"),
        PutEntry::new("b0", "b"),
    ];
    let err = Publisher::new(flaky, "s")
        .put_all(entries.clone())
        .await
        .unwrap_err();
    let kinesis_broker::BrokerError::PartlyPublished { published, .. } = err else {
        panic!("{err}");
    };
    // The first call took the first record of each key; the second was refused.
    let stored: Vec<bool> = published.iter().map(Option::is_some).collect();
    assert_eq!(stored, [true, false, true]);
    // Putting the rest again, in order, keeps every key in order and stores nothing twice.
    let rest: Vec<PutEntry> = entries
        .into_iter()
        .zip(&published)
        .filter(|(_, p)| p.is_none())
        .map(|(e, _)| e)
        .collect();
    Publisher::new(kinesis.clone(), "s")
        .put_all(rest)
        .await
        .unwrap();
    let back: Vec<String> = read_back(&kinesis)
        .await
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(back, ["a0", "b0", "a1"]);
}

#[tokio::test(start_paused = true)]
async fn without_permission_to_list_shards_an_aggregating_publisher_puts_plain() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 2).unwrap();
    let flaky = Flaky {
        inner: kinesis.clone(),
        p: 0.0,
        rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(1))),
        calls: None,
        deny_list: true,
    };
    let entries: Vec<PutEntry> = (0..20)
        .map(|i| PutEntry::new(format!("{i}"), format!("key-{}", i % 3)))
        .collect();
    let stored = Publisher::new(flaky, "s")
        .aggregated()
        .put_all(entries)
        .await
        .unwrap();
    assert_eq!(stored.len(), 20);
    assert!(stored.iter().all(|s| s.sequence.subsequence().is_none()));
    assert_eq!(read_back(&kinesis).await.len(), 20);
}

#[tokio::test]
async fn records_kinesis_would_refuse_are_named() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream("s", 1).unwrap();
    let publisher = Publisher::new(kinesis, "s");
    let too_big = PutEntry::new(vec![0u8; 1024 * 1024], "big-key");
    let err = chain(&publisher.put_all(vec![too_big]).await.unwrap_err());
    assert!(err.contains("`s`") && err.contains("big-key"), "{err}");
    let err = chain(&publisher.put("", "x").await.unwrap_err());
    assert!(
        err.contains("partition key has 1 to 256 characters"),
        "{err}"
    );
}

/// An error and its sources, one after the other.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
