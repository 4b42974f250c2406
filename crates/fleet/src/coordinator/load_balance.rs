//! Balancing by load (`ReaderConfig::balance_by_load`): every sample interval this instance
//! reads one other member's row, the one read the longest ago (one small eventually consistent
//! read, half a read unit on DynamoDB, whatever the number of shards or members; up to
//! `load_plan::FIRST_READS` at once while some member was never read), and keeps what each
//! weighed (`State::peers`). When no member it knows of is more than `load_plan::PEER_GAP`
//! heavier, it weighs itself against the member a move or an exchange relieves most
//! (`load_plan`; or, far above the mean among many members below it, beside heavier ones,
//! a move that fills its taker to the mean at most and leaves alone the places the heavier
//! members' moves would take: `load_plan::beside_heavier`), read again unless read just now (and another drawn in its place, up to
//! `TAKER_READS` reads in all, when on that reading it is no longer among the takers; when none
//! is confirmed, the one drawn among those read at this comparison alone), and, when a move of
//! some of its shards is worth it (up to `load_plan::BUNDLE_MOST`, planned again on the consistent read that
//! confirms the member), marks those rows wanted by it. When a move better by more than the
//! threshold waits on shards it may give within a take's dwell, it gives nothing and compares
//! again a take interval after the first of them may go (`load_plan::waits_for`). A member whose row shows a hand-over
//! on its way in (`load_plan::receiving`) is given nothing until a later reading: two givers
//! would otherwise both see it light. Its own keeper, nudged, then hands the shard over at
//! once (not at its next renewal, up to a renew interval later, while the taker's row shows
//! nothing of the move yet), as it does for any request: the reader stops, what was handed out
//! settles, one write moves the row, the other member is poked about it
//! (`Shared::announce_hand_over`; the epoch moves only when it cannot be), and it takes the row
//! and starts after the checkpoint.
//!
//! One move at a time: no new one while a shard of the last move is still held here (for at most
//! six leases), and the next comparison as soon as it has gone (looking every renew interval
//! meanwhile, without a read), the member it went to left out as a taker until its row can
//! show it. A member whose row this instance has seen stand still for a lease (these
//! readings count with the watch's: `Link`), or that publishes no capacity because it is
//! shutting down, is never given a shard. Each store call here is cut off after a take
//! interval, and no member is read after a read cut off, so a slow table holds up the take
//! rounds by a few take intervals at a comparison at most (see below), not for as long as it
//! is slow.
//!
//! When no single shard may go, an exchange may (`load_plan::swap`): this instance reads the
//! rows it would take back (the listing may be old), then marks the taker's chosen shards
//! wanted by itself, or by a third member with room, read again consistently first
//! (`load_plan::onward`; the taker's keepers hand them over, as to any asker), and then gives,
//! of its own, the shard that with the marks that landed still leaves the taker lighter than
//! this instance was (`load_plan::give_for`). It takes back or sends on no row handed to the
//! taker within a handed shard's dwell (by the time the hand-over's token carries:
//! `State::stays`), so that a shard handed by this release moves at most once in three
//! minutes. A comparison makes up to eight member reads while
//! members were never read (or read in the first half minute), or while this instance stands
//! far above the mean (`load_plan::far_above_mean`: every member heavier than it that keeps it
//! from giving, read more than a renew interval ago, and again one to two renew intervals
//! later while they do), then one, and up to `TAKER_READS` reads of takers (none after a read
//! cut off), each drawn for an exchange with rows the listing showed before they were measured
//! followed by reads of up to eight of those rows, one at a time (`unmeasured_rows`; kept in
//! `read_back` until the next listing; none after a read cut off or slower than a take
//! interval): at most 11 member reads and 24 row reads there, and an
//! exchange up to 16 reads of the taker's rows (those not read since the listing, at most 8,
//! and those it would take back), a consistent read of the taker, up to eight consistent reads
//! of third members (none after one cut off or slower than half a take interval), up to eight
//! marks and a mark of its own (each call cut off as above), all in the coordinator's loop: a
//! slow table delays the take rounds by up to that many take intervals at such a comparison
//! (the reads stop at the first one cut off).
//!
//! Where loads are not published (a store without `renew_with_load`, members of an earlier
//! release), nothing is weighed and the instance asks for shards by count as without the
//! option (`State::loads_seen`); an instance that holds nothing asks by count too, so one that
//! turns the option on while the others have not is not left empty.

