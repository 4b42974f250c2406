//! `Lease`: one row of the lease table as every store reads it back.

use crate::{Checkpoint, Holder, LeaseKey, Load};

/// One row of the lease table: who reads a shard, until when, and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// `stream:shard`.
    pub key: LeaseKey,
    /// The lease-owner id of the broker that holds the row, if any.
    pub owner: Option<String>,
    /// When the lease lapses unless renewed, in ms since the epoch by the writer's clock. For
    /// operators reading the table only: no take is ever decided by it (see [`LeaseStore`]).
    ///
    /// [`LeaseStore`]: crate::LeaseStore
    pub expiry_ms: u64,
    /// Bumped by every write; a reader that saw the same counter twice saw no write between.
    pub counter: u64,
    /// How far the shard has been processed, if it ever was.
    pub checkpoint: Option<Checkpoint>,
    /// The shards this one was split or merged from: it starts only after they end.
    pub parents: Vec<String>,
    /// Another owner that asked for this row; the owner hands it over at its next renewal.
    pub wanted_by: Option<String>,
    /// The lease token of the current holding: a value the taker chose, written by its take
    /// and required by every later write of that holding. Absent when the row is free, and
    /// after a hand-over (the new owner takes it with a token of its own).
    pub token: Option<String>,
    /// The reposition applied to this row, if any: a subscription applies one reposition once,
    /// whichever instance takes the row first, and never again on later takes.
    pub repositioned: Option<String>,
    /// How many times the row was poked ([`LeaseStore::poke`](crate::LeaseStore::poke)): on member rows, the count of
    /// writes by others (operators' evicts, hand-over requests) to rows its instance holds.
    /// A poke is not a write of the row's holder and does not bump the counter.
    pub pokes: u64,
    /// On member rows: the shard of the row the poke numbered [`poked_at`](Self::poked_at)
    /// was about (see [`last_poke_about`](Self::last_poke_about)).
    pub poked: Option<String>,
    /// The number of the poke [`poked`](Self::poked) names: the count the poke that wrote it
    /// left in [`pokes`](Self::pokes). A writer that counts pokes without naming their row
    /// (an earlier release) leaves it behind the count.
    pub poked_at: u64,
    /// The load its holder last published (see [`Load`]): a shard's own on a shard's row, the
    /// instance's total and capacity on a member row. Kept by takes, hand-overs and releases,
    /// so a new holder starts from what the shard cost its last one. `None` until a holder
    /// that measures loads renewed it.
    pub load: Option<Load>,
}

impl Lease {
    /// A fresh row: no owner, counter 0, no checkpoint.
    pub fn new(key: LeaseKey, parents: Vec<String>) -> Self {
        Self {
            key,
            owner: None,
            expiry_ms: 0,
            counter: 0,
            checkpoint: None,
            parents,
            wanted_by: None,
            token: None,
            repositioned: None,
            pokes: 0,
            poked: None,
            poked_at: 0,
            load: None,
        }
    }

    /// A fresh row that starts at `checkpoint` (a start position, or `SHARD_END` for a shard
    /// that ended before the subscription began).
    pub fn starting_at(mut self, checkpoint: Option<Checkpoint>) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    /// The shard of the row the last poke was about, when that poke named one: a keeper of
    /// another shard that sees one poke more than it checked knows it was not about its row.
    /// `None` when the last poke named no row (or none was made).
    pub fn last_poke_about(&self) -> Option<&str> {
        self.poked
            .as_deref()
            .filter(|_| self.pokes > 0 && self.poked_at == self.pokes)
    }

    /// True when `owner` is the row's owner.
    pub fn is_held_by(&self, owner: &str) -> bool {
        self.owner.as_deref() == Some(owner)
    }

    /// True when `holder` (owner and token) holds the row.
    pub fn is_held_with(&self, holder: &Holder) -> bool {
        self.is_held_by(&holder.owner) && self.token.as_deref() == Some(holder.token.as_str())
    }

    /// True when the row has an owner whose lease has not lapsed at `now_ms`.
    pub fn is_live_at(&self, now_ms: u64) -> bool {
        self.owner.is_some() && self.expiry_ms > now_ms
    }

    /// True once the shard was read and settled to its end.
    pub fn is_finished(&self) -> bool {
        self.checkpoint == Some(Checkpoint::ShardEnd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_poke_names_its_row_only_when_it_was_the_one_that_named_it() {
        let mut row = Lease::new(LeaseKey::member("s", "a").unwrap(), Vec::new());
        assert_eq!(row.last_poke_about(), None, "no poke yet");
        crate::rules::poked(&mut row, &LeaseKey::new("s", "shardId-1").unwrap());
        assert_eq!(row.last_poke_about(), Some("shardId-1"));
        // An earlier release's poke: one more in the count, the named row left behind.
        row.pokes += 1;
        assert_eq!(row.last_poke_about(), None);
        crate::rules::poked(&mut row, &LeaseKey::new("s", "shardId-2").unwrap());
        assert_eq!((row.pokes, row.last_poke_about()), (3, Some("shardId-2")));
    }
}
