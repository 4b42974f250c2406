//! [`Billed`]: a lease-store decorator that tallies what DynamoDB would bill for the same
//! calls made through [`DynamoLeaseStore`](crate::DynamoLeaseStore), for cost benchmarks of
//! whole fleets in one process (over a `MemoryLeaseStore`, say) without a DynamoDB endpoint.
//!
//! Each `LeaseStore` call is billed as the requests `DynamoLeaseStore` sends for it, with
//! item sizes computed as DynamoDB computes them (attribute names plus values; a number's
//! size from its digits):
//!
//! | call | requests | billed |
//! | --- | --- | --- |
//! | `read` | consistent GetItem of the row | size / 4 KB rounded up, 1 RCU at least |
//! | `read_eventually` | eventually consistent GetItem of the row | half of `read`'s |
//! | `list` | consistent GetItem of the index header, consistent BatchGetItem of its pages, then of every row | each item's own units, rounded up to 4 KB |
//! | `epoch` | eventually consistent GetItem of the epoch row | 0.5 (a small item of its own, read at half price) |
//! | `take`, `renew`, `checkpoint`, `release`, `request`, `hand_over` | conditional UpdateItem | the row's size / 1 KB rounded up, written or not (a failed condition is billed too) |
//! | `create` | UpdateItem of the shard's page (ADD; and of the header, when this store has not seen the page named), PutItem of the row, UpdateItem of the page again | each item's size / 1 KB rounded up; the header's first read, once per store and stream |
//! | `epochs` | eventually consistent GetItem of the stream's epoch row | 0.5 |
//! | `bump_epoch` | UpdateItem of the epoch row (and of the stream's, for a roster's) | 1 each |
//! | `delete` | TransactWriteItems: conditional Delete of the row, Update of its page (DELETE) | twice each item's size / 1 KB rounded up (a transaction bills two units per KB; the page only when the row went) |
//!
//! Retries are not counted: a throttled request is not billed, and the decorator cannot see a
//! lost response. The index is billed as a table this release created lays it out (a paged
//! header, see the crate docs); its items' sizes follow the shard ids the decorated stores
//! created.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinesis_lease_core::{
    BoxFuture, Checkpoint, Holder, Lease, LeaseKey, LeaseResult, LeaseStore, Load, Outcome, Take,
};

use crate::item::{
    index_key, CAPACITY_MILLI, CHECKPOINT, COUNTER, EPOCH, EXPIRY, FORMAT, KEY, LOAD_BUSY_MS,
    LOAD_BYTES, LOAD_POKES, LOAD_RECORDS, LOAD_SHARDS, OWNER, PAGES, PARENTS, POKED, POKED_AT,
    POKES, REPOSITIONED, ROSTER_EPOCH, SHARDS, SUBSEQUENCE, TOKEN, WANTED_BY, WRITE_ID,
};
use crate::pages::{page_key, page_of, PAGED_FORMAT};

/// Read and write units and item counts, as DynamoDB would bill them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Bill {
    /// Read capacity units (consistent reads: 1 per 4 KB of each item).
    pub read_units: f64,
    /// Write capacity units (1 per 1 KB of each item written or conditionally refused).
    pub write_units: f64,
    /// Items read (an index header or page, each row of a list, a row read).
    pub items_read: u64,
    /// Read requests (GetItem, BatchGetItem).
    pub read_requests: u64,
    /// Write requests (UpdateItem, PutItem).
    pub write_requests: u64,
    /// The largest item read or written, in bytes.
    pub largest_item: usize,
}

#[derive(Debug, Default)]
struct Meter {
    bill: Bill,
    /// Per stream, its index's pages (named in the header) and the shard ids each lists.
    index: HashMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Per stream, the epoch counter's value (its size counts).
    epochs: HashMap<String, u64>,
    /// Read units per kind of call (see [`Billed::reads_by_call`]).
    reads_by_call: BTreeMap<&'static str, f64>,
}