use std::collections::BTreeSet;
use std::future::Future;

use kinesis_lease_core::{ErrorChain, Lease, LeaseResult, Outcome};
use tokio::time::Instant;

use crate::load_plan::{self, Movable, Side};

use super::State;

mod giving;
mod listed;
mod movable;
mod peer;
mod reserved;
mod rows;
mod take_back;

pub(super) use giving::{Cooling, Giving};
use listed::Listed;
pub(super) use peer::Peer;

/// The most comparisons in a row at which a member far above the mean and kept from giving
/// reads the members that keep it from giving and compares again within two renew intervals
/// (about a minute of them) while none of them sheds: a member holding a hot shard alone below
/// a hotter one stays far above the mean and kept from giving for good, and must not read and
/// compare more often for good. A member that kept it from giving, read again lighter by half
/// the threshold (it gave a shard), starts the count again, also once the count ran out; so
/// does a comparison not far above the mean, or among the heaviest, or one that gives (beside
/// heavier members: `load_plan::beside_heavier`). At `fleet_balance` 1,000
/// x 50 the six heaviest members, held back by one another a hot shard apart, stayed kept from
/// giving for more than 12 comparisons in a row while they gave, and a bare count of 12
/// brought it within 1.25x after 220 s rather than 170 s.
pub(super) const FAR_COMPARISONS: u32 = 12;

/// The most members a comparison reads as its taker: the one drawn, and others drawn in its
/// place when on the reading taken then it is no longer among the takers
/// (`load_plan::takers`).
pub(super) const TAKER_READS: usize = 3;

/// What a member row says of its member as a taker.
enum Taker {
    /// Present, renewing, and weighed.
    Weighed(Side),
    /// Weighed, but poked more often than its load shows it acted on: a hand-over is on its
    /// way in, and its load does not show it yet (`Load::pokes_seen`).
    Receiving(Side),
    /// Present, but publishes no capacity: it is shutting down, or its join is not announced
    /// yet (it takes nothing until then).
    Leaving,
    /// It publishes no load (an earlier release, or a store that does not keep loads).
    Unweighed,
    /// Not held by it, or seen standing still for a lease.
    Gone,
}

