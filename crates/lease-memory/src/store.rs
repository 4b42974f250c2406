//! `MemoryLeaseStore`: the `LeaseStore` rules evaluated under one lock.

use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::{
    duration_ms, rules, BoxFuture, Checkpoint, Clock, Holder, Lease, LeaseKey, LeaseResult,
    LeaseStore, Load, Outcome, SystemClock, Take,
};

use crate::MemoryLeaseTable;

/// A [`LeaseStore`] over a [`MemoryLeaseTable`]; see the crate docs for what it is good for.
///
/// # Examples
///
/// ```
/// use kinesis_lease_core::{Holder, LeaseKey, LeaseStore, Take};
/// use kinesis_lease_memory::MemoryLeaseStore;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryLeaseStore::new();
/// let key = LeaseKey::new("orders", "shardId-000000000000")?;
/// let me = Holder::new("me", "token-1");
/// // Fenced on counter 0: the row does not exist yet, so this take creates it.
/// let taken = store.take(&key, &me, &Take::fenced(Duration::from_secs(10), 0)).await?;
/// assert!(taken.is_written());
/// # Ok::<(), kinesis_lease_core::LeaseError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MemoryLeaseStore {
    table: MemoryLeaseTable,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryLeaseStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLeaseStore {
    /// A store over a table of its own, on the system clock.
    pub fn new() -> Self {
        Self::over(&MemoryLeaseTable::new())
    }

    /// A store over a shared table, on the system clock.
    pub fn over(table: &MemoryLeaseTable) -> Self {
        Self {
            table: table.clone(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same store reading "now" from `clock` (tests inject a `ManualClock`).
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The table this store writes to.
    pub fn table(&self) -> &MemoryLeaseTable {
        &self.table
    }

    /// Runs one conditional write: `allowed` judges the current row, `apply` edits it.
    fn write(
        &self,
        key: &LeaseKey,
        allowed: impl FnOnce(Option<&Lease>, u64) -> bool,
        apply: impl FnOnce(&mut Lease, u64),
    ) -> Outcome {
        let now = self.clock.now_ms();
        let mut rows = self.table.lock();
        let stream = rows.entry(key.stream().to_owned()).or_default();
        let row = stream.get(key.shard());
        if !allowed(row, now) {
            return Outcome::Lost(rules::lost(row));
        }
        let row = stream
            .entry(key.shard().to_owned())
            .or_insert_with(|| Lease::new(key.clone(), Vec::new()));
        apply(row, now);
        row.counter += 1;
        Outcome::Written(row.clone())
    }

    fn held_write(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        apply: impl FnOnce(&mut Lease, u64),
    ) -> Outcome {
        self.write(key, |row, _| rules::holds(row, holder), apply)
    }

    /// A renewal: the expiry moves, and the checkpoint and the load are stored when given.
    fn renewal(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        ttl: Duration,
        checkpoint: Option<&Checkpoint>,
        load: Option<&Load>,
    ) -> Outcome {
        self.held_write(key, holder, |row, now| {
            row.expiry_ms = now.saturating_add(duration_ms(ttl));
            if let Some(cp) = checkpoint {
                row.checkpoint = Some(cp.clone());
            }
            if let Some(load) = load {
                row.load = Some(*load);
            }
        })
    }
}

impl LeaseStore for MemoryLeaseStore {
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let mut rows = self.table.lock();
            let Some(stream) = rows.get_mut(key.stream()) else {
                return Ok(false);
            };
            if !rules::may_delete(stream.get(key.shard()), observed) {
                return Ok(false);
            }
            stream.remove(key.shard());
            Ok(true)
        })
    }

    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let key = &row.key;
            let mut rows = self.table.lock();
            let stream = rows.entry(key.stream().to_owned()).or_default();
            if stream.contains_key(key.shard()) {
                return Ok(false);
            }
            let mut new = Lease::new(key.clone(), row.parents.clone());
            new.checkpoint = row.checkpoint.clone();
            new.repositioned = row.repositioned.clone();
            new.counter = 1;
            stream.insert(key.shard().to_owned(), new);
            Ok(true)
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            Ok(self.write(
                key,
                |row, _| rules::may_take(row, take),
                |row, now| {
                    row.owner = Some(holder.owner.clone());
                    row.token = Some(holder.token.clone());
                    row.expiry_ms = now.saturating_add(duration_ms(take.ttl));
                    row.wanted_by = None;
                    if let Some(cp) = &take.checkpoint {
                        row.checkpoint = Some(cp.clone());
                    }
                    if let Some(marker) = &take.repositioned {
                        row.repositioned = Some(marker.clone());
                    }
                },
            ))
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move { Ok(self.renewal(key, holder, ttl, checkpoint, None)) })
    }

    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move { Ok(self.renewal(key, holder, ttl, checkpoint, Some(load))) })
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            Ok(self.held_write(key, holder, |row, _| {
                row.checkpoint = Some(checkpoint.clone());
            }))
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            Ok(self.held_write(key, holder, |row, _| {
                row.owner = None;
                row.token = None;
                row.expiry_ms = 0;
                row.wanted_by = None;
                if let Some(cp) = checkpoint {
                    row.checkpoint = Some(cp.clone());
                }
            }))
        })
    }

    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            // The row and the poke under one lock: one write, as the rules ask.
            let mut rows = self.table.lock();
            let row = rows.get(key.stream()).and_then(|s| s.get(key.shard()));
            if !rules::may_evict(row, observed) {
                return Ok(Outcome::Lost(rules::lost(row)));
            }
            if let Some(member) = poke {
                if let Some(m) = rows
                    .get_mut(member.stream())
                    .and_then(|s| s.get_mut(member.shard()))
                {
                    rules::poked(m, key);
                }
            }
            let Some(row) = rows
                .get_mut(key.stream())
                .and_then(|s| s.get_mut(key.shard()))
            else {
                // Unreachable: `may_evict` holds only for a row that exists.
                return Ok(Outcome::Lost(rules::lost(None)));
            };
            rules::evicted(row, checkpoint);
            row.counter += 1;
            Ok(Outcome::Written(row.clone()))
        })
    }

    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let mut rows = self.table.lock();
            match rows
                .get_mut(member.stream())
                .and_then(|s| s.get_mut(member.shard()))
            {
                Some(row) => {
                    rules::poked(row, about);
                    Ok(true)
                }
                None => Ok(false),
            }
        })
    }

    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            Ok(self.write(
                key,
                |row, _| rules::may_request(row, asker, holder),
                |row, _| row.wanted_by = Some(asker.to_owned()),
            ))
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
            Ok(self.write(
                key,
                |row, _| rules::may_hand_over(row, holder, to),
                |row, now| {
                    row.owner = Some(to.to_owned());
                    row.token = None;
                    row.expiry_ms = now.saturating_add(duration_ms(ttl));
                    row.wanted_by = None;
                    if let Some(cp) = checkpoint {
                        row.checkpoint = Some(cp.clone());
                    }
                },
            ))
        })
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(async move {
            *self.table.epochs().entry(stream.to_owned()).or_default() += 1;
            Ok(())
        })
    }

    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        Box::pin(async move { Ok(self.table.epochs().get(stream).copied().unwrap_or(0)) })
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            let rows = self.table.lock();
            Ok(rows
                .get(key.stream())
                .and_then(|s| s.get(key.shard()))
                .cloned())
        })
    }

    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        Box::pin(async move {
            let rows = self.table.lock();
            Ok(rows
                .get(stream)
                .map(|s| s.values().cloned().collect())
                .unwrap_or_default())
        })
    }
}