/// Wraps a store and bills its calls as DynamoDB would bill [`DynamoLeaseStore`]'s; clones
/// share one bill, so every store of a simulated fleet can add to it.
///
/// [`DynamoLeaseStore`]: crate::DynamoLeaseStore
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use kinesis_lease_core::LeaseStore;
/// use kinesis_lease_dynamo::{Billed, BilledStore};
///
/// /// Two brokers' stores over one table, billed together.
/// fn billed_pair(a: Arc<dyn LeaseStore>, b: Arc<dyn LeaseStore>) -> (Billed, BilledStore, BilledStore) {
///     let billed = Billed::new();
///     let (one, two) = (billed.wrap(a), billed.wrap(b));
///     // ... run two brokers on `one` and `two`, then read `billed.bill().read_units` ...
///     assert_eq!(billed.bill().read_units, 0.0);
///     (billed, one, two)
/// }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Billed {
    meter: Arc<Mutex<Meter>>,
}

/// A store whose calls are added to a [`Billed`]'s bill.
#[derive(Debug, Clone)]
pub struct BilledStore {
    inner: Arc<dyn LeaseStore>,
    meter: Arc<Mutex<Meter>>,
    /// What this store, as one process's `DynamoLeaseStore`, has seen of index headers.
    seen: Arc<Mutex<Seen>>,
}

/// Streams whose header a store read, and pages it saw named.
#[derive(Debug, Default)]
struct Seen {
    streams: HashSet<String>,
    pages: HashSet<(String, String)>,
}

impl Seen {
    /// Every page `stream`'s header names now, as a read of it tells the store.
    fn saw_header(&mut self, meter: &Meter, stream: &str) {
        let named = meter.index.get(stream).into_iter().flat_map(|p| p.keys());
        self.pages
            .extend(named.map(|page| (stream.to_owned(), page.clone())));
    }

    /// Bills the header's first read by this store (`DynamoLeaseStore` reads it once, to learn
    /// its format and pages).
    fn first_header_read(&mut self, meter: &mut Meter, stream: &str) {
        if self.streams.insert(stream.to_owned()) {
            meter.read_header(stream);
            self.saw_header(meter, stream);
        }
    }
}

impl Billed {
    /// An empty bill.
    pub fn new() -> Self {
        Self::default()
    }

    /// `inner`, billing its calls here.
    pub fn wrap(&self, inner: Arc<dyn LeaseStore>) -> BilledStore {
        BilledStore {
            inner,
            meter: self.meter.clone(),
            seen: Arc::default(),
        }
    }

    /// The bill so far.
    pub fn bill(&self) -> Bill {
        self.meter.lock().unwrap_or_else(|p| p.into_inner()).bill
    }

    /// Read units so far per kind of call: `list` and `list members` (a listing of shard rows
    /// or of member rows), `read` and `read member` (consistent), `read eventually` and
    /// `read member eventually`, and `epoch` (either epoch read): where a fleet's reads go.
    pub fn reads_by_call(&self) -> BTreeMap<&'static str, f64> {
        let meter = self.meter.lock().unwrap_or_else(|p| p.into_inner());
        meter.reads_by_call.clone()
    }

    /// The size of the largest item of `stream`'s index now (its header or a page), in bytes.
    pub fn index_size(&self, stream: &str) -> usize {
        let meter = self.meter.lock().unwrap_or_else(|p| p.into_inner());
        meter.index_size(stream)
    }
}

/// The size DynamoDB counts for a number: about one byte per two significant digits, plus one.
fn number_size(v: u64) -> usize {
    let digits = v.max(1).ilog10() as usize + 1;
    digits.div_ceil(2) + 1
}

fn string(name: &str, value: &str) -> usize {
    name.len() + value.len()
}

fn number(name: &str, value: u64) -> usize {
    name.len() + number_size(value)
}

/// The size of `row`'s item as `DynamoLeaseStore` writes it (a write id included).
pub(crate) fn row_size(row: &Lease) -> usize {
    let mut size = string(KEY, &row.key.to_string())
        + number(COUNTER, row.counter)
        + number(EXPIRY, row.expiry_ms)
        + string(WRITE_ID, &"0".repeat(32));
    if row.pokes > 0 {
        size += number(POKES, row.pokes);
    }
    size += row.poked.as_deref().map_or(0, |p| string(POKED, p));
    if row.poked_at > 0 {
        size += number(POKED_AT, row.poked_at);
    }
    size += row.owner.as_deref().map_or(0, |o| string(OWNER, o));
    size += row.token.as_deref().map_or(0, |t| string(TOKEN, t));
    size += row.wanted_by.as_deref().map_or(0, |w| string(WANTED_BY, w));
    size += row
        .repositioned
        .as_deref()
        .map_or(0, |r| string(REPOSITIONED, r));
    if !row.parents.is_empty() {
        size += PARENTS.len() + row.parents.iter().map(String::len).sum::<usize>();
    }
    if let Some(load) = &row.load {
        size += number(LOAD_RECORDS, load.records_per_min)
            + number(LOAD_BYTES, load.bytes_per_min)
            + number(LOAD_BUSY_MS, load.busy_ms_per_min);
        size += load
            .capacity_milli
            .map_or(0, |capacity| number(CAPACITY_MILLI, capacity));
        size += load.shards.map_or(0, |shards| number(LOAD_SHARDS, shards));
        size += load.pokes_seen.map_or(0, |pokes| number(LOAD_POKES, pokes));
    }
    if let Some(cp) = &row.checkpoint {
        size += string(CHECKPOINT, &cp.stored());
        size += cp.subsequence().map_or(0, |sub| number(SUBSEQUENCE, sub));
    }
    size
}

