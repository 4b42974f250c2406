//! Parking: where a failed record waits for its next attempt without holding a worker, and
//! what it holds back meanwhile.
//!
//! # Why
//!
//! A record retried in place keeps its loop busy through every backoff: one failing key
//! stalled a whole serial subscription, a whole lane of keys, or (under `workers(n)`) every
//! worker once n of its records failed. Instead, a failed record is *parked* until its next
//! attempt is due, and its loop goes on with other records. What it holds back is the smallest
//! unit the mode's order allows ([`Hold`]): nothing (unordered workers), its partition key
//! (lanes by key), or its shard (serial). Later records of a held unit wait *behind* it, in
//! order; once the unit has no parked record left they are *ready* again.
//!
//! # Fair once released
//!
//! Ready units take turns, one record each, and a record of a unit with ready records queues
//! after them (its order kept); the loops alternate between ready records and new ones. Ready
//! records used to come out first in, first out, ahead of anything new: a shard released with
//! 68 records behind it went wholly before a shard released a moment later, and the serial
//! loop spent 17 s of slow handlers before the second shard's next record (seed 25285 of the
//! fleet simulation, 16.1 s without progress against a bound of 16).
//!
//! # Bounded
//!
//! Records waiting behind a parked one are unsettled, so they stay in their shard's settlement
//! window, and a shard's reader stops reading once that window is full (`max_unsettled`): what
//! parks and queues here is bounded by the windows of the shards it came from, and a failing
//! shard fills only its own.
//!
//! Pure bookkeeping, no I/O and no clock of its own: the loops in `dispatcher` decide when to
//! attempt, this decides what may run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use tokio::time::Instant;

use crate::Delivery;

/// What a failed record holds back while it waits for its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Nothing: unordered workers.
    Nothing,
    /// Its partition key's later records: lanes by key.
    Key,
    /// Its shard's later records: the serial loop.
    Shard,
}

/// Records parked together (one record, or the failed records of a batch) until their next
/// attempt is due.
#[derive(Debug)]
pub(crate) struct Parked {
    /// The records to attempt again.
    pub(crate) deliveries: Vec<Delivery>,
    /// Attempts made so far.
    pub(crate) attempt: u32,
}

/// A held unit: how many of its records are parked, and its records waiting behind them.
#[derive(Debug, Default)]
struct Unit {
    parked: usize,
    behind: VecDeque<Delivery>,
}

/// One loop's parked records and what waits behind them (see the module docs).
#[derive(Debug)]
pub(crate) struct Parking {
    hold: Hold,
    /// Parked records by when their next attempt is due (then in parking order).
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    parked: HashMap<u64, Parked>,
    next: u64,
    units: HashMap<Box<str>, Unit>,
    /// Ready records by unit, in order (under `Hold::Nothing` nothing is held, so nothing is
    /// ever ready).
    ready: HashMap<Box<str>, VecDeque<Delivery>>,
    /// Units with ready records, in the order they take their next turn.
    turns: VecDeque<Box<str>>,
}

impl Parking {
    pub(crate) fn new(hold: Hold) -> Self {
        Self {
            hold,
            due: BinaryHeap::new(),
            parked: HashMap::new(),
            next: 0,
            units: HashMap::new(),
            ready: HashMap::new(),
            turns: VecDeque::new(),
        }
    }

    /// True when nothing is parked, waiting or ready: the hot path checks only this.
    pub(crate) fn is_idle(&self) -> bool {
        self.parked.is_empty() && self.ready.is_empty() && self.units.is_empty()
    }

