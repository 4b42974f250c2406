//! An operator's move mid-run, as the command line makes it with `--force`: one conditional
//! evict of a row, whoever holds it, fenced on the counter just read, then a bump of the
//! stream's epoch. It releases the row, or resets its checkpoint to `TRIM_HORIZON` or to an
//! earlier sequence number.
//!
//! Why: an operator's move lands while the holder reads, renews and checkpoints; the evicted
//! holder must stop at its next renewal and never write a checkpoint over the operator's, the
//! row must stay unread until it stood still for a lease (so the two never read at once), and
//! then the shard must be read again from the new position, nothing after it skipped.

use kinesis_broker::{
    lease::{Lease, LeaseKey, LeaseStore, Outcome},
    Checkpoint, MemoryLeaseStore,
};

use super::{World, STREAM};

impl World {
    /// Moves one unfinished row of the stream. The recorder compares the checkpoints after it
    /// with the operator's (which may be earlier than the library's), requires every record
    /// after a reset's position to be handled again by the next holding, and
    /// [`monitor_holds`](Self::monitor_holds) starts the shard's stall clock.
    pub(super) async fn operator_move(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let Ok(rows) = store.list(STREAM).await else {
            return;
        };
        let open: Vec<&Lease> = rows.iter().filter(|r| !r.is_finished()).collect();
        if open.is_empty() {
            return;
        }
        // Quiet idle shards: rows held by a running, unfrozen quiet instance first, in the
        // writer's silence (see `run`) when the move comes then, so the moves meet rows no
        // checkpoint write will soon show the evict to: only the poke (or the listing the
        // epoch bump causes) tells their holder.
        let quiet: Vec<&Lease> = open
            .iter()
            .copied()
            .filter(|r| {
                r.owner.as_deref().is_some_and(|o| {
                    self.is_quiet(o)
                        && self
                            .instances
                            .iter()
                            .any(|i| i.id == o && i.running.is_some() && !i.freeze.is_frozen())
                })
            })
            .collect();
        let open = if quiet.is_empty() { open } else { quiet };
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
        // What the library wrote up to the move, against the last sample.
        self.rec.check_rows(&rows);
        // As the command line does: the holder's member row is poked with the evict.
        let member = row
            .owner
            .as_deref()
            .filter(|o| *o != kinesis_lease_core::rules::EVICTED_OWNER)
            .and_then(|o| LeaseKey::member(STREAM, o).ok());
        match store
            .evict(&row.key, row.counter, checkpoint.as_ref(), member.as_ref())
            .await
        {
            Ok(Outcome::Written(after)) => {
                // As the command line does: the others list the rows at their next epoch read.
                // Unless that bump fails after the evict landed (the command line reports it),
                // in a third of the moves of quiet seeds: then only the poke tells a quiet
                // holder, and nothing else asks the others to list.
                let bump_lost =
                    self.plan.quiet != crate::plan::Quiet::Off && self.rng.u8(..3) == 0;
                if bump_lost {
                    self.rec.note("operator: the epoch bump after the move fails");
                } else if let Err(error) = store.bump_epoch(STREAM).await {
                    self.rec
                        .violate(format!("operator: bumping the epoch failed: {error}"));
                }
                self.rec.checkpoint_moved(&shard, after.checkpoint.clone());
                self.rec
                    .operator_moved(&shard, row.owner.clone(), after.counter);
                if let Some(to) = &checkpoint {
                    self.rec.reset(&shard, to);
                }
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
                // Without the bump, nobody lists the rows until the evicted holder learns of
                // the move from the poke, at its next member renewal (a renew interval, 3 s),
                // and lists them itself: the hold's clock starts then.
                let learned = if bump_lost { 3_000 } else { 0 };
                self.evicted
                    .insert(shard.clone(), self.rec.now_ms() + learned);
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

    /// Rows in the operator's hold: each shard's stall clock starts at the move for an instance
    /// that ran then, or at its start (or its last join of the roster: one found dead, or a
    /// twin's, joins again and watches rows afresh) for one that started since, the earliest
    /// over the instances running now; then the crash bound applies, which holds the lease the row must
    /// stand still for on the taker's own clock
    /// ([`OPERATOR_HOLD`](crate::liveness::OPERATOR_HOLD)). When the instances that
    /// saw the move leave, the clock moves on to the newcomers. A row taken since (its owner no
    /// longer the hold) is tracked no more.
    pub(super) async fn monitor_holds(&mut self) {
        let store = MemoryLeaseStore::over(&self.table);
        let now = self.rec.now_ms();
        if let Ok(members) = store.list(&format!("{STREAM}@members")).await {
            for row in members {
                let id = row.key.shard().to_owned();
                match self.joins.get_mut(&id) {
                    Some((token, since)) if *token != row.token => {
                        *token = row.token.clone();
                        *since = now;
                    }
                    Some(_) => {}
                    None => {
                        self.joins.insert(id, (row.token.clone(), now));
                    }
                }
            }
        }
        if self.evicted.is_empty() {
            return;
        }
        let Ok(rows) = store.list(STREAM).await else {
            return;
        };
        let held: std::collections::BTreeSet<&str> = rows
            .iter()
            .filter(|r| kinesis_broker::lease::rules::is_evicted(r))
            .map(|r| r.key.shard())
            .collect();
        self.evicted
            .retain(|shard, _| held.contains(shard.as_str()));
        for (shard, moved) in &self.evicted {
            let earliest = self
                .instances
                .iter()
                .filter(|i| i.running.is_some())
                .map(|i| {
                    let joined = self.joins.get(&i.id).map_or(0, |(_, since)| *since);
                    i.started_ms.max(joined).max(*moved)
                })
                .min();
            if let Some(at) = earliest {
                self.rec.hold_back(shard, at);
            }
        }
    }
}