impl State {
    /// One comparison with the members this instance knows of, and the move it calls for, if
    /// any.
    pub(super) async fn balance_by_load(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        // Shutting down (no new leases): no move, and no exchange, whose marks would hand rows
        // here that nobody reads until the drain ends.
        if !shared.member.borrow().may_take()
            || *shared.phase.borrow() != kinesis_shard_reader::Phase::Running
        {
            return;
        }
        let now = Instant::now();
        // One move at a time. A member with more to give gives again as soon as the last
        // shard has gone, not a sample interval later: look every renew interval meanwhile (no
        // read). At 10 s a move, a member shedding four shards took 40 s and more, the most
        // of the load simulation's time to balance after the start.
        if let Some(Giving { shards, at, .. }) = &self.giving {
            let still_here = {
                let held = shared.held();
                shards.iter().any(|shard| held.contains_key(shard))
            };
            if still_here && now.duration_since(*at) < config.lease_duration * 6 {
                self.balance_soon = Some(config.renew_interval.max(config.take_interval));
                return;
            }
        }
        // Its taker's row shows the shard only after the take and its next renewal (and the
        // poke that announces the hand-over runs aside): not this taker again until then, or
        // it would look as light as before and get a second shard; nor the members shards
        // taken back went on to (`Cooling`).
        if let Some(giving) = self.giving.take() {
            self.cooling = Cooling::each(giving.loaded, now, config.renew_interval * 2);
        }
        // The roster as last listed, by this coordinator or by the watch (which lists it as
        // soon as a member joins or leaves).
        let mut others: Vec<String> = self
            .members
            .union(&self.link.present())
            .filter(|m| **m != config.owner)
            .cloned()
            .collect();
        if others.is_empty() {
            return;
        }
        others.sort_unstable();
        // Each member in turn, the one read the longest ago, so that what this instance knows
        // of every member is at most one sample interval per member old; members never read
        // (at the start, or newly joined) first, up to `load_plan::FIRST_READS` of them at a
        // time, so that a fleet starting together knows itself before its first moves.
        self.peers
            .retain(|member, _| others.binary_search(member).is_ok());
        // A reading taken before this instance's first shards may move (`load_plan::dwell`
        // after its first take round) may predate the peer's takes, or its meters' first
        // readings, as at the start of a fleet: read again, as one never read, once it is half
        // a sample interval old. (Weighed on such readings, a member that was not the heaviest
        // gave at its first comparison, and its shard took the place a hotter one needed for
        // the three minutes a handed shard stays: the load simulation's slowest starts.)
        let early = self.first_round_at.map(|at| at + load_plan::dwell(false));
        let mut never: Vec<String> = others
            .iter()
            .filter(|m| {
                self.peers.get(*m).is_none_or(|peer| {
                    early.is_some_and(|early| peer.at < early)
                        && now.duration_since(peer.at) >= load_plan::SAMPLE_INTERVAL / 2
                })
            })
            .cloned()
            .collect();
        let mine = Side::of(&shared.instance_load());
        // Far above the mean, for a bounded number of comparisons in a row kept from giving
        // while nobody above sheds (`FAR_COMPARISONS`); a comparison not far above it ends the
        // row.
        let far_out = mine.is_some_and(|m| {
            load_plan::far_above_mean(m, self.peers.values().filter_map(|p| p.side))
        });
        if !far_out {
            self.far_blocked = 0;
        }
        let far = self.compares_fast(far_out);
        let to_read = if never.is_empty() {
            // A member heavier than this one (which keeps it from giving) read more than three
            // sample intervals ago first: it may have shed since, and at 1,000 x 50 the
            // heaviest members, each read once in eight minutes, kept one another from giving
            // on readings minutes old. Then the one read the longest ago. A member far above
            // the mean (`load_plan::far_above_mean`) reads every such member read more than a
            // renew interval ago, up to `load_plan::FIRST_READS`, and compares again one to two
            // renew intervals later while they keep it from giving (below): the heaviest members of a
            // fleet that starts unbalanced give in turn, each held back by the others a hot
            // shard above it until it reads them again (`fleet_balance` 1,000 x 50: six members
            // of 20 hot shards gave one every 12 to 60 s each).
            let (age, most) = match far {
                true => (config.renew_interval, load_plan::FIRST_READS),
                false => (load_plan::SAMPLE_INTERVAL * 3, 1),
            };
            let mut blocking: Vec<(Instant, &String)> = self
                .peers
                .iter()
                .filter(|(_, peer)| {
                    now.duration_since(peer.at) >= age
                        && mine
                            .zip(peer.side)
                            .is_some_and(|(m, p)| load_plan::blocks(m, p))
                })
                .map(|(member, peer)| (peer.at, member))
                .collect();
            blocking.sort_unstable();
            blocking.truncate(most);
            match blocking.is_empty() {
                false => blocking.into_iter().map(|(_, m)| m.clone()).collect(),
                true => self
                    .peers
                    .iter()
                    .min_by_key(|(_, peer)| peer.at)
                    .map(|(member, _)| member.clone())
                    .into_iter()
                    .collect(),
            }
        } else {
            fastrand::shuffle(&mut never);
            never.truncate(load_plan::FIRST_READS);
            never
        };
        let mut read = std::collections::BTreeMap::new();
        let mut slow = false;
        for member in to_read {
            let asked = Instant::now();
            let before = self.peers.get(&member).and_then(|p| p.side);
            if let Some(weighed) = self.weigh(&member).await {
                // A member that kept this one from giving shed a shard's worth since it was
                // last read: the fleet above is moving, and comparing sooner pays again (see
                // `FAR_COMPARISONS`).
                let shed = mine.zip(before).is_some_and(|(m, b)| {
                    load_plan::blocks(m, b)
                        && weighed.0.weight < b.weight * (1.0 - load_plan::THRESHOLD / 2.0)
                });
                if far_out && shed {
                    self.far_blocked = 0;
                }
                read.insert(member, weighed);
            }
            // A read cut off (a slow table): read the rest at a later comparison rather than
            // hold up the take rounds by a take interval for each (up to `FIRST_READS`).
            if asked.elapsed() >= config.take_interval {
                slow = true;
                break;
            }
        }
        if !self.loads_seen {
            return;
        }
        let Some(mine) = Side::of(&shared.instance_load()) else {
            return;
        };
        // Only the heaviest members give (`load_plan::among_heaviest`), to the member that a
        // move or an exchange relieves most (`load_plan::taker`).
        let weighed = || self.peers.values().filter_map(|peer| peer.side);
        // Or, far above the mean among many light members, beside heavier ones: then only
        // what fills a taker to the mean, and not to a member left to the heavier ones (the
        // places their moves would take, and as many of the roomiest: `load_plan::beside_heavier`).
        let mut reserved: Vec<String> = Vec::new();
        let beside = !load_plan::among_heaviest(mine, weighed());
        if beside {
            tracing::debug!(owner = %config.owner, mine = mine.weight, far, far_blocked = self.far_blocked, peers = ?weighed().map(|s| s.weight).collect::<Vec<_>>(), "not among the heaviest members");
            // Far above the mean: again within one to two renew intervals (at a random moment,
            // so that members held back together do not all give in the same second and choose
            // one taker: load simulation seed 102, at a fixed renew interval).
            if self.compares_fast(far_out) {
                let soon = config.renew_interval.max(config.take_interval);
                self.balance_soon = Some(soon.mul_f64(1.0 + fastrand::f64()));
                self.far_blocked += 1;
            }
            let sides: Vec<Side> = weighed().collect();
            if !load_plan::beside_heavier(mine, &sides) {
                return;
            }
        } else {
            self.far_blocked = 0;
        }
        let mut movable = self.movable(now);
        // By shard id: the planner keeps the first of equal candidates, and the held map's
        // order differs from run to run (a seeded simulation replays exactly).
        movable.sort_by(|a, b| a.shard.cmp(&b.shard));
        // A better move a few seconds away (a shard taken after the others, not movable yet)
        // is waited for rather than spoilt by a lesser one now (`load_plan::waits_for`).
        let (soon, first) = self.movable_soon(now);
        if beside {
            if movable.is_empty() && soon.is_empty() {
                return;
            }
            reserved = self.left_to_heavier(now, mine);
        }
        if let Some(first) = first {
            if self
                .listed_takers(now, mine, &reserved, beside)
                .waits_for(mine, &movable, &soon)
            {
                tracing::debug!(owner = %config.owner, mine = mine.weight, soon = soon.len(), "waiting for shards about to be movable");
                // A take interval past the first: the shards of one take round become
                // movable a store call apart, and a wake for each would compare (and read a
                // member row) as many times within milliseconds.
                self.balance_soon = Some(first.duration_since(now) + config.take_interval);
                return;
            }
        }
        let pick = fastrand::usize(..);
        // The member drawn as the taker is read again unless read just now (what it weighed
        // may be a sample interval per member old), and drawn again from the others when on
        // that reading it is no longer among the takers (`load_plan::takers`), up to
        // `TAKER_READS` reads: a member read before it took a hot shard looked light. No read
        // after one cut off (a slow table), here or above.
        let mut tried: Vec<String> = Vec::new();
        // Rows read before a taker was confirmed (below), strongly consistent, at this
        // comparison: an exchange planned on them need not read them again.
        let mut pre_read: BTreeSet<String> = BTreeSet::new();
        let chosen = loop {
            if tried.len() >= TAKER_READS {
                break None;
            }
            let left_out = [tried.as_slice(), &reserved].concat();
            let listed = self.listed_takers(now, mine, &left_out, beside);
            let Some(taker) = listed.draw(mine, &movable, pick) else {
                break None;
            };
            let asked = Instant::now();
            let weighed = match read.remove(&taker) {
                Some(weighed) => Some(weighed),
                None if slow => None,
                None => self.weigh(&taker).await,
            };
            // A member that publishes no load turns the comparisons off (`weigh`).
            if !self.loads_seen {
                return;
            }
            slow |= asked.elapsed() >= config.take_interval;
            let others = [tried.as_slice(), &reserved].concat();
            tried.push(taker.clone());
            let Some((theirs, their_count)) = weighed else {
                continue;
            };
            // Drawn for an exchange with rows listed before they were measured (weighed as
            // sharing what it weighs: `held_as_weighed`): read those first (up to
            // `load_plan::FIRST_READS`, strongly consistent), so that it is confirmed on what
            // they carry. Confirmed on the guess, a member whose weight was one hot shard's
            // looked warm in every row, and the exchange read them, found them cold, and gave
            // nothing (`fleet_balance` 100 x 10: the heaviest members' exchanges waited 20 s).
            // Only where an exchange may suit the pair and the guess stands for some row; each
            // row on its own, none after one cut off or slow (as the member reads above); the
            // rows read are not read again by an exchange at this comparison (`pre_read`).
            if !slow
                && !beside
                && load_plan::may_exchange(mine, theirs)
                && load_plan::planned(beside, mine, theirs, &movable, listed.fill).is_empty()
            {
                for row in self.unmeasured_rows(&taker, theirs) {
                    let asked = Instant::now();
                    let read = self.read_rows(&taker, std::slice::from_ref(&row)).await;
                    if read {
                        pre_read.insert(row);
                    }
                    if !read || asked.elapsed() >= config.take_interval {
                        slow = true;
                        break;
                    }
                }
            }
            // On what it weighs now (and the mean with it), still among the takers?
            let listed = self.listed_takers(now, mine, &others, beside);
            if listed.takers(mine, &movable).contains(&&taker) {
                break Some((taker, theirs, their_count, listed.fill));
            }
            tracing::debug!(owner = %config.owner, %taker, theirs = theirs.weight, "read again, no longer a taker");
            read.insert(taker, (theirs, their_count));
        };
        // None confirmed against the others' older readings: the one drawn among the members
        // read at this comparison alone. Where most readings are minutes old and light
        // (`fleet_balance` 1,000 x 50), every member drawn reads heavier than its reading, and
        // givers that then gave nothing stood at 1.27x the offline placement after 8 minutes
        // (1.05x with this).
        let chosen = chosen.or_else(|| {
            let unread: Vec<String> = self
                .peers
                .keys()
                .filter(|member| !read.contains_key(*member))
                .chain(&reserved)
                .cloned()
                .collect();
            let listed = self.listed_takers(now, mine, &unread, beside);
            let taker = listed.draw(mine, &movable, pick)?;
            let (theirs, their_count) = *read.get(&taker)?;
            Some((taker, theirs, their_count, listed.fill))
        });
        let Some((taker, theirs, their_count, fill)) = chosen else {
            return;
        };
        let Ok(key) = crate::member::member_key(&config.stream, &taker) else {
            return;
        };
        let given = load_plan::planned(beside, mine, theirs, &movable, fill);
        // No exchange that keeps a shard of its own that turns hot
        // (`load_meter::LoadMeter::rising`) by more than an exchange must take off this member
        // (`load_plan::EXCHANGE_GAIN`): its figure still climbs with that shard, what it takes
        // back stays three minutes, and a plain move may suit once the figure shows the step
        // (load simulation seeds 772, 1599 and 1648: exchanges 30 to 50 s after a shard turned hot
        // kept the giver at 1.15x to 1.2x the offline placement for three minutes). Giving
        // that shard away is no such plan (seed 116 needs that exchange: without it, 152 s
        // after the turn), so one rising shard it may give leaves the exchange to give it and
        // no other; two, or one not movable yet, leave none. Decided before the rows an
        // exchange would take back are read, on one reading of the meters (a rise ending
        // within the comparison does not free the other shards).
        let least_rise = mine.weight * load_plan::EXCHANGE_GAIN;
        let rising = shared.rising_shards(least_rise);
        let (mut shards, back): (Vec<String>, Vec<Movable>) = match given.is_empty() {
            false => (given.iter().map(|s| (*s).to_owned()).collect(), Vec::new()),
            // Beside heavier members, a move within the mean or nothing.
            true if beside => return,
            true => {
                // No single shard may go: perhaps an exchange, against the taker's shards as
                // the last listing showed them. Placed by load, hand-overs do not move the
                // epoch (only their takers list), so that listing may be out of date: when the
                // pair is far enough apart for an exchange and the listing shows the taker
                // holding another number of shards than its row says, list again first (at
                // most once in six sample intervals) and weigh at a later comparison.
                if !load_plan::may_exchange(mine, theirs) {
                    tracing::debug!(owner = %config.owner, %taker, mine = mine.weight, theirs = theirs.weight, movable = movable.len(), "no move and no exchange");
                    return;
                }
                let listed = self.held_by_count(&taker);
                let window = load_plan::SAMPLE_INTERVAL * 6;
                if their_count != Some(listed)
                    && self
                        .listed_at
                        .is_none_or(|at| now.duration_since(at) >= window)
                {
                    self.relist_now();
                    return;
                }
                // Rows are listed only when the epoch moves, so the listing's loads may be
                // old (at a start, from before their holders measured them), and it may show
                // a row its holder has given away since: marks on the others would then bring
                // a load here with nothing given for it (the load simulation saw a member take
                // 6,240 that way, 1.5x the offline placement). So the rows an exchange would
                // take back are read first (strongly consistent, at most
                // `load_plan::SWAP_MOST`), and when none is found on what is known, the
                // taker's rows not read since the listing (up to `load_plan::FIRST_READS` at a
                // comparison); what they say is kept until the next listing (`read_back`),
                // and the exchange planned again on it.
                // What the exchange may give: the one shard turning hot, if any (above).
                let offered: Vec<Movable> = match rising.as_slice() {
                    [] => movable.clone(),
                    [shard] => movable
                        .iter()
                        .filter(|m| m.shard == *shard)
                        .cloned()
                        .collect(),
                    _ => Vec::new(),
                };
                if offered.is_empty() {
                    tracing::debug!(owner = %config.owner, %taker, mine = mine.weight, rising = ?rising, "it holds shards that turn hot: no exchange yet");
                    return;
                }
                let mut read_now = pre_read;
                let mut found = None;
                let mut unread_budget = load_plan::FIRST_READS;
                for round in 0..3 {
                    let theirs_held = self.held_as_weighed(&taker, theirs);
                    let swap = load_plan::swap(mine, theirs, &offered, &theirs_held, fill);
                    let to_read: Vec<String> = match &swap {
                        Some(swap) => swap
                            .take
                            .iter()
                            .filter(|s| !read_now.contains(**s))
                            .map(|s| (*s).to_owned())
                            .collect(),
                        None => theirs_held
                            .iter()
                            .filter(|m| !self.read_back.contains_key(&m.shard))
                            .take(unread_budget)
                            .map(|m| m.shard.clone())
                            .collect(),
                    };
                    if swap.is_none() {
                        unread_budget -= to_read.len();
                    }
                    if to_read.is_empty() {
                        found = swap.map(|swap| {
                            let back: Vec<Movable> = swap
                                .take
                                .iter()
                                .filter_map(|s| theirs_held.iter().find(|m| m.shard == *s).cloned())
                                .collect();
                            (vec![swap.give.to_owned()], back)
                        });
                        break;
                    }
                    // What the last round would read could not be planned on: read it at a
                    // later comparison.
                    if round == 2 || !self.read_rows(&taker, &to_read).await {
                        break;
                    }
                    read_now.extend(to_read);
                }
                let Some(found) = found else {
                    tracing::debug!(owner = %config.owner, %taker, mine = mine.weight, theirs = theirs.weight, movable = movable.len(), "no exchange found");
                    return;
                };
                found
            }
        };
        // An eventually consistent reading decides nothing alone: confirm the member is there,
        // renewing, and not leaving, and (a move) plan it again on what the consistent read
        // says it weighs (a replica's lag may have hidden a take): the shards that still hold.
        let Some(Ok(row)) = self.quick(shared.store.read(&key)).await else {
            return;
        };
        let now = Instant::now();
        let confirmed = match self.as_taker(row.as_ref(), &taker, now) {
            Taker::Weighed(side) if back.is_empty() => {
                shards = load_plan::planned(beside, mine, side, &movable, fill)
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                !shards.is_empty()
            }
            Taker::Weighed(_) => true,
            // Only a count of pokes its member has left unacted on for a few renew intervals
            // (see `weigh`), not a new one.
            Taker::Receiving(_) => self.peers.get(&taker).is_some_and(|peer| {
                peer.receiving.map(|(count, _)| count) == row.as_ref().map(|r| r.pokes)
                    && !peer.awaits(now, config.renew_interval)
            }),
            Taker::Leaving | Taker::Unweighed | Taker::Gone => false,
        };
        if !confirmed {
            return;
        }
        // The third members an exchange's shards taken back go on to, and what each is sent.
        let mut sent: Vec<(String, f64)> = Vec::new();
        // What the shards of `names` among those that may go weigh (the exchange's shard, and
        // what a move sends its taker: `Cooling`).
        let weights: Vec<(String, f64)> = movable
            .iter()
            .map(|m| (m.shard.clone(), load_plan::weight(&m.load)))
            .collect();
        let weight_of = |names: &[String]| -> f64 {
            (weights.iter())
                .filter(|(shard, _)| names.contains(shard))
                .map(|(_, weight)| weight)
                .sum()
        };
        if !back.is_empty() {
            // Each shard taken back goes on to a third member with room, where one has it
            // (`load_plan::onward`), instead of staying here the three minutes a handed shard
            // stays.
            let given = weight_of(&shards);
            let left_out = [std::slice::from_ref(&taker), &reserved].concat();
            // Not after a read cut off (a slow table): everything comes back here.
            let onward = match slow {
                true => vec![None; back.len()],
                false => self.onward(mine, given, &back, &left_out).await,
            };
            let (landed, away) = self.take_back(&back, &onward, &taker, &mut sent).await;
            // With the marks that landed (some may not have), the shard planned may no longer
            // suit: give the one that does best with what comes back, if any. What may come
            // here: every mark but those that landed naming a third member (one refused may be
            // a row already wanted by this instance, an earlier mark whose answer was lost).
            let asked = back.iter().map(|m| load_plan::weight(&m.load)).sum::<f64>()
                - away.iter().map(load_plan::weight).sum::<f64>();
            // Holding a shard that turns hot, the exchange was planned to give that one (see
            // above): nothing else, whatever landed, or it would keep it (then nothing, and
            // what landed comes all the same).
            let movable: Vec<Movable> = match rising.is_empty() {
                true => movable,
                false => movable
                    .into_iter()
                    .filter(|m| shards.contains(&m.shard))
                    .collect(),
            };
            match load_plan::give_for(mine, theirs, &movable, &landed, &away, asked) {
                Some(best) => shards = vec![best.to_owned()],
                None => {
                    // What went on goes all the same.
                    Cooling::also(&mut self.cooling, sent, now, config.renew_interval * 2);
                    return;
                }
            }
            tracing::info!(%taker, asked = back.len(), marked = landed.len(), sent_on = away.len(), shard = %shards[0], "asked for shards in exchange");
        }
        let mut given = Vec::new();
        for shard in shards {
            if self.give(&shard, &taker).await {
                tracing::info!(%shard, %taker, mine = mine.weight, theirs = theirs.weight, "giving a shard to balance load");
                given.push(shard);
            }
        }
        if given.is_empty() {
            // What went on goes all the same.
            Cooling::also(&mut self.cooling, sent, now, config.renew_interval * 2);
        } else {
            let weight = weight_of(&given);
            self.far_blocked = 0;
            let loaded = std::iter::once((taker.clone(), weight))
                .chain(sent)
                .collect();
            self.giving = Some(Giving {
                shards: given,
                at: now,
                loaded,
            });
            self.balance_soon = Some(config.renew_interval.max(config.take_interval));
        }
    }

