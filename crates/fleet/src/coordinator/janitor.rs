//! The janitor's round: one instance (the janitor) deletes rows nothing needs any more:
//! finished parents whose children have all started, and member rows of instances that left
//! long ago.

use kinesis_lease_core::Lease;
use tokio::time::Instant;

use super::store_calls::delete_rows;
use super::State;

impl State {
    /// The janitor's part of a take round: deletes the rows nothing needs any more (see
    /// `cleanup`), each fenced on the counter this round saw.
    pub(super) async fn clean_up(&mut self, rows: &[Lease]) {
        let shared = self.shared.clone();
        if !crate::cleanup::is_janitor(&self.members, &shared.config.owner) {
            return;
        }
        let mut doomed = Vec::new();
        // Only against a listing of the stream's shards: none (or an empty one) would make
        // every finished row look unlisted.
        if let (false, Some(synced_at)) = (self.stream_shards.is_empty(), self.synced_at) {
            let shards = &self.stream_shards;
            let first_seen = &self.first_seen;
            // Gone from a ListShards sent after the row was first seen: surely gone, not just
            // newer than the listing. And gone for a lease: a create sent by an instance whose
            // listing predates the shard's trim may still be on its way (delayed, or retried);
            // landing after the delete it would bring the finished row back as new. Every
            // store call is bounded by a lease, so by then it has landed or never will.
            let now = Instant::now();
            let lease = shared.config.lease_duration;
            self.gone_since
                .retain(|s, _| rows.iter().any(|r| r.key.shard() == s && r.is_finished()));
            for row in rows.iter().filter(|r| r.is_finished()) {
                let shard = row.key.shard();
                if shards.contains_key(shard) {
                    self.gone_since.remove(shard);
                } else {
                    self.gone_since.entry(shard.to_owned()).or_insert(synced_at);
                }
            }
            // Rows in their grace: a round when it ends (rounds come only on change).
            let next = self
                .gone_since
                .values()
                .map(|since| *since + lease)
                .filter(|end| *end > now)
                .min();
            if let Some(next) = next {
                self.relist_at = Some(self.relist_at.map_or(next, |r| r.min(next)));
            }
            let gone_since = &self.gone_since;
            let listed = |s: &str| {
                shards.contains_key(s)
                    || first_seen.get(s).is_none_or(|seen| *seen >= synced_at)
                    || gone_since
                        .get(s)
                        .is_none_or(|since| now.duration_since(*since) < lease)
            };
            let children = |parent: &str| {
                shards
                    .values()
                    .filter(|s| s.parents().iter().any(|p| p == parent))
                    .map(|s| s.id.clone())
                    .collect()
            };
            doomed.extend(
                crate::cleanup::finished(rows, listed, children)
                    .into_iter()
                    .map(|r| (r.key.clone(), r.counter)),
            );
        }
        // A delete that failed is tried again at the next round that lists the rows.
        let _ = delete_rows(&shared, doomed).await;
    }
}