fn read_units(size: usize) -> f64 {
    size.div_ceil(4_096).max(1) as f64
}

fn write_units(size: usize) -> f64 {
    size.div_ceil(1_024).max(1) as f64
}

impl Meter {
    fn header_size(&self, stream: &str) -> usize {
        let mut size = string(KEY, &index_key(stream)) + number(FORMAT, PAGED_FORMAT);
        if let Some(pages) = self.index.get(stream).filter(|p| !p.is_empty()) {
            size += PAGES.len() + pages.keys().map(String::len).sum::<usize>();
        }
        size
    }

    fn page_size(&self, stream: &str, page: &str) -> usize {
        let mut size = string(KEY, &page_key(stream, page));
        if let Some(shards) = self
            .index
            .get(stream)
            .and_then(|p| p.get(page))
            .filter(|s| !s.is_empty())
        {
            size += SHARDS.len() + shards.iter().map(String::len).sum::<usize>();
        }
        size
    }

    fn index_size(&self, stream: &str) -> usize {
        let pages = self.index.get(stream).into_iter().flat_map(|p| p.keys());
        pages
            .map(|page| self.page_size(stream, page))
            .fold(self.header_size(stream), usize::max)
    }

    /// The size of `stream`'s epoch item: its key, its epoch, and its count of roster bumps
    /// once there is one.
    fn epoch_size(&self, stream: &str) -> usize {
        let roster = self
            .epochs
            .get(&LeaseKey::members_stream(stream))
            .copied()
            .unwrap_or(0);
        string(KEY, &format!("{stream}:*epoch"))
            + number(EPOCH, self.epochs.get(stream).copied().unwrap_or(0))
            + if roster > 0 {
                number(ROSTER_EPOCH, roster)
            } else {
                0
            }
    }

    /// Adds the read units billed since `before` to `kind`'s tally.
    fn tally(&mut self, kind: &'static str, before: f64) {
        *self.reads_by_call.entry(kind).or_default() += self.bill.read_units - before;
    }

    fn read_item(&mut self, size: usize) {
        self.bill.read_units += read_units(size);
        self.bill.items_read += 1;
        self.bill.largest_item = self.bill.largest_item.max(size);
    }

    /// An eventually consistent read: half the units of a consistent one.
    fn read_item_eventually(&mut self, size: usize) {
        self.read_item(size);
        self.bill.read_units -= read_units(size) / 2.0;
    }

    fn write_item(&mut self, size: usize) {
        self.bill.write_units += write_units(size);
        self.bill.write_requests += 1;
        self.bill.largest_item = self.bill.largest_item.max(size);
    }

    /// A listing's reads of the index: the header, then every page it names.
    fn read_index(&mut self, stream: &str) {
        let header = self.header_size(stream);
        self.bill.read_requests += 1;
        self.read_item(header);
        let pages: Vec<String> = self
            .index
            .get(stream)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        self.bill.read_requests += pages.len().div_ceil(100) as u64;
        for page in pages {
            let size = self.page_size(stream, &page);
            self.read_item(size);
        }
    }

    /// The header's first read by a store (`DynamoLeaseStore` learns the format once).
    fn read_header(&mut self, stream: &str) {
        let size = self.header_size(stream);
        self.bill.read_requests += 1;
        self.read_item(size);
    }