    /// The members that may take a shard now, with what they weigh and what the last listing
    /// showed them to hold (weighed, no hand-over on its way in, none of those the last moves
    /// loaded a moment ago: `Cooling`, and not among `left_out`), and the fleet's mean beside this instance
    /// weighing `mine`; drawn for a move within the mean when it gives `beside` heavier
    /// members.
    fn listed_takers(&self, now: Instant, mine: Side, left_out: &[String], beside: bool) -> Listed {
        let renew = self.shared.config.renew_interval;
        let peers = self
            .peers
            .iter()
            .filter(|(member, _)| !left_out.contains(member))
            .filter(|(_, peer)| !peer.awaits(now, renew))
            .filter(|(member, _)| !Cooling::holds_back(&self.cooling, member, now))
            .filter_map(|(member, peer)| {
                let side = peer.side?;
                Some((member.clone(), side, self.held_as_weighed(member, side)))
            })
            .collect();
        // The fleet's mean, to which a move fills its taker (`load_plan::bundle`).
        let fill = load_plan::mean(mine, self.peers.values().filter_map(|peer| peer.side));
        Listed {
            peers,
            fill,
            beside,
        }
    }

    /// Whether this instance, far above the mean or not (`far_out`), reads the members that
    /// keep it from giving and compares again soon: while far above it, for at most
    /// [`FAR_COMPARISONS`] in a row (the count read again after the reads, which may restart it).
    fn compares_fast(&self, far_out: bool) -> bool {
        far_out && self.far_blocked < FAR_COMPARISONS
    }

