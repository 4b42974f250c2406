//! KPL de-aggregation of what a shard read returns: each sub-record becomes a record of its
//! own, numbered (sequence, subsequence), with its own partition key and explicit hash key.
//!
//! # Malformed aggregates
//!
//! A record with the KPL magic whose MD5 trailer, protobuf body or table indexes are wrong is
//! delivered as it is (as the KCL does), counted as malformed and logged with its shard and
//! sequence number: the reader never drops what it cannot unpack.
//!
//! # Sub-records outside the shard's hash key range
//!
//! A producer whose shard map is stale (a split or merge since it last listed the shards)
//! aggregates records for the old shard; the aggregate lands on one child, carrying
//! sub-records whose hash keys belong to the other. The KCL, on the first such sub-record,
//! removes the aggregate's sub-records it already unpacked and skips the rest: the whole
//! aggregate is dropped, the in-range sub-records with it. No other shard holds those
//! sub-records, so every consumer loses them. This reader delivers every sub-record of the
//! aggregate from the shard it landed on instead, and counts the ones outside the shard's range
//! (`out_of_range` in the shard's stats, and a warning per aggregate): nothing is lost, and
//! the price is that such a sub-record's key may be processed on two shards at once for the
//! moment its producer's map was stale (the same per-key order a plain record routed there
//! would have had).

use std::sync::atomic::{AtomicU64, Ordering};

use kinesis_stream_core::Record;

/// De-aggregation counts of one shard, for its stats.
#[derive(Debug, Default)]
pub struct KplCounters {
    aggregates: AtomicU64,
    sub_records: AtomicU64,
    malformed: AtomicU64,
    out_of_range: AtomicU64,
}

/// What a shard's de-aggregation has seen while this instance held it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KplStats {
    /// KPL aggregated records unpacked.
    pub aggregates: u64,
    /// Sub-records delivered from them.
    pub sub_records: u64,
    /// Records that carried the KPL magic but were malformed (bad MD5, protobuf or table
    /// index): delivered as they were.
    pub malformed: u64,
    /// Sub-records whose effective hash key lies outside the shard's range (a producer with a
    /// stale shard map): delivered, where the KCL drops their whole aggregate.
    pub out_of_range: u64,
}

impl KplCounters {
    /// What was counted so far.
    pub fn stats(&self) -> KplStats {
        KplStats {
            aggregates: self.aggregates.load(Ordering::Relaxed),
            sub_records: self.sub_records.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            out_of_range: self.out_of_range.load(Ordering::Relaxed),
        }
    }
}

/// Appends `record` to `out`: its sub-records when it is a KPL aggregate, else itself.
/// `range` is the shard's hash key range, when known.
pub(crate) fn expand_into(
    record: Record,
    range: Option<(u128, u128)>,
    counters: &KplCounters,
    out: &mut Vec<Record>,
) {
    let subs = match kinesis_kpl::deaggregate(&record.payload) {
        Ok(Some(subs)) => subs,
        Ok(None) => {
            out.push(record);
            return;
        }
        Err(error) => {
            counters.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                sequence = %record.sequence,
                bytes = record.payload.len(),
                error = &error as &dyn std::error::Error,
                "record carries the KPL magic but is malformed; delivered as it is"
            );
            out.push(record);
            return;
        }
    };
    counters.aggregates.fetch_add(1, Ordering::Relaxed);
    counters
        .sub_records
        .fetch_add(subs.len() as u64, Ordering::Relaxed);
    let mut outside = 0u64;
    out.reserve(subs.len());
    for (position, sub) in subs.into_iter().enumerate() {
        if let Some((low, high)) = range {
            let hash = kinesis_kpl::effective_hash_key(
                &sub.partition_key,
                sub.explicit_hash_key.as_deref(),
            );
            // An unreadable explicit hash key cannot be placed: delivered, not counted.
            if hash.is_ok_and(|h| h < low || h > high) {
                outside += 1;
            }
        }
        out.push(Record {
            payload: sub.data,
            partition_key: sub.partition_key,
            explicit_hash_key: sub.explicit_hash_key,
            sequence: record.sequence.with_subsequence(Some(position as u64)),
            arrival: record.arrival,
        });
    }
    if outside > 0 {
        counters.out_of_range.fetch_add(outside, Ordering::Relaxed);
        tracing::warn!(
            sequence = %record.sequence,
            outside,
            "aggregated record holds sub-records outside this shard's hash key range (its producer's shard map was stale); delivered all of them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kinesis_kpl::{Aggregator, MAGIC};
    use kinesis_lease_core::SequenceNumber;

    fn record(payload: Bytes) -> Record {
        Record::new(payload, "outer", SequenceNumber::new("4200", None).unwrap())
    }

    fn aggregate(keys: &[&str]) -> Bytes {
        let mut agg = Aggregator::new();
        for (i, key) in keys.iter().enumerate() {
            let _ = agg
                .push(key, None, Bytes::from(format!("data-{i}")))
                .unwrap();
        }
        agg.finish().unwrap().data
    }

    #[test]
    fn sub_records_get_their_keys_and_subsequences() {
        let counters = KplCounters::default();
        let mut out = Vec::new();
        expand_into(
            record(aggregate(&["a", "b", "a"])),
            None,
            &counters,
            &mut out,
        );
        let got: Vec<(String, String, String)> = out
            .iter()
            .map(|r| {
                (
                    r.partition_key.clone(),
                    r.sequence.to_string(),
                    String::from_utf8(r.payload.to_vec()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), "4200/0".into(), "data-0".into()),
                ("b".into(), "4200/1".into(), "data-1".into()),
                ("a".into(), "4200/2".into(), "data-2".into()),
            ]
        );
        let stats = counters.stats();
        assert_eq!(
            (stats.aggregates, stats.sub_records, stats.malformed),
            (1, 3, 0)
        );
    }

    #[test]
    fn plain_and_malformed_records_pass_as_they_are() {
        let counters = KplCounters::default();
        let mut out = Vec::new();
        expand_into(
            record(Bytes::from_static(b"plain")),
            None,
            &counters,
            &mut out,
        );
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&[0u8; 20]);
        expand_into(record(Bytes::from(bad.clone())), None, &counters, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].payload, "plain");
        assert_eq!(out[1].payload, bad);
        assert_eq!(out[1].sequence.subsequence(), None);
        assert_eq!(counters.stats().malformed, 1);
        assert_eq!(counters.stats().aggregates, 0);
    }

    #[test]
    fn out_of_range_sub_records_are_delivered_and_counted() {
        let counters = KplCounters::default();
        let mut out = Vec::new();
        let keys = ["k1", "k2", "k3", "k4", "k5", "k6"];
        let half = u128::MAX / 2;
        let in_low = keys
            .iter()
            .filter(|k| kinesis_kpl::partition_key_hash(k) <= half)
            .count();
        expand_into(
            record(aggregate(&keys)),
            Some((0, half)),
            &counters,
            &mut out,
        );
        assert_eq!(out.len(), keys.len());
        assert_eq!(counters.stats().out_of_range, (keys.len() - in_low) as u64);
        assert!(
            in_low > 0 && in_low < keys.len(),
            "the keys span both halves"
        );
    }
}
