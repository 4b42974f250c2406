//! A seeded, deterministic simulation of a kinesis-broker fleet, in the spirit of
//! FoundationDB's simulator and TigerBeetle's VOPR.
//!
//! Each seed builds a [`Plan`]: 2 to 6 brokers on one in-process `MemoryStream` and one lease
//! table behind fault layers, a start position (the default `LATEST`, `TRIM_HORIZON` or
//! `AT_TIMESTAMP`), a dispatch mode, and a set of fault kinds ([`Fault`]): store calls delayed
//! (up to 3 s), failing, or losing the responses of writes that landed; one instance cut off
//! the table for a while; wall clocks skewed by up to a lease duration either way; crashes (a
//! dropped broker), new and restarted instances (new, reused or even twin owner ids), graceful
//! shutdowns, splits and merges, expired iterators, Kinesis throttling and failures, handlers
//! that are slow, fail and panic, and an operator's moves (a row released, or reset to
//! `TRIM_HORIZON` or an earlier sequence number, from a live holder). A quarter of the seeds
//! start from a lease table the KCL import wrote ([`Import`]): counter-1 rows at the KCL's
//! checkpoints, one or two levels of splits below them with no rows, a trimmed parent. Half of the
//! seeds balance by load ([`Balance`]) on every instance or on about half of them, on 4 shards more
//! and a third of them costing their handlers five times as much, so the load planner's moves
//! and exchanges meet the same faults.
//!
//! Everything runs on one thread on tokio's paused clock with every random choice drawn from
//! the seed, so a seed replays exactly (`cargo xtask sim --seed N`). Faults run for 90
//! simulated seconds; records are put for 20 s more; then every expected record must be
//! handled, and every readable shard held, within 60 s.
//!
//! # Invariants
//!
//! Checked while the run goes, not only at its end (see [`Recorder`]):
//! 1. Never two instances running handlers on one shard's records at overlapping times.
//! 2. Every record put after the subscription's start position is handled at least once; on an
//!    imported table, every record after its shard's KCL checkpoint and every record of a shard
//!    below an imported row (none of a parent trimmed away with its records); after an
//!    operator's reset, every record after the new position again.
//! 3. In calm seeds (only planned moves: starts, graceful shutdowns, hand-overs,
//!    resharding, expired iterators, throttling, handler retries), no record is handled twice.
//! 4. Checkpoints never move back (but where an operator moves them) and never pass a record
//!    that no handler completed.
//! 5. Every readable shard with unhandled records makes progress within its bound (see
//!    `liveness`; an operator's hold counts as a crashed holder's, from the move or from the
//!    start of an instance started since), and once
//!    faults stop, every readable shard is held by a running broker and every expected record
//!    is handled within 60 s of the last put.
//! 6. Each shard's settlement window stays within its bound (10,000 entries).

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod clock;
pub mod faults;
pub mod liveness;
pub mod load;
pub mod plan;
pub mod record;
mod world;

use std::hash::{Hash, Hasher};

pub use plan::{Balance, Fault, Import, Mode, Plan, Start};
pub use record::Recorder;
pub use world::{Stats, CALM_PUTS, FAULT_PHASE, SETTLE_BOUND, SETTLE_CAP};

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan it ran.
    pub plan: Plan,
    /// Counts.
    pub stats: Stats,
    /// Broken invariants (empty: the seed passed).
    pub violations: Vec<String>,
    /// Who held which shard when, which faults were injected on which instance (store faults,
    /// cut-offs, crashes, twins, reshards, Kinesis faults), starts and shutdowns.
    pub history: Vec<String>,
    /// A digest of the history: equal for two runs of one seed when the run is deterministic.
    pub digest: u64,
}

impl Report {
    /// True when no invariant broke.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The failure report: the replay command, the plan, the violations and the last
    /// `lines` lines of history.
    pub fn failure(&self, lines: usize) -> String {
        let history = &self.history[self.history.len().saturating_sub(lines)..];
        format!(
            "simulation seed {} FAILED\nreplay: cargo xtask sim --seed {}\n{}\nviolations:\n  {}\nhistory (last {} lines):\n  {}",
            self.plan.seed,
            self.plan.seed,
            self.plan,
            self.violations.join("\n  "),
            history.len(),
            history.join("\n  ")
        )
    }
}

/// Runs one seed to its end on a fresh single-threaded runtime with paused time.
pub fn run(seed: u64) -> Report {
    quiet_simulated_panics();
    let plan = Plan::of(seed);
    fastrand::seed(seed);
    let runtime = paused_runtime(seed);
    let (stats, rec) = runtime.block_on(async {
        let rec = Recorder::new();
        let stats = world::World::new(plan.clone(), rec.clone()).run().await;
        (stats, rec)
    });
    drop(runtime);
    let history = rec.history();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    history.hash(&mut hasher);
    Report {
        plan,
        stats,
        violations: rec.violations(),
        history,
        digest: hasher.finish(),
    }
}

/// A fresh single-threaded runtime on paused time, for one seed, its own random draws seeded by
/// `seed`: tokio draws where a watch channel's receiver waits (one of eight lists, woken in
/// turn) and which branch of a `select!` it polls first, and with the runtime's default seed,
/// fresh from the OS, a third of the seeds wrote different histories from run to run. Seeding it
/// takes `--cfg tokio_unstable`, which `.cargo/config.toml` sets for the workspace.
fn paused_runtime(seed: u64) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    #[cfg(not(tokio_unstable))]
    {
        let _ = seed;
        not_replayable();
    }
    builder.build().expect("a current-thread runtime")
}

/// Says once that seeds will not replay exactly: built without `--cfg tokio_unstable` (a
/// `RUSTFLAGS` set in the environment replaces the one `.cargo/config.toml` sets).
#[cfg(not(tokio_unstable))]
fn not_replayable() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "kinesis-sim: built without --cfg tokio_unstable (RUSTFLAGS replaces the workspace's \
             .cargo/config.toml): tokio's own random draws are not seeded, so a seed may not \
             replay exactly"
        );
    });
}

/// Handlers panic on purpose; keep those panics out of the output (others still print).
fn quiet_simulated_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("simulated"));
            if !simulated {
                default(info);
            }
        }));
    });
}
