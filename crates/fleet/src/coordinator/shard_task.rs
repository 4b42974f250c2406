//! Spawning one held shard's tasks: its reader (`kinesis-shard-reader`), its lease keeper and
//! the hooks around them, inside a `shard_reader` span with `stream`, `shard` and `owner`.

use crate::abort_on_drop::AbortOnDrop;
use crate::handle::UNKNOWN_BEHIND;
use crate::keeper::Keeper;
use crate::shared::{Exit, Held, Report};
use crate::ShardInfo;
use kinesis_dispatch::{CheckpointCursor, ShardSettlement};
use kinesis_lease_core::{Holder, Lease};
use kinesis_shard_reader::control::KeeperCmd;
use kinesis_shard_reader::start::StartPlan;
use kinesis_shard_reader::Reader;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::State;

impl State {
    /// Starts the keeper and reader of a freshly taken shard.
    pub(super) fn start(
        &mut self,
        lease: Lease,
        holder: Holder,
        plan: StartPlan,
        sent: Instant,
        incarnation: u64,
        pokes: u64,
    ) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let shard = lease.key.shard().to_owned();
        let settlement = ShardSettlement::new(config.stream.as_str(), shard.as_str());
        let millis_behind = Arc::new(AtomicU64::new(UNKNOWN_BEHIND));
        let written = Arc::new(Mutex::new(lease.checkpoint.clone()));
        let kpl = Arc::new(kinesis_shard_reader::KplCounters::default());
        let refusal = Arc::new(kinesis_shard_reader::Refusal::default());
        let nudge = Arc::new(tokio::sync::Notify::new());
        let load = Arc::new(Mutex::new(lease.load.map(|l| l.without_capacity())));
        let rising = Arc::new(Mutex::new(None));
        shared.held().insert(
            shard.clone(),
            Held {
                settlement: settlement.clone(),
                millis_behind: millis_behind.clone(),
                written: written.clone(),
                kpl: kpl.clone(),
                refusal: refusal.clone(),
                nudge: nudge.clone(),
                handing_to: Arc::default(),
                load: load.clone(),
                rising: rising.clone(),
                movable_at: sent + crate::load_plan::dwell(false),
            },
        );
        let (signal_tx, signal_rx) = watch::channel(kinesis_shard_reader::Signal::Reading);
        let (cmd_tx, cmd_rx) = mpsc::channel(2);
        // To tell the keeper to release when the reader panicked (the reader's own sender
        // goes with it).
        let release = cmd_tx.clone();
        let keeper = Keeper {
            shared: shared.clone(),
            key: lease.key.clone(),
            holder,
            settlement: settlement.clone(),
            cursor: CheckpointCursor::new(lease.checkpoint.as_ref()),
            signal: signal_tx,
            written,
            taken_at: sent,
            incarnation,
            quiet: config
                .quiet_idle
                .then(|| crate::quiet::Quiet::new(&shard, pokes, sent)),
            nudge,
            poke_retry_at: sent,
            load: crate::shard_load::ShardLoad::new(
                &config.stream,
                settlement.clone(),
                lease.load.as_ref(),
                load,
                rising,
                sent,
            ),
        };
        let reader = Reader {
            context: shared.read.clone(),
            shard: shard.clone(),
            feed: shared.sender.feed(settlement.clone()),
            settlement,
            signal: signal_rx,
            phase: shared.phase.subscribe(),
            keeper: cmd_tx,
            millis_behind,
            hash_range: self.stream_shards.get(&shard).map(|s| s.hash_range),
            kpl,
            metrics: kinesis_shard_reader::ShardMetrics::new(&config.stream, &shard),
            refusal,
            taken_at: Instant::now(),
        };
        let span = tracing::info_span!("shard_reader", stream = %config.stream, shard = %shard, owner = %config.owner);
        if plan.marker.is_some() {
            tracing::warn!(parent: &span, position = ?plan.open, "repositioned over the stored checkpoint (once per subscription)");
        }
        tracing::info!(parent: &span, checkpoint = ?lease.checkpoint.as_ref().map(ToString::to_string), position = ?plan.open, "lease taken");
        shared.metrics.taken();
        {
            // Set under the lock, so that a take and a task's end cannot reorder their sets.
            let held = shared.held();
            shared.metrics.held(held.len());
        }
        let reports = shared.reports.clone();
        let info = ShardInfo {
            stream: config.stream.clone(),
            shard: shard.clone(),
            checkpoint: lease.checkpoint.clone(),
        };
        self.tasks.spawn(
            async move {
                let hooks = &shared.config.hooks;
                // The keeper runs `on_taken` first (renewing meanwhile); the reader starts once
                // it has returned, and never if the lease was lost during it.
                let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
                let read = async move {
                    if ready_rx.await.is_ok() {
                        reader.run(plan).await;
                    }
                };
                // The reader in a task of its own, not joined in this one: joined, every
                // wake-up of either (the reader's HTTP body arriving in chunks, a batch of
                // places freed) polled the other too, and the keeper's `select!` of five
                // branches ran a few hundred times a second for nothing (`drain`'s profile).
                // The guard aborts the reader if this task is aborted. A reader that panics (a
                // bug here or in a library it calls) has the keeper release the shard with its
                // due checkpoint, so it is taken and read again, here or elsewhere: its member
                // row still renewed, no other instance would take the row, and a keeper left
                // renewing it, or dropped with a panic, left the shard unread for as long as
                // the process lived (`reader_panic.rs`). The handle wakes this task only when
                // the reader ends.
                let mut reading = AbortOnDrop(tokio::spawn(read.in_current_span()));
                let keeping = keeper.run(cmd_rx, ready_tx);
                tokio::pin!(keeping);
                let exit = tokio::select! {
                    biased;
                    exit = &mut keeping => {
                        let _ = (&mut reading.0).await.map_err(|e| reader_failed(&e));
                        exit
                    }
                    ended = &mut reading.0 => {
                        if let Err(error) = ended {
                            reader_failed(&error);
                            let _ = release.send(KeeperCmd::Release).await;
                        }
                        drop(release);
                        keeping.await
                    }
                };
                let last = {
                    let mut held = shared.held();
                    let gone = held.remove(&shard);
                    shared.metrics.held(held.len());
                    gone.and_then(|held| {
                        held.written
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .clone()
                    })
                };
                let _ = reports.send(Report {
                    shard: shard.clone(),
                    exit,
                });
                let info = ShardInfo {
                    checkpoint: last,
                    ..info
                };
                match exit {
                    Exit::Lost => hooks.lost(info).await,
                    Exit::Ended => hooks.ended(info).await,
                    Exit::Released | Exit::HandedOver => {}
                }
            }
            .instrument(span),
        );
    }
}

/// Logs a reader task that did not end by itself (a panic; or aborted, as the runtime shuts
/// down).
fn reader_failed(error: &tokio::task::JoinError) {
    if error.is_panic() {
        tracing::error!(error = %error, "the shard's reader panicked; releasing the lease with its due checkpoint, to be read again");
    }
}
