//! `LeaseStore`: the conditional writes every lease table offers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{Checkpoint, Epochs, Holder, Lease, LeaseError, LeaseKey, Load};

/// The boxed future every [`LeaseStore`] method returns, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a store method returns: an [`Outcome`] or a [`LeaseError`].
pub type LeaseResult<T> = Result<T, LeaseError>;

/// The result of a conditional write: it landed, or the condition was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
// `Written` is the common case of every write: boxing the row would cost an allocation per
// write to save a few bytes on the rare `Lost`.
#[allow(clippy::large_enum_variant)]
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

/// How to take a row: fenced on the counter the taker observed, for how long, and what else
/// the take writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// The lease duration: the row's expiry becomes now + `ttl` (informational).
    pub ttl: Duration,
    /// The take succeeds if and only if the row's counter still equals this (0 for a row that
    /// does not exist yet, which the take then creates).
    pub fence: u64,
    /// A checkpoint written with the take, over the stored one: the pinned start position of
    /// a row that had none, or a reposition.
    pub checkpoint: Option<Checkpoint>,
    /// The reposition marker written with the take (see [`Lease::repositioned`]).
    pub repositioned: Option<String>,
}

impl Take {
    /// A take for `ttl`, fenced on the `counter` the taker observed.
    pub fn fenced(ttl: Duration, counter: u64) -> Self {
        Self {
            ttl,
            fence: counter,
            checkpoint: None,
            repositioned: None,
        }
    }

    /// Also writes `checkpoint` with the take.
    pub fn with_checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Also writes the reposition `marker` with the take.
    pub fn with_reposition(mut self, marker: impl Into<String>) -> Self {
        self.repositioned = Some(marker.into());
        self
    }
}

