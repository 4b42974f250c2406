//! The rows the last listing showed another member holding: as listed, as read back since
//! (`State::read_back`, strongly consistent, kept until the next listing), and as the load
//! planner weighs them (rows listed before their holder measured them sharing what the
//! member's row says it weighs: `load_plan::with_unmeasured_shared`). A listing is taken only
//! when the stream's epoch moves, so what it shows of another member's rows may be old; the
//! exchanges (`State::balance_by_load`) read the rows they plan on.

use crate::coordinator::State;
use crate::load_plan::{self, Movable, Side};

impl State {
    /// The rows the last listing showed `member` to hold under a token (a row handed to the
    /// member but not taken yet, or an orphan of its, would take a mark that its take then
    /// clears).
    pub(super) fn listed_as_held_by<'a>(
        &'a self,
        member: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a crate::coordinator::Seen)> + 'a {
        self.observed
            .iter()
            .filter(move |(_, seen)| seen.owner.as_deref() == Some(member) && seen.token.is_some())
    }

    /// How many rows the last listing showed `member` to hold.
    pub(super) fn held_by_count(&self, member: &str) -> u64 {
        self.listed_as_held_by(member).count() as u64
    }

    /// What the last listing showed `member` to hold, not marked wanted, with loads: as read
    /// since before an exchange (`read_back`: a row found moved left out), else as listed (a
    /// row listed without one counts as idle: listed before its holder measured it, or quiet
    /// and idle; read before it is asked for, and left out when it has none then). Those it
    /// may not pass on are left out: taken by a hand-over within a handed shard's dwell
    /// ([`stays`](Self::stays)). By shard id: the listing is a hash map, and a seeded
    /// simulation replays exactly.
    pub(super) fn held_by(&self, member: &str) -> Vec<Movable> {
        let mut held = self.listed_with_loads(member);
        held.retain(|m| !self.stays(&m.shard));
        held
    }

    /// [`held_by`](Self::held_by), with the rows that carried no handler time when listed and
    /// were not read since counted as sharing what `side` (the member's row) weighs beyond
    /// the others, when those weigh less than half of it (`load_plan::with_unmeasured_shared`):
    /// a listing taken at a start shows most rows before their holders measured them. A row
    /// read since the listing (`read_back`) stands as read, idle or not, so an exchange that
    /// planned on the guess reads other rows at its next comparison, not the same ones. The
    /// guess is shared among every listed row, those that stay too, and only then are those
    /// left out: what stays is part of what the member weighs, not a share of it that moves.
    pub(super) fn held_as_weighed(&self, member: &str, side: Side) -> Vec<Movable> {
        let held = self.listed_with_loads(member);
        let mut weighed = load_plan::with_unmeasured_shared(side, &held, |m| {
            self.read_back.contains_key(&m.shard)
        })
        .into_owned();
        weighed.retain(|m| !self.stays(&m.shard));
        weighed
    }

    /// Up to `load_plan::FIRST_READS` rows the last listing showed `member` holding (not
    /// wanted by anyone) that carried no handler time then and were not read since: those
    /// [`held_as_weighed`](Self::held_as_weighed) guesses at, when it guesses (the rows listed
    /// with a load weigh less than half of `side`, what the member's row says); else none.
    /// None that stays ([`stays`](Self::stays)): an exchange cannot take it back.
    pub(super) fn unmeasured_rows(&self, member: &str, side: Side) -> Vec<String> {
        let held = self.listed_with_loads(member);
        load_plan::unmeasured_to_read(
            side,
            &held,
            |m| self.read_back.contains_key(&m.shard),
            |m| self.stays(&m.shard),
        )
    }

    /// Every row the last listing showed `member` to hold, not marked wanted, with loads as
    /// [`held_by`](Self::held_by) weighs them, those that stay too; by shard id.
    fn listed_with_loads(&self, member: &str) -> Vec<Movable> {
        let mut held: Vec<Movable> = self
            .listed_as_held_by(member)
            .filter(|(_, seen)| !seen.wanted)
            .filter_map(|(shard, seen)| {
                let load = match self.read_back.get(shard) {
                    Some(read) => (*read)?,
                    None => seen.load.unwrap_or_default(),
                };
                Some(Movable {
                    shard: shard.clone(),
                    load,
                })
            })
            .collect();
        held.sort_by(|a, b| a.shard.cmp(&b.shard));
        held
    }

    /// True when the last listing shows `shard` taken by a hand-over less than a handed
    /// shard's dwell ago (`load_plan::dwell`), by the time its token carries
    /// (`roster::handed_within`) against this instance's clock; `read_rows` leaves such a row
    /// out the same way. Its holder may not give it yet, and an exchange does not take it back
    /// or send it on either, or the shard would move twice within the dwell (the load
    /// simulation counted 53 such moves in 6,179, mostly shards taken back by the member that
    /// had handed them a minute before). Even for a giver far above the mean: what the dwell
    /// costs is a fleet that placed shards badly in its first minute staying so until they may
    /// move (load seed 1509: 1.6x the offline placement from 90 s to 224 s; letting a giver
    /// 1.25x above the mean take such shards back anyway passed it, but moved 35 shards again
    /// within the dwell in steady seeds 0..600 and 1200..1800, against none). Only a take by
    /// this release writes the time: a row handed by an earlier one, or taken again as an
    /// orphan after its keeper ended, carries none, and an exchange may take it back at once,
    /// as before. Planning alone reads it: no take, hand-over or write is decided by it.
    pub(super) fn stays(&self, shard: &str) -> bool {
        self.observed
            .get(shard)
            .is_some_and(|seen| self.handed_within_dwell(seen.token.as_deref()))
    }

    /// True when `token` names a holding taken by a hand-over less than a handed shard's dwell
    /// ago by this instance's clock (see [`stays`](Self::stays)).
    fn handed_within_dwell(&self, token: Option<&str>) -> bool {
        let dwell = load_plan::dwell(true).as_millis() as u64;
        let now = self.shared.config.clock.now_ms();
        token.is_some_and(|token| crate::roster::handed_within(token, now, dwell))
    }

    /// Reads the rows of `shards` (strongly consistent) and keeps what each says until the
    /// next listing (`read_back`): its load when `taker` still holds it under a token, not
    /// marked wanted and not finished, and it carries one; else `None` (it moved, its load
    /// is not known, or it was handed to `taker` within a handed shard's dwell and stays).
    /// False when a read failed or did not answer in time.
    pub(super) async fn read_rows(&mut self, taker: &str, shards: &[String]) -> bool {
        let shared = self.shared.clone();
        for shard in shards {
            let Ok(key) = shared.key(shard) else {
                return false;
            };
            let now = match self.quick(shared.store.read(&key)).await {
                // A row without a load is left out: its holder may have taken it within a
                // renewal (a hot shard's load is written at the first), or it is quiet and idle.
                Some(Ok(Some(row)))
                    if row.is_held_by(taker)
                        && row.token.is_some()
                        && !self.handed_within_dwell(row.token.as_deref())
                        && row.wanted_by.is_none()
                        && !row.is_finished() =>
                {
                    row.load
                }
                Some(Ok(_)) => None,
                Some(Err(_)) | None => return false,
            };
            self.read_back.insert(shard.clone(), now);
        }
        true
    }
}