    /// Marks `shard` wanted by `taker` and nudges its keeper, which hands it over: true when it
    /// is on its way (or may be: an answer lost or cut off counts as landed, and this instance
    /// waits for it as for one that did).
    async fn give(&self, shard: &str, taker: &str) -> bool {
        let shared = &self.shared;
        let Ok(row_key) = shared.key(shard) else {
            return false;
        };
        let marked = self
            .quick(shared.store.request(&row_key, taker, &shared.config.owner))
            .await;
        let giving = match marked {
            Some(Ok(Outcome::Written(_))) => true,
            // Marked already (by an asker, or by an earlier mark of ours whose answer was
            // lost): the keeper hands it over to whoever it names.
            Some(Ok(Outcome::Lost(lost))) => {
                lost.holder.as_deref() == Some(shared.config.owner.as_str())
            }
            Some(Err(error)) => {
                tracing::warn!(%shard, %taker, error = %ErrorChain(&error), "marking a shard to give failed");
                true
            }
            // No answer in time: it may land; wait as for one that did.
            None => true,
        };
        // The keeper of a quiet row writes it only when told; it hands the row over at that
        // write when the mark landed (also when the answer was lost), and at the next listing
        // otherwise.
        if giving {
            if let Some(held) = shared.held().get(shard) {
                held.nudge.notify_one();
            }
        }
        giving
    }

