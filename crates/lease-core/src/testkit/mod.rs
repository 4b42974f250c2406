//! The conformance kit: the lease rules as executable checks any [`LeaseStore`] runs.
//!
//! A store author builds a [`Harness`] (the store, the [`ManualClock`] the store reads, a
//! namespace for stream names) and runs every check, most simply with
//! [`conformance_tests!`](crate::conformance_tests), which expands to one `#[tokio::test]` per
//! check so a failure names the rule it broke. Checks panic with a message on failure, like
//! `assert!`. The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
//!
//! ```
//! use std::sync::Arc;
//! use kinesis_lease_core::testkit::Harness;
//! use kinesis_lease_core::{LeaseStore, ManualClock};
//!
//! /// Builds the harness for your store, opened on the clock the kit will move.
//! fn harness(open: impl Fn(ManualClock) -> Arc<dyn LeaseStore>) -> Harness {
//!     let clock = ManualClock::new(1_700_000_000_000);
//!     Harness::new(open(clock.clone()), clock, "kit")
//! }
//! ```
//!
//! and then, in a test file: `kinesis_lease_core::conformance_tests!(harness(|clock| ..));`
//! (see `crates/lease-memory/tests/lease_conformance.rs`).
//!
//! # The checks
//!
//! One check per case of a rule, grouped as the rules are (see [`LeaseStore`] and
//! [`rules`](crate::rules)):
//!
//! - *Take*, fenced on the observed counter alone: [`take_free_row`],
//!   [`take_of_live_foreign_row_refused`], [`take_of_expired_row_succeeds`],
//!   [`fenced_take_with_stale_counter_refused`], [`take_writes_token_checkpoint_and_marker`],
//!   [`concurrent_takers_one_winner`].
//! - *Holding*, owner and token: [`retake_own_row`], [`non_owner_writes_refused`],
//!   [`same_owner_other_token_refused`], [`lapsed_owner_checkpoint_refused`].
//! - *Checkpoint*: [`checkpoints_round_trip`]. *Release*: [`release_then_take_by_another`].
//! - *Hand-over*: [`request_then_hand_over_moves_the_row`], [`request_and_hand_over_refusals`],
//!   [`hand_over_clears_token`].
//! - *Create*: [`create_is_idempotent`], [`create_keeps_start_checkpoint`]. Rows per stream:
//!   [`streams_are_independent`], [`list_returns_one_stream`].
//! - *Delete*: [`delete_is_fenced_and_unlists`]. *Evict*: [`evict_is_fenced_and_frees`].
//!   *Poke*: [`poke_counts_and_changes_nothing_else`], [`evict_pokes_the_holders_member_row`].
//!   *Epoch*: [`epochs_bump_per_stream`], [`epochs_tell_the_roster_apart`]. *Eventual reads*:
//!   [`eventual_reads_show_written_rows`]. *Counter*: [`counter_increases_on_every_write`].
//!   *Time*: [`clock_never_decides_a_take`]. *Load*: [`loads_round_trip`].

mod checkpoint;
mod counter;
mod create;
mod delete;
mod epoch;
mod evict;
mod hand_over;
mod holding;
mod load;
mod poke;
mod release;
mod streams;
mod take;
mod time;

pub use crate::outage::{Outage, OutageSwitch};
pub use checkpoint::checkpoints_round_trip;
pub use counter::counter_increases_on_every_write;
pub use create::{create_is_idempotent, create_keeps_start_checkpoint};
pub use delete::delete_is_fenced_and_unlists;
pub use epoch::{
    epochs_bump_per_stream, epochs_tell_the_roster_apart, eventual_reads_show_written_rows,
};
pub use evict::evict_is_fenced_and_frees;
pub use hand_over::{
    hand_over_clears_token, request_and_hand_over_refusals, request_then_hand_over_moves_the_row,
};
pub use holding::{
    lapsed_owner_checkpoint_refused, non_owner_writes_refused, retake_own_row,
    same_owner_other_token_refused,
};
pub use load::loads_round_trip;
pub use poke::{evict_pokes_the_holders_member_row, poke_counts_and_changes_nothing_else};
pub use release::release_then_take_by_another;
pub use streams::{list_returns_one_stream, streams_are_independent};
pub use take::{
    concurrent_takers_one_winner, fenced_take_with_stale_counter_refused, take_free_row,
    take_of_expired_row_succeeds, take_of_live_foreign_row_refused,
    take_writes_token_checkpoint_and_marker,
};
pub use time::clock_never_decides_a_take;

