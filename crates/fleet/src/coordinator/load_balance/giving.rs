//! `Giving` and `Cooling`: a move or exchange on its way, and the members it loaded until
//! their rows show it.
//!
//! A member's row shows a shard handed to it only after its take and its next renewal, so for
//! a moment it weighs as light as before the move: given to again then, it would take a second
//! load on top of the first. The members a move or exchange loads (its taker, and each third
//! member the shards an exchange takes back go on to: `load_plan::onward`) are therefore not
//! drawn as takers for two renew intervals after the move has gone (or until the next move
//! has: [`Cooling::each`]), and weighed with what they were sent where an exchange looks for
//! room.

use tokio::time::Instant;

/// A move or exchange this instance marked, on its way (see `load_balance`).
#[derive(Debug, Clone)]
pub(in crate::coordinator) struct Giving {
    /// This instance's shards marked to go.
    pub(in crate::coordinator) shards: Vec<String>,
    /// When they were marked.
    pub(in crate::coordinator) at: Instant,
    /// The members the move loads, each with the weight it sends them: the taker (first), and
    /// each third member shards taken back go on to.
    pub(in crate::coordinator) loaded: Vec<(String, f64)>,
}

/// A member loaded by the last move or exchange, not drawn as a taker `until` its row may show
/// it (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(in crate::coordinator) struct Cooling {
    /// The member.
    pub(in crate::coordinator) member: String,
    /// Until when.
    pub(in crate::coordinator) until: Instant,
    /// The weight sent to it.
    pub(in crate::coordinator) weight: f64,
}

impl Cooling {
    /// Each of `loaded` (a member and the weight sent to it), cooling for `span` from `now`.
    ///
    /// A move's list replaces the last one's: a member loaded by a move before cools from that
    /// move until the next one's shard has gone (a renew interval at least, by which its row
    /// may show what it took), not for its whole span. Kept to its span, the members shedding
    /// shards one a renew interval drew from fewer takers, and the load simulation's steady
    /// seeds settled later (after the start in 50 s at the 90th percentile, 47 s with this;
    /// 2,394 of seeds 0..2400 passing, 2,396 with this).
    pub(in crate::coordinator) fn each(
        loaded: Vec<(String, f64)>,
        now: Instant,
        span: std::time::Duration,
    ) -> Vec<Cooling> {
        loaded
            .into_iter()
            .map(|(member, weight)| Cooling {
                member,
                until: now + span,
                weight,
            })
            .collect()
    }

    /// Adds each of `loaded` to `cooling` (as [`each`](Self::each)), for an exchange that sent
    /// shards on to them and gave nothing (no move to wait for), and drops the entries that
    /// ended.
    pub(in crate::coordinator) fn also(
        cooling: &mut Vec<Cooling>,
        loaded: Vec<(String, f64)>,
        now: Instant,
        span: std::time::Duration,
    ) {
        cooling.retain(|c| now < c.until);
        cooling.extend(Cooling::each(loaded, now, span));
    }

    /// The weight cooling members of `cooling` were sent at `now` (0 for any other member).
    pub(in crate::coordinator) fn sent_to(cooling: &[Cooling], member: &str, now: Instant) -> f64 {
        cooling
            .iter()
            .filter(|c| c.member == member && now < c.until)
            .map(|c| c.weight)
            .sum()
    }

    /// Whether `member` is cooling at `now`.
    pub(in crate::coordinator) fn holds_back(
        cooling: &[Cooling],
        member: &str,
        now: Instant,
    ) -> bool {
        cooling.iter().any(|c| c.member == member && now < c.until)
    }
}
