//! `MemoryLeaseTable`: the rows, shared by every store opened over them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kinesis_lease_core::Lease;

/// An in-process lease table; clones share the same rows.
///
/// # Examples
///
/// ```
/// use kinesis_lease_memory::{MemoryLeaseStore, MemoryLeaseTable};
///
/// let table = MemoryLeaseTable::new();
/// let (one, two) = (MemoryLeaseStore::over(&table), MemoryLeaseStore::over(&table));
/// # let _ = (one, two);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryLeaseTable {
    // Keyed by `stream` then `shard`, so `list(stream)` reads one stream's rows only.
    rows: Arc<Mutex<BTreeMap<String, BTreeMap<String, Lease>>>>,
    epochs: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl MemoryLeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of rows, over every stream.
    pub fn len(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }

    /// True when the table has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn epochs(&self) -> MutexGuard<'_, BTreeMap<String, u64>> {
        self.epochs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, BTreeMap<String, Lease>>> {
        // A panic while holding the lock cannot leave a row half written (every write replaces
        // a whole row), so a poisoned lock is still consistent.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