use std::sync::Arc;
use std::time::Duration;

use crate::{
    Checkpoint, Holder, Lease, LeaseKey, LeaseStore, Load, Lost, ManualClock, Outcome,
    SequenceNumber, Take,
};

/// What the checks run against.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn LeaseStore>,
    /// The clock the store reads; checks move it (forwards and backwards) to show that it only
    /// stamps expiries and never decides a write.
    pub clock: ManualClock,
    /// Prefix of every stream name a check uses, so checks sharing a table do not collide.
    pub namespace: String,
    /// Rounds of the concurrent-takers check (default 1,000).
    pub concurrent_rounds: usize,
    /// Time budget of the concurrent-takers check: it stops after this many seconds even if
    /// rounds remain, having run at least one round (default: no limit).
    pub concurrent_budget: Option<Duration>,
}

/// The lease duration every check uses.
pub const TTL: Duration = Duration::from_secs(10);

impl Harness {
    /// A harness with 1,000 concurrent rounds and no time budget.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        clock: ManualClock,
        namespace: impl Into<String>,
    ) -> Self {
        Self {
            store,
            clock,
            namespace: namespace.into(),
            concurrent_rounds: 1_000,
            concurrent_budget: None,
        }
    }

    /// The key of `shard` in this harness's stream `name`.
    pub fn key(&self, name: &str, shard: &str) -> LeaseKey {
        LeaseKey::new(format!("{}-{name}", self.namespace), shard).expect("valid kit key")
    }

    /// The row's counter as a taker observes it (0 when the row does not exist).
    async fn observe(&self, key: &LeaseKey) -> u64 {
        self.store
            .read(key)
            .await
            .unwrap_or_else(|e| panic!("read {key} failed: {e}"))
            .map_or(0, |row| row.counter)
    }

    /// Takes the row for `holder`, fenced on the counter read just before: the take of a row
    /// the caller judged takeable.
    async fn take(&self, key: &LeaseKey, holder: &Holder) -> Outcome {
        let fence = self.observe(key).await;
        self.take_fenced(key, holder, fence).await
    }

    /// Takes the row for `holder`, fenced on `fence`.
    async fn take_fenced(&self, key: &LeaseKey, holder: &Holder, fence: u64) -> Outcome {
        self.take_with(key, holder, &Take::fenced(TTL, fence)).await
    }

    async fn take_with(&self, key: &LeaseKey, holder: &Holder, take: &Take) -> Outcome {
        self.store
            .take(key, holder, take)
            .await
            .unwrap_or_else(|e| panic!("take {key} by {holder:?} ({take:?}) failed: {e}"))
    }

    async fn renew(&self, key: &LeaseKey, holder: &Holder, cp: Option<&Checkpoint>) -> Outcome {
        self.store
            .renew(key, holder, TTL, cp)
            .await
            .unwrap_or_else(|e| panic!("renew {key} by {holder:?} failed: {e}"))
    }

    async fn renew_with_load(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        cp: Option<&Checkpoint>,
        load: &Load,
    ) -> Outcome {
        self.store
            .renew_with_load(key, holder, TTL, cp, load)
            .await
            .unwrap_or_else(|e| panic!("renew with load {key} by {holder:?} failed: {e}"))
    }

    async fn checkpoint(&self, key: &LeaseKey, holder: &Holder, cp: &Checkpoint) -> Outcome {
        self.store
            .checkpoint(key, holder, cp)
            .await
            .unwrap_or_else(|e| panic!("checkpoint {key} by {holder:?} failed: {e}"))
    }

    async fn release(&self, key: &LeaseKey, holder: &Holder, cp: Option<&Checkpoint>) -> Outcome {
        self.store
            .release(key, holder, cp)
            .await
            .unwrap_or_else(|e| panic!("release {key} by {holder:?} failed: {e}"))
    }

    async fn request(&self, key: &LeaseKey, asker: &str, holder: &str) -> Outcome {
        self.store
            .request(key, asker, holder)
            .await
            .unwrap_or_else(|e| panic!("request {key} by {asker} failed: {e}"))
    }

    async fn hand_over(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        to: &str,
        cp: Option<&Checkpoint>,
    ) -> Outcome {
        self.store
            .hand_over(key, holder, to, TTL, cp)
            .await
            .unwrap_or_else(|e| panic!("hand over {key} by {holder:?} to {to} failed: {e}"))
    }

    async fn create(&self, row: &Lease) -> bool {
        self.store
            .create(row)
            .await
            .unwrap_or_else(|e| panic!("create {} failed: {e}", row.key))
    }

    async fn read(&self, key: &LeaseKey) -> Lease {
        self.store
            .read(key)
            .await
            .unwrap_or_else(|e| panic!("read {key} failed: {e}"))
            .unwrap_or_else(|| panic!("row {key} missing"))
    }

    fn now_ms(&self) -> u64 {
        crate::Clock::now_ms(&self.clock)
    }
}