    /// Adds `key`'s shard to its page (writing the header first when `name_page`).
    fn add_to_index(&mut self, key: &LeaseKey, name_page: bool) {
        let page = page_of(key.shard());
        self.index
            .entry(key.stream().to_owned())
            .or_default()
            .entry(page.clone())
            .or_default()
            .insert(key.shard().to_owned());
        if name_page {
            let size = self.header_size(key.stream());
            self.write_item(size);
        }
        let size = self.page_size(key.stream(), &page);
        self.write_item(size);
    }
}

impl BilledStore {
    fn meter(&self) -> std::sync::MutexGuard<'_, Meter> {
        self.meter.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bills what `DynamoLeaseStore::index_add` sends for `key`.
    fn bill_index_add(&self, key: &LeaseKey) {
        let mut meter = self.meter();
        let mut seen = self.seen();
        seen.first_header_read(&mut meter, key.stream());
        let named = seen
            .pages
            .insert((key.stream().to_owned(), page_of(key.shard())));
        meter.add_to_index(key, named);
    }

    /// Bills one conditional UpdateItem of `key`'s row: the row as written, or as it stands
    /// when the condition failed.
    async fn bill_update(&self, key: &LeaseKey, outcome: &LeaseResult<Outcome>) {
        let size = match outcome {
            Ok(Outcome::Written(row)) => Some(row_size(row)),
            Ok(Outcome::Lost(_)) => match self.inner.read(key).await {
                Ok(Some(row)) => Some(row_size(&row)),
                // A condition on a missing row: the minimum.
                Ok(None) => Some(0),
                Err(_) => None,
            },
            Err(_) => None,
        };
        if let Some(size) = size {
            self.meter().write_item(size);
        }
    }
}

