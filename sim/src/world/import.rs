//! Seeds that start from a lease table the KCL import wrote, in the shapes real migrations
//! take: rows at counter 1 with no owner and the KCL's checkpoints (a plain record `n` stored
//! as `n/0`, as the import stores it), shards split one or two levels after the KCL stopped
//! (children and grandchildren with no row at all), and a split parent trimmed from the stream
//! while records after its checkpoint were still unread.
//!
//! Why: the import once lost grandchild shards at the default `LATEST` (a table of counter-1
//! rows looked like a brand-new subscription, so shards below them started at the tip), in
//! code whose tests covered one split level. Here the fleet starts on such a table under every
//! fault the plan injects, and every record after a checkpoint, and every record of a shard
//! below one, must be handled.

use std::collections::BTreeMap;

use kinesis_broker::{
    lease::{Lease, LeaseKey, LeaseStore},
    Checkpoint, MemoryLeaseStore, SequenceNumber,
};

use super::{World, STREAM};
use crate::plan::Import;
use crate::record::Put;

impl World {
    /// Puts what the KCL application read, writes the rows its import leaves, splits
    /// `import.depth` levels after them, trims the first split's parent if planned, and
    /// records every put with whether it must be handled: after its shard's checkpoint, or in
    /// a shard below an imported row; never a trimmed parent's (gone with its shard).
    pub(super) async fn import_table(&mut self, import: Import) {
        let store = MemoryLeaseStore::over(&self.table);
        let mut puts: Vec<Put> = Vec::new();
        for _ in 0..self.rng.usize(20..50) {
            puts.extend(self.put_record());
        }
        let open: Vec<_> = self
            .kinesis
            .shards(STREAM)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s.ending_sequence.is_none())
            .collect();
        // Per imported shard, the last record the KCL checkpointed (none: never checkpointed,
        // imported at TRIM_HORIZON).
        let mut cut: BTreeMap<String, Option<SequenceNumber>> = BTreeMap::new();
        for shard in &open {
            let read: Vec<&Put> = puts.iter().filter(|p| p.shard == shard.id).collect();
            let at = (!read.is_empty() && self.rng.u8(..5) != 0)
                .then(|| read[self.rng.usize(..read.len())].sequence.clone());
            let checkpoint = match &at {
                Some(seq) if seq.subsequence().is_some() => Checkpoint::Sequence(seq.clone()),
                Some(seq) => Checkpoint::Sequence(seq.with_subsequence(Some(0))),
                None => Checkpoint::TrimHorizon,
            };
            let key = LeaseKey::new(STREAM, &shard.id).expect("a shard key");
            let mut row = Lease::new(key, shard.parents().to_vec());
            row.checkpoint = Some(checkpoint.clone());
            match store.create(&row).await {
                Ok(true) => self.rec.note(format!(
                    "imported {} from the KCL at {checkpoint} ({} of its records put before)",
                    shard.id,
                    read.len()
                )),
                other => self
                    .rec
                    .violate(format!("importing {}: {other:?}", shard.id)),
            }
            cut.insert(shard.id.clone(), at);
        }
        // Splits after the KCL stopped: below the imported rows, shards with no row.
        let mut first_parent = None;
        let mut targets: Vec<String> = cut.keys().cloned().collect();
        for level in 1..=import.depth {
            if targets.is_empty() {
                break;
            }
            let target = targets[self.rng.usize(..targets.len())].clone();
            if self.kinesis.split_evenly(STREAM, &target).is_err() {
                break;
            }
            self.rec.note(format!(
                "split {target} after the KCL stopped (level {level})"
            ));
            first_parent.get_or_insert_with(|| target.clone());
            targets = self
                .kinesis
                .shards(STREAM)
                .unwrap_or_default()
                .into_iter()
                .filter(|s| s.parents().contains(&target))
                .map(|s| s.id)
                .collect();
            for _ in 0..self.rng.usize(5..15) {
                puts.extend(self.put_record());
            }
        }
        // The stream no longer lists a trimmed shard, but its children still wait for its
        // parents (their records come first for every key): the recorder learns its lineage
        // before it goes.
        self.note_parents();
        let trimmed = first_parent.filter(|parent| {
            import.trimmed_parent && self.kinesis.trim_shard(STREAM, parent).is_ok()
        });
        if let Some(parent) = &trimmed {
            self.rec.note(format!(
                "{parent} trimmed from the stream (past retention), its row left as imported"
            ));
        }
        for put in puts {
            let expected = if trimmed.as_ref() == Some(&put.shard) {
                false
            } else {
                match cut.get(&put.shard) {
                    Some(Some(at)) => put.sequence > *at,
                    // Imported at TRIM_HORIZON, or below an imported row: read whole.
                    Some(None) | None => true,
                }
            };
            self.rec.put(Put { expected, ..put });
        }
    }
}
