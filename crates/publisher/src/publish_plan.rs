//! The pure part of publishing: which records go into the next PutRecords call, and how.
//!
//! # Order per partition key
//!
//! Kinesis may store some records of a PutRecords call and fail others; a record re-put after
//! a later record of its key was stored would break that key's order. So a key appears in at
//! most one entry of a call: a plain record, or one aggregate (whose sub-records keep their
//! order inside it). A key's later records wait for the next call, and once one record of a key
//! is left out of a call, every later record of that key is left out too. A failed entry is put
//! again before anything after it of its key.
//!
//! # Aggregation
//!
//! With aggregation on, records bound for one shard (by the hash key ranges of the open shards)
//! are packed into KPL aggregates up to the record limit. A record too large to aggregate goes
//! plain; the call stays within 500 entries and 5 MiB.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use kinesis_kpl::{AggregatedEntry, Aggregator, Pushed};
use kinesis_stream_core::{PutEntry, Shard};

/// Most entries in one PutRecords call.
pub(crate) const MAX_CALL_ENTRIES: usize = 500;
/// Most bytes (data and partition keys) in one PutRecords call: 5 MiB.
pub(crate) const MAX_CALL_BYTES: usize = 5 * 1024 * 1024;

/// The open shards' hash key ranges, sorted: which shard a hash key belongs to.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardMap {
    ranges: Vec<(u128, u128, String)>,
}

impl ShardMap {
    /// The map of the open shards among `shards`.
    pub(crate) fn new(shards: &[Shard]) -> Self {
        let mut ranges: Vec<(u128, u128, String)> = shards
            .iter()
            .filter(|s| s.ending_sequence.is_none())
            .map(|s| (s.hash_range.0, s.hash_range.1, s.id.clone()))
            .collect();
        ranges.sort();
        Self { ranges }
    }

    /// The index of the shard whose range holds `hash`, if any.
    pub(crate) fn shard_of(&self, hash: u128) -> Option<usize> {
        let at = self
            .ranges
            .partition_point(|(low, _, _)| *low <= hash)
            .checked_sub(1)?;
        let (low, high, _) = self.ranges.get(at)?;
        (*low <= hash && hash <= *high).then_some(at)
    }

    /// The id of the shard at `index`.
    pub(crate) fn id(&self, index: usize) -> &str {
        &self.ranges[index].2
    }
}

/// How a call aggregates: the shard map, the most bytes per aggregate, and every entry's
/// effective hash key (computed once per `put_all`, not once per call).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Aggregation<'a> {
    pub(crate) map: &'a ShardMap,
    pub(crate) limit: usize,
    pub(crate) hashes: &'a [u128],
}

/// The effective hash key of each entry: where Kinesis routes it.
pub(crate) fn hashes(entries: &[PutEntry]) -> Vec<u128> {
    entries
        .iter()
        .map(|e| {
            e.explicit_hash_key
                .unwrap_or_else(|| kinesis_kpl::partition_key_hash(&e.partition_key))
        })
        .collect()
}

/// The records waiting to be put, per partition key in the order given: a key's stored records
/// are always a prefix of its records, so each key's queue only ever loses its front.
#[derive(Debug)]
pub(crate) struct Queues {
    /// The key (as a queue index) of each entry.
    key_of: Vec<usize>,
    queues: Vec<VecDeque<usize>>,
    /// The front of each non-empty queue.
    heads: BTreeSet<usize>,
    /// Every waiting entry.
    waiting: BTreeSet<usize>,
}

impl Queues {
    /// Every entry waiting, grouped by key.
    pub(crate) fn new(entries: &[PutEntry]) -> Self {
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut queues: Vec<VecDeque<usize>> = Vec::new();
        let mut key_of = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let next = ids.len();
            let id = *ids.entry(entry.partition_key.as_str()).or_insert(next);
            if id == queues.len() {
                queues.push(VecDeque::new());
            }
            queues[id].push_back(i);
            key_of.push(id);
        }
        let heads = queues.iter().filter_map(|q| q.front().copied()).collect();
        Self {
            key_of,
            queues,
            heads,
            waiting: (0..entries.len()).collect(),
        }
    }

    /// How many entries wait.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The first waiting entry of each key, in input order: all a plain call can take.
    pub(crate) fn heads(&self) -> impl Iterator<Item = usize> + '_ {
        self.heads.iter().copied()
    }

    /// Every waiting entry, in input order.
    pub(crate) fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.waiting.iter().copied()
    }

    /// Drops `stored` entries (each the front of its key's queue, or right behind another
    /// stored one).
    pub(crate) fn stored(&mut self, stored: &[usize]) {
        let stored: HashSet<usize> = stored.iter().copied().collect();
        for &i in &stored {
            let queue = &mut self.queues[self.key_of[i]];
            while queue.front().is_some_and(|f| stored.contains(f)) {
                let front = queue.pop_front().expect("checked");
                self.waiting.remove(&front);
                self.heads.remove(&front);
                if let Some(&next) = queue.front() {
                    self.heads.insert(next);
                }
            }
        }
    }
}

