//! An operator's move mid-run, as the command line makes it with `--force`: one conditional
//! evict of a row, whoever holds it, fenced on the counter just read. It releases the row, or
//! resets its checkpoint to `TRIM_HORIZON` or to an earlier sequence number.
//!
//! Why: an operator's move lands while the holder reads, renews and checkpoints; the evicted
//! holder must stop at its next renewal and never write a checkpoint over the operator's, the
//! row must stay unread until it stood still for a lease (so the two never read at once), and
//! then the shard must be read again from the new position, nothing after it skipped.

use kinesis_broker::{
    lease::{Lease, LeaseStore, Outcome},
    Checkpoint, MemoryLeaseStore,
};

use super::{World, STREAM};

impl World {
    /// Moves one unfinished row of the stream; the recorder forgets its checkpoint (the
    /// operator may move it back) and holds its stall clock from now (the operator's hold
    /// lasts until the row stood still for a lease, then it is taken and read).
    pub(super) async fn operator_move(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(STREAM).await else {
            return;
        };
        let open: Vec<&Lease> = rows.iter().filter(|r| !r.is_finished()).collect();
        if open.is_empty() {
            return;
        }
        let row = open[self.rng.usize(..open.len())];
        let shard = row.key.shard().to_owned();
        let earlier = match &row.checkpoint {
            Some(Checkpoint::Sequence(at)) => {
                let before = self.rec.completed_before(&shard, at);
                (!before.is_empty()).then(|| before[self.rng.usize(..before.len())].clone())
            }
            _ => None,
        };
        let (what, checkpoint) = match (self.rng.u8(..3), earlier) {
            (1, _) => ("reset to TRIM_HORIZON", Some(Checkpoint::TrimHorizon)),
            (2, Some(seq)) => (
                "reset to an earlier sequence number",
                Some(Checkpoint::Sequence(seq)),
            ),
            _ => ("released", None),
        };
        self.rec.checkpoint_moved(&shard);
        match store.evict(&row.key, row.counter, checkpoint.as_ref()).await {
            Ok(Outcome::Written(after)) => {
                self.rec.note(format!(
                    "operator: {shard} {what} (held by {:?} at counter {}, checkpoint {} -> {})",
                    row.owner,
                    row.counter,
                    row.checkpoint
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string),
                    after
                        .checkpoint
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string),
                ));
                self.rec.hold_back(&shard, self.rec.now_ms());
                self.count("operator move");
            }
            Ok(Outcome::Lost(lost)) => self.rec.note(format!(
                "operator: moving {shard} lost to a write since the read (counter {} -> {}); nothing changed",
                row.counter, lost.counter
            )),
            Err(error) => self
                .rec
                .violate(format!("operator: evicting {shard} failed: {error}")),
        }
    }
}