impl LeaseStore for BilledStore {
    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let member = match poke {
                Some(member) => self.inner.read(member).await.ok().flatten(),
                None => None,
            };
            let outcome = self.inner.evict(key, observed, checkpoint, poke).await;
            self.bill_update(key, &outcome).await;
            if let Some(member) = member {
                // In a transaction with the row: both items billed twice, and the row read
                // back once.
                let mut meter = self.meter();
                meter.write_item(row_size(&member));
                meter.write_item(row_size(&member));
                if let Ok(Outcome::Written(row)) = &outcome {
                    meter.write_item(row_size(row));
                    meter.read_item(row_size(row));
                }
            }
            outcome
        })
    }

    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let row = self.inner.read(member).await.ok().flatten();
            let poked = self.inner.poke(member, about).await;
            if poked.is_ok() {
                let size = row.as_ref().map_or(0, row_size);
                self.meter().write_item(size);
            }
            poked
        })
    }

    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let before = self.inner.read(key).await.ok().flatten();
            let deleted = self.inner.delete(key, observed).await;
            if let Ok(deleted) = &deleted {
                let mut meter = self.meter();
                // A transactional write is billed twice per KB, refused or not.
                let row = before.as_ref().map_or(0, row_size);
                meter.write_item(row);
                meter.write_item(row);
                self.seen().first_header_read(&mut meter, key.stream());
                if *deleted {
                    let page = page_of(key.shard());
                    if let Some(shards) = meter
                        .index
                        .get_mut(key.stream())
                        .and_then(|p| p.get_mut(&page))
                    {
                        shards.remove(key.shard());
                    }
                    let size = meter.page_size(key.stream(), &page);
                    meter.write_item(size);
                    meter.write_item(size);
                }
            }
            deleted
        })
    }

    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let created = self.inner.create(row).await;
            if created.is_ok() {
                self.bill_index_add(&row.key);
                let mut fresh = row.clone();
                fresh.counter = 1;
                self.meter().write_item(row_size(&fresh));
                if *created.as_ref().unwrap_or(&false) {
                    self.bill_index_add(&row.key);
                }
            }
            created
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.take(key, holder, take).await;
            self.bill_update(key, &outcome).await;
            if matches!(&outcome, Ok(Outcome::Written(row)) if row.counter == 1) {
                self.bill_index_add(key);
            }
            outcome
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.renew(key, holder, ttl, checkpoint).await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self
                .inner
                .renew_with_load(key, holder, ttl, checkpoint, load)
                .await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.checkpoint(key, holder, checkpoint).await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.release(key, holder, checkpoint).await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.request(key, asker, holder).await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let outcome = self.inner.hand_over(key, holder, to, ttl, checkpoint).await;
            self.bill_update(key, &outcome).await;
            outcome
        })
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(async move {
            let bumped = self.inner.bump_epoch(stream).await;
            if bumped.is_ok() {
                let mut meter = self.meter();
                *meter.epochs.entry(stream.to_owned()).or_default() += 1;
                let size = meter.epoch_size(stream);
                meter.write_item(size);
                // A roster's bump is counted in its stream's epoch item too.
                if let Some(base) = LeaseKey::roster_of(stream) {
                    let size = meter.epoch_size(base);
                    meter.write_item(size);
                }
            }
            bumped
        })
    }

    fn epochs<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, LeaseResult<kinesis_lease_core::Epochs>> {
        Box::pin(async move {
            let epochs = self.inner.epochs(stream).await;
            if epochs.is_ok() {
                let mut meter = self.meter();
                let before = meter.bill.read_units;
                let size = meter.epoch_size(stream);
                meter.bill.read_requests += 1;
                meter.read_item_eventually(size);
                meter.tally("epoch", before);
            }
            epochs
        })
    }

    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        Box::pin(async move {
            let epoch = self.inner.epoch(stream).await;
            if epoch.is_ok() {
                let mut meter = self.meter();
                let before = meter.bill.read_units;
                let size = meter.epoch_size(stream);
                meter.bill.read_requests += 1;
                meter.read_item_eventually(size);
                meter.tally("epoch", before);
            }
            epoch
        })
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            let row = self.inner.read(key).await;
            if let Ok(row) = &row {
                let mut meter = self.meter();
                let before = meter.bill.read_units;
                meter.bill.read_requests += 1;
                meter.read_item(row.as_ref().map_or(0, row_size));
                let member = LeaseKey::roster_of(key.stream()).is_some();
                meter.tally(if member { "read member" } else { "read" }, before);
            }
            row
        })
    }

    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            let row = self.inner.read_eventually(key).await;
            if let Ok(row) = &row {
                let mut meter = self.meter();
                let before = meter.bill.read_units;
                meter.bill.read_requests += 1;
                meter.read_item_eventually(row.as_ref().map_or(0, row_size));
                let member = LeaseKey::roster_of(key.stream()).is_some();
                let kind = if member {
                    "read member eventually"
                } else {
                    "read eventually"
                };
                meter.tally(kind, before);
            }
            row
        })
    }

    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        Box::pin(async move {
            let rows = self.inner.list(stream).await;
            if let Ok(rows) = &rows {
                let mut meter = self.meter();
                let before = meter.bill.read_units;
                meter.read_index(stream);
                // The listing's header read tells the store every page named there.
                let mut seen = self.seen();
                seen.streams.insert(stream.to_owned());
                seen.saw_header(&meter, stream);
                drop(seen);
                meter.bill.read_requests += rows.len().div_ceil(100) as u64;
                for row in rows {
                    meter.read_item(row_size(row));
                }
                let members = LeaseKey::roster_of(stream).is_some();
                meter.tally(if members { "list members" } else { "list" }, before);
            }
            rows
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_sized_by_their_digits() {
        assert_eq!(number_size(0), 2);
        assert_eq!(number_size(7), 2);
        assert_eq!(number_size(12), 2);
        assert_eq!(number_size(123), 3);
        assert_eq!(number_size(1_700_000_000_000), 8);
    }

    #[test]
    fn units_round_up_per_item() {
        assert_eq!(read_units(0), 1.0);
        assert_eq!(read_units(4_096), 1.0);
        assert_eq!(read_units(4_097), 2.0);
        assert_eq!(write_units(1), 1.0);
        assert_eq!(write_units(1_025), 2.0);
    }

    #[test]
    fn a_held_row_is_a_few_hundred_bytes() {
        let mut row = Lease::new(
            LeaseKey::new("orders", "shardId-000000000042").unwrap(),
            vec!["shardId-000000000007".into()],
        );
        row.owner = Some("host-1234-abcdef".into());
        row.token = Some("0123456789abcdef0123456789abcdef".into());
        row.counter = 12_345;
        row.expiry_ms = 1_700_000_000_000;
        row.checkpoint = Some(
            Checkpoint::sequence("49590338271490256608559692538361571095921575989136588898")
                .unwrap(),
        );
        let size = row_size(&row);
        assert!((200..400).contains(&size), "{size}");
        assert_eq!(read_units(size), 1.0);
        assert_eq!(write_units(size), 1.0);
    }
}