    fn unit_of<'a>(&self, delivery: &'a Delivery) -> Option<&'a str> {
        match self.hold {
            Hold::Nothing => None,
            Hold::Key => Some(delivery.partition_key()),
            Hold::Shard => Some(delivery.shard()),
        }
    }

    /// `delivery` back when it may run now; `None` when its unit is held (it was queued
    /// behind) or has ready records (it was queued after them).
    pub(crate) fn admit(&mut self, delivery: Delivery) -> Option<Delivery> {
        if self.units.is_empty() && self.ready.is_empty() {
            return Some(delivery);
        }
        let Some(unit) = self.unit_of(&delivery) else {
            return Some(delivery);
        };
        if let Some(held) = self.units.get_mut(unit) {
            held.behind.push_back(delivery);
            return None;
        }
        if let Some(ready) = self.ready.get_mut(unit) {
            ready.push_back(delivery);
            return None;
        }
        Some(delivery)
    }

    /// `delivery`, already admitted, back when it may still run now: `None` when a record
    /// run before it (of a unit taken with it) failed and holds its unit, and it was queued
    /// behind. Unlike [`admit`](Self::admit) it ignores ready records: it was taken before
    /// them, or with them.
    pub(crate) fn still_free(&mut self, delivery: Delivery) -> Option<Delivery> {
        let Some(unit) = self.unit_of(&delivery) else {
            return Some(delivery);
        };
        match self.units.get_mut(unit) {
            Some(held) => {
                held.behind.push_back(delivery);
                None
            }
            None => Some(delivery),
        }
    }

    /// Parks records that failed for the first time (after `attempt` attempts) until `due`:
    /// their units are held from now on.
    pub(crate) fn park(&mut self, deliveries: Vec<Delivery>, attempt: u32, due: Instant) {
        for delivery in &deliveries {
            if let Some(unit) = self.unit_of(delivery) {
                self.units.entry(unit.into()).or_default().parked += 1;
            }
        }
        self.park_again(deliveries, attempt, due);
    }

    /// Parks records taken from here by [`take_due`](Self::take_due) that failed again: their
    /// units stay held.
    pub(crate) fn park_again(&mut self, deliveries: Vec<Delivery>, attempt: u32, due: Instant) {
        if !deliveries.is_empty() {
            let id = self.next;
            self.next += 1;
            self.due.push(Reverse((due, id)));
            self.parked.insert(
                id,
                Parked {
                    deliveries,
                    attempt,
                },
            );
        }
    }

    /// A record taken from here by [`take_due`](Self::take_due) is done (settled, skipped,
    /// dead-lettered, left unsettled for good, or its lease lost): once its unit has no parked
    /// record left, what waits behind it is ready.
    pub(crate) fn unpark(&mut self, delivery: &Delivery) {
        let Some(unit) = self.unit_of(delivery) else {
            return;
        };
        let Some(held) = self.units.get_mut(unit) else {
            return;
        };
        held.parked = held.parked.saturating_sub(1);
        if held.parked == 0 {
            let Some(mut held) = self.units.remove(unit) else {
                return;
            };
            if held.behind.is_empty() {
                return;
            }
            match self.ready.get_mut(unit) {
                // Held again while it had ready records (which come first): its turn stands.
                Some(ready) => ready.append(&mut held.behind),
                None => {
                    self.ready.insert(unit.into(), held.behind);
                    self.turns.push_back(unit.into());
                }
            }
        }
    }

    /// When the next parked attempt is due. A record whose lease was lost meanwhile waits for
    /// it too, and is then dropped (the retry sees the lost lease): at most one backoff.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((due, _))| *due)
    }

    /// The parked records whose next attempt is due at `now` (the earliest first), if any.
    pub(crate) fn take_due(&mut self, now: Instant) -> Option<Parked> {
        let Reverse((due, id)) = *self.due.peek()?;
        if due > now {
            return None;
        }
        self.due.pop();
        self.parked.remove(&id)
    }

    /// True when records released from behind a parked one wait for their turns.
    pub(crate) fn has_ready(&self) -> bool {
        !self.turns.is_empty()
    }

    /// The next ready record, which may run now: the oldest of the unit whose turn it is,
    /// units taking turns one record each. A unit held again meanwhile puts its ready records
    /// back behind its parked one, ahead of what queued behind it since.
    pub(crate) fn next_ready(&mut self) -> Option<Delivery> {
        while let Some(unit) = self.turns.pop_front() {
            let Some(mut ready) = self.ready.remove(&unit) else {
                continue;
            };
            if let Some(held) = self.units.get_mut(&unit) {
                ready.append(&mut held.behind);
                held.behind = ready;
                continue;
            }
            let next = ready.pop_front();
            if !ready.is_empty() {
                self.ready.insert(unit.clone(), ready);
                self.turns.push_back(unit);
            }
            if next.is_some() {
                return next;
            }
        }
        None
    }

    /// Up to `max` ready records that may run now, from `first` on: a batch of them.
    pub(crate) fn ready_batch(&mut self, first: Delivery, max: usize) -> Vec<Delivery> {
        let mut batch = vec![first];
        while batch.len() < max {
            let Some(next) = self.next_ready() else {
                break;
            };
            batch.push(next);
        }
        batch
    }

    /// Records parked, waiting behind or ready.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.parked
            .values()
            .map(|p| p.deliveries.len())
            .sum::<usize>()
            + self.ready.values().map(VecDeque::len).sum::<usize>()
            + self.units.values().map(|u| u.behind.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, ShardSettlement};
    use kinesis_lease_core::SequenceNumber;
    use std::sync::Arc;
    use std::time::Duration;

    fn delivery(settlement: &Arc<ShardSettlement>, key: &str, n: u64) -> Delivery {
        let sequence = SequenceNumber::new(n.to_string(), None).unwrap();
        let ordinal = settlement.register(sequence.clone());
        Delivery::new(Record::new("x", key, sequence), settlement.clone(), ordinal)
    }

    fn seq(d: &Delivery) -> String {
        d.sequence().to_string()
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_key_holds_back_only_its_own_later_records_in_order() {
        let s = ShardSettlement::new("s", "shard-0");
        let mut p = Parking::new(Hold::Key);
        assert!(p.is_idle());
        let bad = delivery(&s, "bad", 1);
        p.park(
            vec![bad.clone()],
            1,
            Instant::now() + Duration::from_secs(1),
        );
        assert!(p.admit(delivery(&s, "bad", 2)).is_none());
        assert!(p.admit(delivery(&s, "good", 3)).is_some());
        assert!(p.admit(delivery(&s, "bad", 4)).is_none());
        assert_eq!(p.len(), 3);
        assert!(p.take_due(Instant::now()).is_none(), "not due yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        let due = p.take_due(Instant::now()).expect("due");
        assert_eq!(due.attempt, 1);
        // Still failing: parked again, the key stays held.
        p.park_again(due.deliveries, 2, Instant::now() + Duration::from_secs(2));
        assert!(p.admit(delivery(&s, "bad", 5)).is_none());
        assert!(p.next_ready().is_none());
        tokio::time::advance(Duration::from_secs(2)).await;
        let due = p.take_due(Instant::now()).expect("due");
        for d in &due.deliveries {
            p.unpark(d);
        }
        let ready: Vec<String> = std::iter::from_fn(|| p.next_ready())
            .map(|d| seq(&d))
            .collect();
        assert_eq!(ready, ["2", "4", "5"]);
        assert!(p.is_idle());
    }

    /// Two shards released one after the other take turns, each in its own order, and a new
    /// record of a shard with ready records queues after them. First in, first out, shard b
    /// waited for all five of a's: seed 25285 of the fleet simulation.
    #[tokio::test(start_paused = true)]
    async fn released_units_take_turns_one_record_each() {
        let (a, b) = (
            ShardSettlement::new("s", "shard-a"),
            ShardSettlement::new("s", "shard-b"),
        );
        let mut p = Parking::new(Hold::Shard);
        p.park(vec![delivery(&a, "k", 1)], 1, Instant::now());
        p.park(vec![delivery(&b, "k", 10)], 1, Instant::now());
        for n in 2..7 {
            assert!(p.admit(delivery(&a, "k", n)).is_none());
        }
        for n in 11..13 {
            assert!(p.admit(delivery(&b, "k", n)).is_none());
        }
        for parked in [p.take_due(Instant::now()), p.take_due(Instant::now())] {
            p.unpark(&parked.expect("due").deliveries[0]);
        }
        assert!(p.has_ready());
        assert!(
            p.admit(delivery(&b, "k", 13)).is_none(),
            "after b's ready ones"
        );
        assert!(p
            .admit(delivery(&ShardSettlement::new("s", "shard-c"), "k", 20))
            .is_some());
        let order: Vec<String> = std::iter::from_fn(|| p.next_ready())
            .map(|d| seq(&d))
            .collect();
        assert_eq!(order, ["2", "11", "3", "12", "4", "13", "5", "6"]);
        assert!(p.is_idle());
    }

    /// A ready unit held again before its turn puts its ready records back behind its parked
    /// one, ahead of what queued behind since, and they come out in order once it is released.
    #[tokio::test(start_paused = true)]
    async fn a_ready_unit_held_again_keeps_its_order() {
        let a = ShardSettlement::new("s", "shard-a");
        let mut p = Parking::new(Hold::Shard);
        p.park(vec![delivery(&a, "k", 1)], 1, Instant::now());
        for n in 2..5 {
            assert!(p.admit(delivery(&a, "k", n)).is_none());
        }
        let due = p.take_due(Instant::now()).expect("due");
        p.unpark(&due.deliveries[0]);
        let second = p.next_ready().expect("2 is ready");
        assert_eq!(seq(&second), "2");
        // 2 fails: a is held again with 3 and 4 still ready; 5 arrives meanwhile.
        p.park(vec![second], 1, Instant::now());
        assert!(p.admit(delivery(&a, "k", 5)).is_none());
        assert!(p.next_ready().is_none(), "a is held");
        let due = p.take_due(Instant::now()).expect("due");
        p.unpark(&due.deliveries[0]);
        let order: Vec<String> = std::iter::from_fn(|| p.next_ready())
            .map(|d| seq(&d))
            .collect();
        assert_eq!(order, ["3", "4", "5"]);
        assert!(p.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn the_serial_loop_holds_back_a_shard_and_unordered_workers_nothing() {
        let (a, b) = (
            ShardSettlement::new("s", "shard-a"),
            ShardSettlement::new("s", "shard-b"),
        );
        let mut serial = Parking::new(Hold::Shard);
        serial.park(vec![delivery(&a, "k1", 1)], 1, Instant::now());
        assert!(serial.admit(delivery(&a, "k2", 2)).is_none(), "same shard");
        assert!(serial.admit(delivery(&b, "k1", 3)).is_some(), "other shard");
        let mut unordered = Parking::new(Hold::Nothing);
        unordered.park(vec![delivery(&a, "k1", 4)], 1, Instant::now());
        assert!(unordered.admit(delivery(&a, "k1", 5)).is_some());
        assert!(!unordered.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn parked_records_come_back_by_due_time() {
        let s = ShardSettlement::new("s", "shard-0");
        let mut p = Parking::new(Hold::Nothing);
        let now = Instant::now();
        p.park(vec![delivery(&s, "a", 1)], 3, now + Duration::from_secs(30));
        p.park(vec![delivery(&s, "b", 2)], 1, now + Duration::from_secs(1));
        assert_eq!(p.next_due(), Some(now + Duration::from_secs(1)));
        assert!(p.take_due(now).is_none());
        let first = p.take_due(now + Duration::from_secs(30)).unwrap();
        assert_eq!(seq(&first.deliveries[0]), "2");
        let second = p.take_due(now + Duration::from_secs(30)).unwrap();
        assert_eq!(
            (seq(&second.deliveries[0]), second.attempt),
            ("1".to_owned(), 3)
        );
        assert!(p.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_parked_together_releases_each_unit_when_its_last_record_is_done() {
        let s = ShardSettlement::new("s", "shard-0");
        let mut p = Parking::new(Hold::Key);
        let (x, y) = (delivery(&s, "x", 1), delivery(&s, "y", 2));
        p.park(vec![x.clone(), y.clone()], 1, Instant::now());
        assert!(p.admit(delivery(&s, "x", 3)).is_none());
        assert!(p.admit(delivery(&s, "y", 4)).is_none());
        let due = p.take_due(Instant::now()).unwrap();
        // x settled on the retry, y failed again.
        p.unpark(&due.deliveries[0]);
        p.park_again(vec![due.deliveries[1].clone()], 2, Instant::now());
        let ready: Vec<String> = std::iter::from_fn(|| p.next_ready())
            .map(|d| seq(&d))
            .collect();
        assert_eq!(ready, ["3"]);
        assert!(p.admit(delivery(&s, "y", 5)).is_none());
        assert_eq!(p.len(), 3);
    }
}