/// One entry of a planned call.
#[derive(Debug)]
pub(crate) enum Part {
    /// A record put as it is: the index of the caller's entry.
    Plain(usize),
    /// An aggregate of the caller's entries (indexes, in order), bound for `shard`.
    Aggregate { entries: Vec<usize>, shard: String },
}

/// A planned PutRecords call: its parts and the request entries, one per part, in order.
#[derive(Debug, Default)]
pub(crate) struct Call {
    pub(crate) parts: Vec<Part>,
    pub(crate) request: Vec<PutEntry>,
}

/// Plans the next call over `remaining` (indexes into `entries`, in input order), aggregating
/// when `aggregate` says how, else putting plain records.
pub(crate) fn plan_call(
    entries: &[PutEntry],
    remaining: impl IntoIterator<Item = usize>,
    aggregate: Option<Aggregation<'_>>,
) -> Call {
    let mut planner = Planner {
        entries,
        aggregate,
        call: Call::default(),
        bytes: 0,
        open_bytes: 0,
        used: HashSet::new(),
        blocked: HashSet::new(),
        open: BTreeMap::new(),
    };
    for i in remaining {
        // A full plain call takes nothing more (an aggregated one may still fill its open
        // aggregates).
        if aggregate.is_none() && planner.parts() >= MAX_CALL_ENTRIES {
            break;
        }
        planner.add(i);
    }
    planner.finish()
}

/// An aggregate being filled for one shard.
struct Open<'a> {
    agg: Aggregator,
    members: Vec<usize>,
    keys: HashSet<&'a str>,
}

struct Planner<'a> {
    entries: &'a [PutEntry],
    aggregate: Option<Aggregation<'a>>,
    call: Call,
    /// Bytes of the call's finished entries.
    bytes: usize,
    /// Bytes the open aggregates take.
    open_bytes: usize,
    /// Keys with an entry in the call (finished or open).
    used: HashSet<&'a str>,
    /// Keys left out of the call: none of their later records may go in.
    blocked: HashSet<&'a str>,
    /// Open aggregates by shard index.
    open: BTreeMap<usize, Open<'a>>,
}

impl<'a> Planner<'a> {
    fn parts(&self) -> usize {
        self.call.parts.len() + self.open.len()
    }

    fn fits(&self, bytes: usize) -> bool {
        self.bytes + self.open_bytes + bytes <= MAX_CALL_BYTES
    }

    fn add(&mut self, i: usize) {
        let entry = &self.entries[i];
        let key = entry.partition_key.as_str();
        if self.blocked.contains(key) {
            return;
        }
        let Some(Aggregation { map, limit, hashes }) = self.aggregate else {
            return self.add_plain(i);
        };
        let Some(shard) = map.shard_of(hashes[i]) else {
            // No open shard is known for it (a map listed mid-reshard, or none could be
            // listed): put it plain, where Kinesis routes it.
            return self.add_plain(i);
        };
        let in_open = self
            .open
            .get(&shard)
            .is_some_and(|open| open.keys.contains(key));
        if self.used.contains(key) && !in_open {
            self.blocked.insert(key);
            return;
        }
        if !self.open.contains_key(&shard) {
            if self.parts() >= MAX_CALL_ENTRIES {
                self.blocked.insert(key);
                return;
            }
            self.open.insert(
                shard,
                Open {
                    agg: Aggregator::with_limit(limit),
                    members: Vec::new(),
                    keys: HashSet::new(),
                },
            );
        }
        // What one more sub-record can add at most: its data, its key in the table and (for
        // the first) as the aggregate's own partition key, an explicit hash key (39 digits),
        // the magic and trailer (for the first), and protobuf tags and lengths.
        let most = entry.payload.len() + 2 * key.len() + 96;
        if !self.fits(most) {
            self.drop_if_empty(shard);
            self.blocked.insert(key);
            return;
        }
        let ehk = entry.explicit_hash_key.map(|h| h.to_string());
        let open = self.open.get_mut(&shard).expect("inserted above");
        let before = open.agg.size();
        match open.agg.push(key, ehk.as_deref(), entry.payload.clone()) {
            Ok(Pushed::Added) => {
                self.open_bytes += open.agg.size() - before;
                open.members.push(i);
                open.keys.insert(key);
                self.used.insert(key);
            }
            Ok(Pushed::Full) => {
                // Finish this shard's aggregate into the call; the record then starts the next
                // one (or waits, when its key is in the finished one).
                let mut done = self.open.remove(&shard).expect("present");
                self.open_bytes -= before;
                if let Some(record) = done.agg.finish() {
                    self.bytes += record.size();
                    let id = map.id(shard).to_owned();
                    self.push_aggregate(record, done.members, id);
                }
                self.add(i);
            }
            // Too large to aggregate: put it plain, if it fits a record at all (Kinesis
            // refuses it otherwise, naming it).
            Err(_) => {
                self.drop_if_empty(shard);
                self.add_plain(i);
            }
        }
    }