    /// Reads `member`'s row (eventually consistent) and keeps what it weighs among the peers
    /// (`None`: not a taker now);
    /// `Some` with its side and the number of shards it says it holds when it is a taker that
    /// publishes loads. A member publishing none (an earlier release) turns the comparisons
    /// off: shards are asked for by count (`loads_seen`).
    async fn weigh(&mut self, member: &str) -> Option<(Side, Option<u64>)> {
        let shared = self.shared.clone();
        let Ok(key) = crate::member::member_key(&shared.config.stream, member) else {
            self.peers
                .insert(member.to_owned(), Peer::absent(Instant::now()));
            return None;
        };
        let read = self.quick(shared.store.read_eventually(&key)).await;
        // When the answer came, not when the comparison began: a reading must never make a
        // row seem to stand still longer than it did (`Link`), and reads here run one after
        // another.
        let now = Instant::now();
        let Some(Ok(row)) = read else {
            // Failed or cut off: read the others before this one again, what it weighed kept.
            let peer = self
                .peers
                .entry(member.to_owned())
                .or_insert(Peer::absent(now));
            peer.at = now;
            return None;
        };
        // The number of shards it says it holds: whether the last listing still shows them.
        let count = row.as_ref().and_then(|r| r.load.as_ref()?.shards);
        match self.as_taker(row.as_ref(), member, now) {
            taker @ (Taker::Weighed(side) | Taker::Receiving(side)) => {
                self.loads_seen = true;
                shared
                    .poke_hand_overs
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                let pokes = row.as_ref().map_or(0, |r| r.pokes);
                // Receiving since the first reading that showed this count unacted on.
                let since = match self.peers.get(member).and_then(|p| p.receiving) {
                    Some((count, since)) if count == pokes => since,
                    _ => now,
                };
                let peer = Peer {
                    side: Some(side),
                    receiving: matches!(taker, Taker::Receiving(_)).then_some((pokes, since)),
                    at: now,
                };
                self.peers.insert(member.to_owned(), peer);
                (!peer.awaits(now, shared.config.renew_interval)).then_some((side, count))
            }
            Taker::Unweighed => {
                self.peers.insert(member.to_owned(), Peer::absent(now));
                self.loads_seen = false;
                shared
                    .poke_hand_overs
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                None
            }
            Taker::Leaving | Taker::Gone => {
                self.peers.insert(member.to_owned(), Peer::absent(now));
                None
            }
        }
    }

