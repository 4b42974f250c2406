//! `LeaseStore`: the conditional writes every lease table offers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{Checkpoint, Lease, LeaseError, LeaseKey};

/// The boxed future every [`LeaseStore`] method returns, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a store method returns: an [`Outcome`] or a [`LeaseError`].
pub type LeaseResult<T> = Result<T, LeaseError>;

/// The result of a conditional write: it landed, or the condition was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// The write landed; the row as it now stands.
    Written(Lease),
    /// The condition did not hold; nothing was written.
    Lost(Lost),
}

impl Outcome {
    /// The written row, or `None` when lost.
    pub fn written(self) -> Option<Lease> {
        match self {
            Outcome::Written(lease) => Some(lease),
            Outcome::Lost(_) => None,
        }
    }

    /// True when the write landed.
    pub fn is_written(&self) -> bool {
        matches!(self, Outcome::Written(_))
    }
}

/// Why a conditional write did not land: the row as the store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// Who holds the row now (`None`: nobody, or the row does not exist).
    pub holder: Option<String>,
    /// The row's counter now (0 when the row does not exist).
    pub counter: u64,
}

/// How to take a row: for how long, and optionally fenced on an observed counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// The lease duration: the row's expiry becomes now + `ttl`.
    pub ttl: Duration,
    /// When set, the take succeeds if and only if the row's counter still equals it.
    pub fence: Option<u64>,
}

impl Take {
    /// An unfenced take for `ttl`: free, own or expired rows only.
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, fence: None }
    }

    /// A take fenced on the counter the taker last observed.
    pub fn fenced(ttl: Duration, counter: u64) -> Self {
        Self {
            ttl,
            fence: Some(counter),
        }
    }
}

/// A lease table: one row per shard, every write conditional.
///
/// # The rules
///
/// *Holding.* A row is held by `owner` when its `owner` field equals that id. A row whose
/// expiry has passed is still held by its owner until somebody takes it: the owner may renew
/// it, checkpoint it or release it, and conditional writes serialise the race with a taker.
///
/// *Take.* An unfenced [`take`](LeaseStore::take) succeeds when the row has no owner, has this
/// owner, or has expired by the store's clock (`expiry_ms <= now`); a row that does not exist
/// yet is created and taken. A fenced take ([`Take::fenced`]) succeeds if and only if the row's
/// counter still equals the fence (a missing row counts as counter 0): the caller has judged
/// the row takeable from what it observed, and the fence makes sure nothing was written since.
/// A take sets the owner, sets `expiry_ms = now + ttl`, and keeps the checkpoint.
///
/// *Renew, checkpoint, release.* These succeed only while this owner holds the row. Renew
/// moves the expiry to now + ttl and may carry a checkpoint, so steady state costs one write
/// per renewal. Release clears the owner and the expiry and may carry a final checkpoint, so a
/// graceful hand-over is one write.
///
/// *Lost.* A write whose condition fails returns [`Outcome::Lost`] with the current holder and
/// counter; that is a value, never an error. Errors are reserved for bad input and for the
/// backend failing.
///
/// *Hand-over.* [`request`](LeaseStore::request) marks a row held by another owner as wanted
/// by the asker; it succeeds only while the row still has the counter the asker observed, has
/// an owner other than the asker, and is not wanted yet. The owner sees the mark in the row its
/// next renewal returns and [`hand_over`](LeaseStore::hand_over)s it: one write that makes the
/// asker the owner (expiry now + ttl), stores the final checkpoint and clears the mark; it
/// succeeds only while this owner holds the row and `to` is the one who asked. A take and a
/// release clear the mark; renewals and checkpoints keep it.
///
/// *Epoch.* Each stream has an epoch counter. Owners [`bump_epoch`](LeaseStore::bump_epoch)
/// after writes that free rows for others (releases, hand-overs, shard ends), so other
/// instances notice with one cheap [`epoch`](LeaseStore::epoch) read instead of reading every
/// row.
///
/// *Counter.* Every write that lands bumps the row's counter by exactly one; a created row has
/// counter 1 after its first write. Readers compare counters to detect writes they did not see.
///
/// # Time
///
/// "Now" is the store's injectable [`Clock`](crate::Clock), the writer's wall clock. Stores must
/// judge expiry in the condition of the write with the writer's now, never with a server's
/// clock, and never by reading first and writing after.
///
/// # Object safety
///
/// Every method returns a [`BoxFuture`], so brokers keep stores as `Arc<dyn LeaseStore>`.
pub trait LeaseStore: Send + Sync + fmt::Debug {
    /// Creates the row for `key` with `parents` if it does not exist. Returns true when it was
    /// created, false when it existed (it is then left untouched).
    fn create<'a>(
        &'a self,
        key: &'a LeaseKey,
        parents: &'a [String],
    ) -> BoxFuture<'a, LeaseResult<bool>>;

    /// Takes the row for `owner` under the take rules above.
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        take: Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Extends `owner`'s lease to now + `ttl`, writing `checkpoint` too when given.
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Writes `checkpoint` while `owner` holds the row.
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Lets go of `owner`'s row, writing a final `checkpoint` in the same write when given.
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Marks a row held by another owner as wanted by `asker`, if it still has the counter
    /// `observed` (see *Hand-over*).
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        observed: u64,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Hands `owner`'s row to `to`, who asked for it, with the final `checkpoint`, in one write.
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Bumps `stream`'s epoch: rows were freed or moved.
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>>;

    /// Reads `stream`'s epoch (strongly consistent; 0 before the first bump).
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>>;

    /// Reads one row (strongly consistent), `None` when it does not exist.
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>>;

    /// Reads every row of one stream (strongly consistent), and no other stream's.
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>>;
}