    fn drop_if_empty(&mut self, shard: usize) {
        if self.open.get(&shard).is_some_and(|o| o.members.is_empty()) {
            self.open.remove(&shard);
        }
    }

    fn add_plain(&mut self, i: usize) {
        let entry = &self.entries[i];
        let key = entry.partition_key.as_str();
        let size = entry.payload.len() + key.len();
        if self.used.contains(key) || self.parts() >= MAX_CALL_ENTRIES || !self.fits(size) {
            self.blocked.insert(key);
            return;
        }
        self.bytes += size;
        self.used.insert(key);
        self.call.parts.push(Part::Plain(i));
        self.call.request.push(entry.clone());
    }

    fn push_aggregate(&mut self, record: AggregatedEntry, entries: Vec<usize>, shard: String) {
        self.call.request.push(
            PutEntry::new(record.data, record.partition_key)
                .with_hash_key(record.explicit_hash_key),
        );
        self.call.parts.push(Part::Aggregate { entries, shard });
    }

    fn finish(mut self) -> Call {
        let open = std::mem::take(&mut self.open);
        for (shard, mut open) in open {
            if let Some(record) = open.agg.finish() {
                let id = match self.aggregate {
                    Some(a) => a.map.id(shard).to_owned(),
                    None => String::new(),
                };
                self.push_aggregate(record, open.members, id);
            }
        }
        self.call
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn entry(key: &str, bytes: usize) -> PutEntry {
        PutEntry::new(Bytes::from(vec![b'x'; bytes]), key)
    }

    fn plain_indexes(call: &Call) -> Vec<usize> {
        call.parts
            .iter()
            .map(|p| match p {
                Part::Plain(i) => *i,
                Part::Aggregate { .. } => panic!("plain expected"),
            })
            .collect()
    }

    /// The next call over `remaining`, aggregating with `map` up to `limit` bytes each.
    fn aggregated(
        entries: &[PutEntry],
        remaining: Vec<usize>,
        map: &ShardMap,
        limit: usize,
    ) -> Call {
        let hashes = hashes(entries);
        let how = Aggregation {
            map,
            limit,
            hashes: &hashes,
        };
        plan_call(entries, remaining, Some(how))
    }

    fn two_shards() -> ShardMap {
        let half = u128::MAX / 2;
        ShardMap {
            ranges: vec![
                (0, half, "low".into()),
                (half + 1, u128::MAX, "high".into()),
            ],
        }
    }

    #[test]
    fn a_key_appears_once_per_call_and_its_later_records_wait() {
        let entries = vec![
            entry("a", 1),
            entry("b", 1),
            entry("a", 1),
            entry("c", 1),
            entry("b", 1),
        ];
        let all: Vec<usize> = (0..entries.len()).collect();
        let call = plan_call(&entries, all, None);
        assert_eq!(plain_indexes(&call), [0, 1, 3]);
        // Entry 0 failed: it goes again before entry 2 (same key), which keeps waiting.
        let call = plan_call(&entries, [0, 2, 4], None);
        assert_eq!(plain_indexes(&call), [0, 4]);
    }

    #[test]
    fn a_call_holds_at_most_500_entries_and_5_mib() {
        let many: Vec<PutEntry> = (0..600).map(|i| entry(&format!("k{i}"), 10)).collect();
        let all: Vec<usize> = (0..many.len()).collect();
        assert_eq!(plan_call(&many, all, None).parts.len(), MAX_CALL_ENTRIES);
        let big: Vec<PutEntry> = (0..8).map(|i| entry(&format!("k{i}"), 1_000_000)).collect();
        let all: Vec<usize> = (0..big.len()).collect();
        let call = plan_call(&big, all, None);
        assert_eq!(call.parts.len(), 5);
        let bytes: usize = call
            .request
            .iter()
            .map(|e| e.payload.len() + e.partition_key.len())
            .sum();
        assert!(bytes <= MAX_CALL_BYTES);
    }

    #[test]
    fn long_keys_never_take_a_call_of_aggregates_past_5_mib() {
        let map = ShardMap {
            ranges: vec![(0, u128::MAX, "only".into())],
        };
        let entries: Vec<PutEntry> = (0..7)
            .map(|i| entry(&format!("{i}{}", "k".repeat(255)), 873_275))
            .collect();
        let all: Vec<usize> = (0..entries.len()).collect();
        let call = aggregated(&entries, all, &map, kinesis_kpl::MAX_RECORD_BYTES);
        let bytes: usize = call
            .request
            .iter()
            .map(|e| e.payload.len() + e.partition_key.len())
            .sum();
        assert!(bytes <= MAX_CALL_BYTES, "{bytes} bytes");
        assert!(!call.parts.is_empty());
    }

    #[test]
    fn queues_give_each_key_s_first_waiting_record() {
        let entries = vec![entry("a", 1), entry("b", 1), entry("a", 1), entry("b", 1)];
        let mut queues = Queues::new(&entries);
        let heads = |q: &Queues| q.heads().collect::<Vec<_>>();
        assert_eq!(heads(&queues), [0, 1]);
        queues.stored(&[1]);
        assert_eq!(heads(&queues), [0, 3]);
        assert_eq!(
            (queues.all().collect::<Vec<_>>(), queues.waiting()),
            (vec![0, 2, 3], 3)
        );
        queues.stored(&[0]);
        assert_eq!(heads(&queues), [2, 3]);
        // An aggregate stores a prefix of a key's records at once.
        queues.stored(&[2, 3]);
        assert_eq!(queues.waiting(), 0);
    }

    #[test]
    fn aggregates_gather_each_shard_s_records_in_order() {
        let map = two_shards();
        let entries: Vec<PutEntry> = (0..40).map(|i| entry(&format!("k{}", i % 8), 10)).collect();
        let all: Vec<usize> = (0..entries.len()).collect();
        let call = aggregated(&entries, all.clone(), &map, kinesis_kpl::MAX_RECORD_BYTES);
        assert_eq!(call.parts.len(), call.request.len());
        let mut seen = Vec::new();
        for (part, request) in call.parts.iter().zip(&call.request) {
            let Part::Aggregate {
                entries: members,
                shard,
            } = part
            else {
                panic!("aggregate expected");
            };
            for &m in members {
                let hash = kinesis_kpl::partition_key_hash(&entries[m].partition_key);
                assert_eq!(map.shard_of(hash).map(|s| map.id(s)), Some(shard.as_str()));
            }
            assert!(members.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(
                map.shard_of(request.explicit_hash_key.unwrap())
                    .map(|s| map.id(s)),
                Some(shard.as_str())
            );
            seen.extend(members.iter().copied());
        }
        seen.sort_unstable();
        assert_eq!(seen, all, "every record in one aggregate of this call");
    }

    #[test]
    fn a_key_split_over_two_aggregates_waits_for_the_next_call() {
        let map = ShardMap {
            ranges: vec![(0, u128::MAX, "only".into())],
        };
        // Aggregates of at most ~1 KB: "a" fills the first, so its third record would land in
        // a second aggregate of the same call: it waits, and "b" after it still goes.
        let entries = vec![
            entry("a", 500),
            entry("a", 400),
            entry("a", 300),
            entry("b", 300),
        ];
        let all: Vec<usize> = (0..entries.len()).collect();
        let call = aggregated(&entries, all, &map, 1_024);
        let members: Vec<Vec<usize>> = call
            .parts
            .iter()
            .map(|p| match p {
                Part::Aggregate { entries, .. } => entries.clone(),
                Part::Plain(i) => vec![*i],
            })
            .collect();
        assert_eq!(members, [vec![0, 1], vec![3]]);
    }

    #[test]
    fn a_record_too_large_to_aggregate_goes_plain() {
        let map = two_shards();
        let entries = vec![entry("a", 2_000), entry("b", 10)];
        let all: Vec<usize> = (0..entries.len()).collect();
        let call = aggregated(&entries, all, &map, 1_024);
        assert!(matches!(call.parts[0], Part::Plain(0)));
        assert!(matches!(&call.parts[1], Part::Aggregate { entries, .. } if entries == &[1]));
    }

    #[test]
    fn the_shard_map_finds_the_open_shard_of_a_hash() {
        let map = two_shards();
        let id = |h| map.shard_of(h).map(|s| map.id(s));
        assert_eq!(id(0), Some("low"));
        assert_eq!(id(u128::MAX / 2), Some("low"));
        assert_eq!(id(u128::MAX / 2 + 1), Some("high"));
        assert_eq!(id(u128::MAX), Some("high"));
        assert_eq!(ShardMap::default().shard_of(5), None);
    }
}