fn holder(owner: &str, token: &str) -> Holder {
    Holder::new(owner, token)
}

fn written(outcome: Outcome, what: &str) -> Lease {
    match outcome {
        Outcome::Written(lease) => lease,
        Outcome::Lost(lost) => panic!("{what}: expected the write to land, lost to {lost:?}"),
    }
}

fn lost(outcome: Outcome, what: &str) -> Lost {
    match outcome {
        Outcome::Lost(lost) => lost,
        Outcome::Written(lease) => {
            panic!("{what}: expected the write to be refused, wrote {lease:?}")
        }
    }
}

/// Asserts the refusal names `holder` and `counter`.
fn lost_to(outcome: Outcome, what: &str, holder: Option<&str>, counter: u64) {
    let lost = lost(outcome, what);
    assert_eq!(
        (lost.holder.as_deref(), lost.counter),
        (holder, counter),
        "{what}: the refusal names the row as it stands"
    );
}

fn seq(n: &str) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, None).expect("valid kit sequence"))
}

fn row(key: &LeaseKey, parents: &[&str]) -> Lease {
    Lease::new(
        key.clone(),
        parents.iter().map(|p| (*p).to_owned()).collect(),
    )
}

fn sorted(mut parents: Vec<String>) -> Vec<String> {
    parents.sort();
    parents
}

/// Expands to one `#[tokio::test]` per conformance check, each building its harness with the
/// given expression (it may use `.await`).
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::__conformance_tests!(
            $harness;
            take_free_row,
            retake_own_row,
            take_of_live_foreign_row_refused,
            take_of_expired_row_succeeds,
            non_owner_writes_refused,
            release_then_take_by_another,
            counter_increases_on_every_write,
            fenced_take_with_stale_counter_refused,
            streams_are_independent,
            list_returns_one_stream,
            create_is_idempotent,
            checkpoints_round_trip,
            lapsed_owner_checkpoint_refused,
            concurrent_takers_one_winner,
            request_then_hand_over_moves_the_row,
            request_and_hand_over_refusals,
            epochs_bump_per_stream,
            epochs_tell_the_roster_apart,
            eventual_reads_show_written_rows,
            delete_is_fenced_and_unlists,
            evict_is_fenced_and_frees,
            same_owner_other_token_refused,
            take_writes_token_checkpoint_and_marker,
            create_keeps_start_checkpoint,
            hand_over_clears_token,
            clock_never_decides_a_take,
            poke_counts_and_changes_nothing_else,
            evict_pokes_the_holders_member_row,
            loads_round_trip,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($harness:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let harness: $crate::testkit::Harness = $harness;
                $crate::testkit::$check(&harness).await;
            }
        )*
    };
}
