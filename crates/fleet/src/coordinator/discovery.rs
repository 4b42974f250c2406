//! Shard discovery: the stream's shards as ListShards says (at start, every
//! `shard_sync_interval`, at once when a shard ends, and again at the next take tick after a
//! failed listing), and the lease rows created for the shards that have none yet, each with
//! its parents and the position it starts at.

use std::collections::BTreeSet;

use futures_util::stream::{self, StreamExt};
use kinesis_lease_core::{ErrorChain, Lease};

use super::store_calls::bounded;
use super::State;
use kinesis_shard_reader::start;
use kinesis_stream_core::ReaderError;

/// How many lease rows discovery creates at once.
const CREATES_IN_FLIGHT: usize = 16;

impl State {
    /// Lists the stream's shards and creates the lease rows missing, with their parents and
    /// start position; a deleted stream fails the subscription.
    pub(super) async fn sync_shards(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let stream = config.stream.clone();
        let sent = tokio::time::Instant::now();
        let shards = match shared.read.kinesis.list_shards(&stream).await {
            Ok(shards) => shards,
            Err(error @ ReaderError::StreamNotFound { .. }) => {
                shared.fail(error);
                return;
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "listing shards failed; retrying at the next take tick");
                self.sync_failed = true;
                return;
            }
        };
        self.sync_failed = false;
        self.synced_at = Some(sent);
        let before = self.stream_shards.len();
        let known = shards
            .iter()
            .filter(|s| self.stream_shards.contains_key(&s.id))
            .count();
        if known != shards.len() || known != before {
            // New shards, or shards gone (which may make children readable): list the rows.
            self.relist_now();
        }
        self.stream_shards = shards.into_iter().map(|s| (s.id.clone(), s)).collect();
        // Shards that left the stream (trimmed past retention) need no memory here.
        self.rows_created
            .retain(|id| self.stream_shards.contains_key(id));
        let mut missing: Vec<&kinesis_stream_core::Shard> = self
            .stream_shards
            .values()
            .filter(|s| !self.rows_created.contains(&s.id))
            .collect();
        if missing.is_empty() {
            return;
        }
        missing.sort_by(|a, b| a.id.cmp(&b.id));
        let rows = match bounded(&shared, "list", shared.store.list(&stream)).await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "listing leases failed; creating rows at the next sync");
                return;
            }
        };
        let existing: BTreeSet<&str> = rows.iter().map(|r| r.key.shard()).collect();
        let mut created = Vec::new();
        let (exist, missing): (Vec<_>, Vec<_>) = missing
            .into_iter()
            .partition(|s| existing.contains(s.id.as_str()));
        created.extend(exist.into_iter().map(|s| s.id.clone()));
        // Where each new row starts, from the rows as they stand (never from their counters):
        // see the `start` rules.
        let marker = config.reposition().map(|(_, marker)| marker);
        let mut rows_to_create = Vec::new();
        for (shard, checkpoint) in start::initial_checkpoints(&missing, &rows, &config.start_at) {
            let key = match shared.key(&shard.id) {
                Ok(key) => key,
                Err(error) => {
                    tracing::error!(error = %ErrorChain(&error), "shard id unusable as a lease key");
                    continue;
                }
            };
            let mut row = Lease::new(key, shard.parents()).starting_at(checkpoint);
            // Rows created under a reposition start as the subscription says, not repositioned.
            row.repositioned = marker.clone();
            rows_to_create.push(row);
        }
        // Several creates in flight: one at a time, a stream of 100 shards on a table that
        // answers in 50 ms waited 5 s before its first take (each create is conditional, so
        // their order does not matter).
        let shared = &shared;
        let outcomes: Vec<(String, bool)> = stream::iter(rows_to_create)
            .map(|row| async move {
                let shard = row.key.shard().to_owned();
                match bounded(shared, "create", shared.store.create(&row)).await {
                    Ok(_) => (shard, true),
                    Err(error) => {
                        tracing::warn!(%shard, error = %ErrorChain(&error), "creating the lease row failed");
                        (shard, false)
                    }
                }
            })
            .buffer_unordered(CREATES_IN_FLIGHT)
            .collect()
            .await;
        created.extend(outcomes.into_iter().filter(|(_, ok)| *ok).map(|(s, _)| s));
        if !created.is_empty() {
            // Rows that exist now (created here or by another instance): list them.
            self.relist_now();
        }
        self.rows_created.extend(created);
    }
}