/// A lease table: one row per shard, every write conditional.
///
/// # The rules
///
/// *Holding.* A row is held by a [`Holder`] when its `owner` and `token` fields equal the
/// holder's. A row whose expiry has passed is still held until somebody takes it: the holder
/// may renew it, checkpoint it or release it, and conditional writes serialise the race with a
/// taker.
///
/// *Take.* A [`take`](LeaseStore::take) is always fenced: it succeeds if and only if the row's
/// counter still equals [`Take::fence`] (a missing row counts as counter 0 and is created).
/// The caller judged the row takeable from what it observed (free, handed to it, or standing
/// still for a whole lease duration on its own monotonic clock), and the fence makes sure
/// nothing was written since. No wall clock decides a take. A take sets the owner and the
/// holder's token, sets `expiry_ms = now + ttl`, clears a hand-over request, keeps the
/// checkpoint unless the take carries one, and writes the take's reposition marker if any.
///
/// *Renew, checkpoint, release.* These succeed only while this holder (owner and token) holds
/// the row. Renew
/// moves the expiry to now + ttl and may carry a checkpoint and the holder's measured
/// [`Load`], so steady state costs one write per renewal. Release clears the owner and the expiry and may carry a final checkpoint, so a
/// graceful hand-over is one write.
///
/// *Lost.* A write whose condition fails returns [`Outcome::Lost`] with the current holder and
/// counter; that is a value, never an error. Errors are reserved for bad input and for the
/// backend failing.
///
/// *Hand-over.* [`request`](LeaseStore::request) marks a row held by another owner as wanted
/// by the asker (the instance it is to go to: usually the caller, but a member balancing by
/// load names the taker of its own shard, or a third member for a shard it asks of another); it
/// succeeds only while the row's owner field is still the owner the asker chose
/// to ask (not the asker, nor the operator's hold), and it is not wanted yet. It is fenced on that holder, not on the counter:
/// the holder's renewals write the row every renew interval, so a counter the asker listed goes
/// stale, and an asker on a slow lease table would never land a request. The owner sees the mark in the row its
/// next renewal returns and [`hand_over`](LeaseStore::hand_over)s it: one write that makes the
/// asker the owner (expiry now + ttl) without a token, stores the final checkpoint and clears
/// the mark; it succeeds only while this holder holds the row and `to` is the one named.
/// The asker then takes the row (fenced) with a token of its own. A take and a release clear
/// the mark; renewals and checkpoints keep it.
///
/// *Delete.* [`delete`](LeaseStore::delete) removes a row, and takes it out of whatever index
/// `list` reads, if its counter still equals the one the deleter observed. Brokers delete the
/// rows of finished shards once every child has checkpointed past them and the stream no
/// longer lists them, and the member rows of instances that left, so no part of the table
/// grows with the stream's history.
///
/// *Epoch.* Each stream has an epoch counter. Owners [`bump_epoch`](LeaseStore::bump_epoch)
/// after writes that free rows for others (releases, hand-overs, shard ends), so other
/// instances notice with one cheap [`epoch`](LeaseStore::epoch) read instead of reading every
/// row.
///
/// *Evict.* [`evict`](LeaseStore::evict) is the operator's write (the `kinesis-broker`
/// command line's `release` and `reset`): it frees a row whoever holds it, if its counter
/// still equals the one the operator observed, and may store a new checkpoint in the same
/// write; in that same write it pokes the holder's member row when one exists (see *Poke*).
/// The holder's next renewal then loses its condition, so its reader stops. The row is
/// left in the operator's hold ([`rules::evicted`](crate::rules::evicted): an owner no
/// instance can be, a token that is no roster token), so instances take it only once its
/// counter stood still for a lease, when the old holder has stopped for sure. Stores that
/// offer no operator writes keep the default body, which refuses.
///
/// *Poke.* [`poke`](LeaseStore::poke) adds one to a member row's [`Lease::pokes`] and names
/// the row it is about in [`Lease::poked`], and nothing else: not its counter (the others judge a member alive by its counter moving, and a
/// poke is not the member's doing), not its owner, token or expiry. A holder that writes a
/// shard row only when its checkpoint moves (an idle shard) learns that somebody else wrote
/// that row from the pokes its member row's renewal returns: an evict pokes in the same write
/// as it frees the row, so a renewal of the member row that returns no new poke proves that no
/// evict landed before it was sent. A hand-over request is followed by a poke of its own, so
/// the holder hands over within a renew interval. Naming the row lets the keepers of the
/// member's other rows pass over a single poke, so one request costs one write of the holder,
/// not one per idle row it holds.
///
/// *Counter.* Every write that lands bumps the row's counter by exactly one (a poke is not a
/// write of the row in this sense); a created row has
/// counter 1 after its first write. Readers compare counters to detect writes they did not see.
///
/// # Time
///
/// "Now" is the store's injectable [`Clock`](crate::Clock), the writer's wall clock; it only
/// stamps `expiry_ms` for operators. No condition reads a clock: takes are fenced on counters,
/// and the other writes on the holder's token.
///
/// # Object safety
///
/// Every method returns a [`BoxFuture`], so brokers keep stores as `Arc<dyn LeaseStore>`.
pub trait LeaseStore: Send + Sync + fmt::Debug {
    /// Creates `row` (its key, parents, checkpoint and reposition marker; no owner,
    /// counter 1) if no row has its key. Returns true when it was created, false when a row
    /// existed (it is then left untouched).
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>>;