    /// `call`, cut off after a take interval: `None` when it did not answer by then.
    async fn quick<T>(&self, call: impl Future<Output = LeaseResult<T>>) -> Option<LeaseResult<T>> {
        tokio::time::timeout(self.shared.config.take_interval, call)
            .await
            .ok()
    }

    /// What `row` (read at `now`) says of `taker` as a taker.
    fn as_taker(&self, row: Option<&Lease>, taker: &str, now: Instant) -> Taker {
        let Some(row) = row else {
            return Taker::Gone;
        };
        let live = row.is_held_by(taker)
            && row
                .token
                .as_deref()
                .is_some_and(crate::roster::is_roster_token)
            && self
                .link
                .record_eventual(row, now)
                .is_some_and(|since| now.duration_since(since) < self.shared.config.lease_duration);
        match (live, row.load.as_ref()) {
            (false, _) => Taker::Gone,
            (true, Some(load)) if load.capacity_milli == Some(0) => Taker::Leaving,
            (true, load) => match load.and_then(|load| Some((Side::of(load)?, load))) {
                None => Taker::Unweighed,
                Some((side, load)) if load_plan::receiving(row.pokes, load) => {
                    Taker::Receiving(side)
                }
                Some((side, _)) => Taker::Weighed(side),
            },
        }
    }
}
