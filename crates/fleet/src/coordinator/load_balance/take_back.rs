//! An exchange's marks: where each shard it takes back goes (this instance, or a third member
//! with room: `load_plan::onward`), and the marks themselves.

use std::collections::BTreeSet;

use kinesis_lease_core::{ErrorChain, Load, Outcome};
use tokio::time::Instant;

use crate::load_plan::{self, Movable, Side};

use super::{Cooling, State, Taker};

impl State {
    /// Where each of `back`, the shards an exchange takes back, goes: `Some` third member
    /// instead of this instance where one has room (`load_plan::onward`), among the members a
    /// move may go to but `left_out` (the taker, and those left to heavier members). Planned on
    /// what this instance last read of each, then again on a consistent read of each member so
    /// chosen (as the taker is confirmed: a replica's lag may hide a take), with only those
    /// read then as places; none read in time, everything comes back here. No read after one
    /// that failed or took half a take interval (a slow table): each is one more call between
    /// the taker's confirmation and the marks.
    pub(super) async fn onward(
        &mut self,
        mine: Side,
        given: f64,
        back: &[Movable],
        left_out: &[String],
    ) -> Vec<Option<String>> {
        let now = Instant::now();
        let listed = self.listed_takers(now, mine, left_out, false);
        // The members loaded a moment ago are no takers of a move until their rows show it,
        // but they may have room for a shard taken back: weighed with what they were sent
        // (receiving: the hand-over from here, as far as this instance can tell).
        // Each once (a member loaded by a move and by an exchange that gave nothing after it
        // has two entries): listed twice, it would be planned two shards each against its
        // weight alone.
        let mut cooled: Vec<String> = Vec::new();
        for c in &self.cooling {
            if now < c.until && !left_out.contains(&c.member) && !cooled.contains(&c.member) {
                cooled.push(c.member.clone());
            }
        }
        let cooling = self.cooling.clone();
        let with_sent = move |member: &str, side: Side| Side {
            weight: side.weight + Cooling::sent_to(&cooling, member, now),
            ..side
        };
        let mut thirds: Vec<(&String, Side)> = listed
            .peers
            .iter()
            .map(|(member, side, _)| (member, *side))
            .collect();
        for member in &cooled {
            if let Some(side) = self.peers.get(member).and_then(|p| p.side) {
                thirds.push((member, with_sent(member, side)));
            }
        }
        let chosen: BTreeSet<String> = load_plan::onward(mine, given, back, &thirds)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let mut read: Vec<(String, Side)> = Vec::new();
        for member in chosen {
            let Ok(key) = crate::member::member_key(&self.shared.config.stream, &member) else {
                continue;
            };
            let asked = Instant::now();
            let Some(Ok(row)) = self.quick(self.shared.store.read(&key)).await else {
                // Cut off or failed: no more reads at this comparison.
                break;
            };
            let slow = asked.elapsed() >= self.shared.config.take_interval / 2;
            // Receiving a hand-over: only one from here, whose weight is known.
            let ours = cooled.contains(&member);
            match self.as_taker(row.as_ref(), &member, Instant::now()) {
                Taker::Weighed(side) => read.push((member.clone(), with_sent(&member, side))),
                Taker::Receiving(side) if ours => {
                    read.push((member.clone(), with_sent(&member, side)));
                }
                _ => {}
            }
            // Slow (half a take interval): the others are not read.
            if slow {
                break;
            }
        }
        let thirds: Vec<(&String, Side)> = read.iter().map(|(m, side)| (m, *side)).collect();
        tracing::debug!(owner = %self.shared.config.owner, mine = mine.weight, given, back = ?back.iter().map(|m| load_plan::weight(&m.load)).collect::<Vec<_>>(), read = ?thirds.iter().map(|(m, s)| (m.as_str(), s.weight)).collect::<Vec<_>>(), "where the shards taken back go");
        load_plan::onward(mine, given, back, &thirds)
            .into_iter()
            .map(|to| to.cloned())
            .collect()
    }

    /// An exchange's first half: marks each of the taker's shards in `back` wanted by this
    /// instance, or by the third member `onward` names for it (the taker's keepers hand them
    /// over, as to any asker), and returns the loads of those whose marks landed: naming this
    /// instance, and naming a third member. The caller gives a shard of its own only when, with
    /// what landed, that still leaves the taker lighter than this instance was
    /// (`load_plan::give_for`): never a move that raises the largest weight. Marks that landed
    /// bring their shards even when no shard is given then (there is no taking a mark back):
    /// this instance is heavier for a while, and gives again. Stops marking when this instance
    /// may no longer take (leaving, or its member row not renewed). Adds to `sent` each third
    /// member a mark named that may have landed, with the weight of the shards marked for it
    /// (the taker's rows may be handed to it before this instance's shard has gone: `Cooling`).
    pub(super) async fn take_back(
        &mut self,
        back: &[Movable],
        onward: &[Option<String>],
        taker: &str,
        sent: &mut Vec<(String, f64)>,
    ) -> (Vec<Load>, Vec<Load>) {
        let shared = self.shared.clone();
        let (mut landed, mut away) = (Vec::new(), Vec::new());
        for (m, to) in back.iter().zip(onward) {
            if !shared.member.borrow().may_take() {
                break;
            }
            let Ok(key) = shared.key(&m.shard) else {
                continue;
            };
            let asker = to.as_deref().unwrap_or(&shared.config.owner);
            let lost = match self.quick(shared.store.request(&key, asker, taker)).await {
                Some(Ok(Outcome::Written(_))) => {
                    crate::coordinator::store_calls::poke_holder(&shared, &key, taker);
                    match to {
                        None => landed.push(m.load),
                        Some(_) => away.push(m.load),
                    }
                    false
                }
                Some(Ok(Outcome::Lost(_))) => true,
                outcome => {
                    // It may have landed (the answer lost, or cut off): poke as for one that
                    // did, so that a quiet keeper does not hold the mark unanswered; counted
                    // as not landed, so the give below errs towards a lighter taker.
                    if let Some(Err(error)) = outcome {
                        tracing::warn!(shard = %m.shard, %taker, error = %ErrorChain(&error), "asking for a shard in exchange failed");
                    }
                    crate::coordinator::store_calls::poke_holder(&shared, &key, taker);
                    false
                }
            };
            if let (Some(to), false) = (to, lost) {
                let weight = load_plan::weight(&m.load);
                match sent.iter_mut().find(|(member, _)| member == to) {
                    Some((_, sent)) => *sent += weight,
                    None => sent.push((to.clone(), weight)),
                }
            }
        }
        (landed, away)
    }
}