    /// Takes the row for `holder` under the take rules above.
    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Extends `holder`'s lease to now + `ttl`, writing `checkpoint` too when given.
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// As [`renew`](Self::renew), also storing `load` as the row's [`Lease::load`] in the
    /// same write: loads ride on the renewals rows get anyway, at no write of their own.
    ///
    /// The default body renews without storing it, so a store written before loads still
    /// works (instances then see no loads and share shards by count); a decorator over another
    /// store should forward this method, or the loads never reach the table.
    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        let _ = load;
        self.renew(key, holder, ttl, checkpoint)
    }

    /// Writes `checkpoint` while `holder` holds the row.
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Lets go of `holder`'s row, writing a final `checkpoint` in the same write when given.
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Marks a row held by `holder` as wanted by `asker`, if its owner field is still `holder`
    /// (not `asker`, nor the operator's hold) and nobody asked for it yet (see *Hand-over*).
    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Hands `holder`'s row to `to`, who asked for it, with the final `checkpoint`, in one
    /// write.
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>>;

    /// Deletes the row if its counter still equals `observed`, and takes it out of `list`.
    /// Returns true when it was deleted, false when the row was written since or is gone.
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>>;

    /// Frees the row whoever holds it into the operator's hold ([`rules::evicted`](crate::rules::evicted):
    /// no expiry or hand-over request) if its counter still equals `observed`, storing
    /// `checkpoint` in the same write when given (see *Evict*). A missing row is
    /// [`Outcome::Lost`] with counter 0.
    ///
    /// # Errors
    ///
    /// The default body returns [`LeaseError::Refused`] naming the row: the store offers no
    /// operator writes.
    ///
    /// `poke`: the member row of the holder the operator observed (see [`LeaseKey::member`]).
    /// When that row exists, it is poked about `key` in the same write, atomically with the
    /// evict; when it does not (the holder is no member), the row is evicted alone.
    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        let _ = (observed, checkpoint, poke);
        Box::pin(async move {
            Err(LeaseError::Refused {
                operation: "evict",
                resource: key.to_string(),
                source: "this lease store offers no operator writes".into(),
            })
        })
    }

    /// Pokes `member` about the row keyed `about` (see *Poke*): adds one to its
    /// [`Lease::pokes`], sets [`Lease::poked`] to `about`'s shard and [`Lease::poked_at`] to
    /// the new count, all in one atomic write, if the row exists, and changes nothing else.
    /// True when it was poked, false when the row does not exist. (A store that counts
    /// without naming leaves `poked_at` behind the count: keepers then treat the poke as about
    /// any row, which is safe. One that names a row without that atomic write is not.)
    ///
    /// The default body pokes nothing and returns false: a store without pokes still works
    /// with instances that renew every held row (the default); instances that write idle rows
    /// only when their checkpoint moves then learn of a hand-over request at their next
    /// listing or write instead of within a renew interval.
    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        let _ = (member, about);
        Box::pin(async { Ok(false) })
    }

    /// Bumps `stream`'s epoch: rows were freed or moved.
    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>>;

    /// Reads `stream`'s epoch (0 before the first bump). It may be eventually consistent (the
    /// DynamoDB store reads it so, at half the price): the epoch only tells brokers when to
    /// list, and no write is conditioned on it, so a read that misses a bump by a replica's
    /// lag costs at most that lag; callers compare epochs for equality, never for order.
    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>>;

    /// Reads `stream`'s epoch and a counter of its roster's epoch bumps together (see
    /// [`Epochs`]), as eventually consistent as [`epoch`](Self::epoch). Whenever a bump of
    /// [`LeaseKey::members_stream`]`(stream)`'s epoch has landed, a later read here shows
    /// `roster` moved (unless the bump came from a store that does not keep the count: callers
    /// that must see those too also read that epoch itself, less often).
    ///
    /// The default body reads the two epochs one after the other. The DynamoDB store keeps the
    /// count in the stream's epoch item, so one read of half a unit answers both; a decorator
    /// over another store should forward this method, or it pays for two.
    fn epochs<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Epochs>> {
        Box::pin(async move {
            let rows = self.epoch(stream).await?;
            let roster = self.epoch(&LeaseKey::members_stream(stream)).await?;
            Ok(Epochs::new(rows, roster))
        })
    }

    /// Reads one row (strongly consistent), `None` when it does not exist.
    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>>;

    /// Reads one row, possibly eventually consistent (the DynamoDB store reads it so, at half
    /// the price): the answer is the row as it was at some moment of the last second or so,
    /// `None` when it did not exist then. It may be older than an answer already seen, but it
    /// is never a row that was not written. For schedules only: a caller decides nothing on it
    /// that it has not confirmed with [`read`](Self::read) (brokers watch a member row so, and
    /// judge it dead only on a consistent read).
    ///
    /// The default body is [`read`](Self::read); a decorator over another store should forward
    /// this method, or it pays for a consistent read.
    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        self.read(key)
    }

    /// Reads every row of one stream (strongly consistent), and no other stream's.
    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>>;
}
