//! `Room`: a lane's free places and the senders waiting for some, in the order they are
//! served.
//!
//! # Why not a semaphore of single places
//!
//! A reader sending a page into a full lane used to wait for one place at a time. With
//! handlers faster than the reader (the common case while a backlog drains) every record
//! handled freed one place and woke the reader, on the other thread, for one record: a thread
//! hop and a contended lock per record, the largest share of the broker's CPU above the raw
//! SDK loop in `drain`. Here a sender that already has records queued in the lane (it is
//! *busy*: the loop has its work in hand) waits for a *batch* of places, a quarter of the
//! lane (half of a small one, at most 4) or what it still has to send, so it wakes once per batch while the loop works through
//! what is queued.
//!
//! Batching must not cost a taken shard its turn: a sender with nothing queued in the lane (a
//! *newcomer*: a shard just taken, or one at the tip of its stream) waits for one place and is
//! served before the busy senders, in the order newcomers began to wait; a busy sender whose
//! shard's records have all been taken meanwhile becomes a newcomer at once (its last turn is
//! no later than the turn being handed out). So a shard whose records are not in the lane
//! waits for at most one freed place per newcomer ahead of it, however many busy senders
//! wait. Newcomers may pass the first busy sender at most a batch's worth of times; after that
//! they queue behind it until it is served, so a stream of shards at the tip cannot starve a
//! shard with a backlog. Busy senders are served in the order they began to wait.
//!
//! Pure bookkeeping, no lock and no I/O: the lane calls it under its queue's lock and wakes
//! the wakers it returns once that lock is released.

use std::collections::VecDeque;
use std::task::{Poll, Waker};

/// A registration in the room's waiting line.
pub(crate) type Ticket = u64;

/// A lane's free places and its waiting senders.
#[derive(Debug)]
pub(crate) struct Room {
    /// Places neither queued nor handed to a sender.
    free: usize,
    /// The lane's capacity.
    capacity: usize,
    /// Senders waiting, in the order they are served: newcomers first.
    waiting: VecDeque<Waiter>,
    /// Places handed to waiting senders that have not come for them yet.
    granted: Vec<(Ticket, usize)>,
    next_ticket: Ticket,
    /// Newcomers served ahead of a waiting busy sender since a busy sender was last served.
    overtaken: usize,
    /// The lowest last turn of a busy waiter (`u64::MAX` when none waits): once the turn being
    /// handed out reaches it, that waiter has nothing queued and becomes a newcomer.
    busy_floor: u64,
}

#[derive(Debug)]
struct Waiter {
    ticket: Ticket,
    /// Places it waits for: one for a newcomer.
    want: usize,
    /// The turn of its shard's last record queued in the lane when it began to wait.
    last_turn: u64,
    newcomer: bool,
    waker: Waker,
}

/// What a sender asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    /// Places the sender could use now (at least one).
    pub(crate) places: usize,
    /// The turn of its shard's last record queued in the lane (0 before its first).
    pub(crate) last_turn: u64,
}

impl Room {
    /// The lane's capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// A room of `capacity` free places (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            free: capacity,
            capacity,
            waiting: VecDeque::new(),
            granted: Vec::new(),
            next_ticket: 0,
            overtaken: 0,
            busy_floor: u64::MAX,
        }
    }

    /// The places a busy sender waits for at most: a quarter of the lane, so the rest keeps
    /// the loop busy while the sender wakes and fills it (half the lane measured no better in
    /// `drain` and worse for batch handlers in `dispatch_overhead`); in a small lane (the lanes
    /// by key hold 8) up to half of it, at most 4, or a reader would wake every second record.
    pub(crate) fn batch(&self) -> usize {
        (self.capacity / 4).max((self.capacity / 2).min(4)).max(1)
    }

    /// Takes up to `places` free places (at least one asked for, at most a batch: the rest
    /// stays for others, and the loop is not left waiting on records held back) if nobody
    /// waits (a sender that finds the room full, or others waiting, waits its turn): how many
    /// it took.
    pub(crate) fn try_take(&mut self, places: usize) -> usize {
        if !self.waiting.is_empty() {
            return 0;
        }
        let taken = self.free.min(places.clamp(1, self.batch()));
        self.free -= taken;
        taken
    }

    /// What `want` gets while the turn being handed out is `now`: `Ready(n)`, places taken
    /// now (or served since `ticket` began to wait; `ticket` is cleared); `Pending` while the
    /// sender waits, `ticket` set to its place in the line and `waker` woken once it is served.
    pub(crate) fn take_or_wait(
        &mut self,
        ticket: &mut Option<Ticket>,
        want: Want,
        now: u64,
        waker: &Waker,
    ) -> Poll<usize> {
        if let Some(mine) = *ticket {
            if let Some(i) = self.granted.iter().position(|(t, _)| *t == mine) {
                *ticket = None;
                return Poll::Ready(self.granted.swap_remove(i).1);
            }
            if let Some(w) = self.waiting.iter_mut().find(|w| w.ticket == mine) {
                w.waker.clone_from(waker);
            }
            return Poll::Pending;
        }
        // Nothing of the shard is queued once its last turn is no later than the turn being
        // handed out (at most one record, at that very turn, when equal).
        let newcomer = want.last_turn <= now;
        // A newcomer needs one place to get its shard going; a busy sender waits for a batch
        // (never more than the lane holds, or it would wait for ever).
        let places = if newcomer {
            1
        } else {
            want.places.clamp(1, self.batch())
        };
        // Served at once if it would be first in line and its places are free.
        let position = self.position(newcomer);
        if position == 0 && self.free >= places {
            self.free -= places;
            self.count_served(newcomer);
            return Poll::Ready(places);
        }
        let mine = self.next_ticket;
        self.next_ticket += 1;
        self.waiting.insert(
            position,
            Waiter {
                ticket: mine,
                want: places,
                last_turn: want.last_turn,
                newcomer,
                waker: waker.clone(),
            },
        );
        if !newcomer {
            self.busy_floor = self.busy_floor.min(want.last_turn);
        }
        *ticket = Some(mine);
        Poll::Pending
    }

    /// Where a new newcomer joins the line: behind every newcomer while newcomers may still
    /// pass the busy senders, else at the back, as a busy one does.
    fn position(&self, newcomer: bool) -> usize {
        if newcomer && self.overtaken < self.batch() {
            self.waiting.iter().take_while(|w| w.newcomer).count()
        } else {
            self.waiting.len()
        }
    }

    /// Counts a sender served: a newcomer passing busy senders uses up their patience, a busy
    /// one served restores it.
    fn count_served(&mut self, newcomer: bool) {
        if !newcomer {
            self.overtaken = 0;
        } else if self.waiting.iter().any(|w| !w.newcomer) {
            self.overtaken += 1;
        }
    }

    /// A sender stops waiting (its send was cancelled or is done): its places, if it was
    /// served and did not come for them, are free again. Wakers of senders served now.
    pub(crate) fn leave(&mut self, ticket: Ticket, now: u64) -> Vec<Waker> {
        if let Some(i) = self.waiting.iter().position(|w| w.ticket == ticket) {
            self.waiting.remove(i);
            self.busy_floor = self.lowest_busy_turn();
            // The next in line may have been waiting behind it only.
            return self.serve(now);
        }
        match self.granted.iter().position(|(t, _)| *t == ticket) {
            Some(i) => {
                let (_, places) = self.granted.swap_remove(i);
                self.give_back(places, now)
            }
            None => Vec::new(),
        }
    }

    /// `places` are free again (taken from the queue, or not used) and the turn being handed
    /// out is `now`: wakers of the senders served now.
    pub(crate) fn give_back(&mut self, places: usize, now: u64) -> Vec<Waker> {
        self.free += places;
        self.serve(now)
    }

    /// Busy waiters whose records have all been taken become newcomers: one place each, and
    /// ahead of the busy ones while newcomers may pass them.
    fn promote(&mut self, now: u64) {
        if now < self.busy_floor {
            return;
        }
        let mut promoted = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &mut self.waiting[i];
            if !w.newcomer && w.last_turn <= now {
                w.newcomer = true;
                w.want = 1;
                if self.overtaken < self.batch() {
                    if let Some(w) = self.waiting.remove(i) {
                        promoted.push(w);
                    }
                    continue;
                }
            }
            i += 1;
        }
        for w in promoted {
            let at = self.position(true);
            self.waiting.insert(at, w);
        }
        self.busy_floor = self.lowest_busy_turn();
    }

    fn lowest_busy_turn(&self) -> u64 {
        self.waiting
            .iter()
            .filter(|w| !w.newcomer)
            .map(|w| w.last_turn)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Serves waiters in line order while the first one's places are free.
    fn serve(&mut self, now: u64) -> Vec<Waker> {
        self.promote(now);
        let mut woken = Vec::new();
        while let Some(first) = self.waiting.front() {
            if self.free < first.want {
                break;
            }
            let Some(first) = self.waiting.pop_front() else {
                break;
            };
            self.free -= first.want;
            self.count_served(first.newcomer);
            self.granted.push((first.ticket, first.want));
            woken.push(first.waker);
        }
        if !woken.is_empty() {
            self.busy_floor = self.lowest_busy_turn();
        }
        woken
    }

    /// The lane closed: every waiting sender, to wake (it will find the lane closed).
    pub(crate) fn close(&mut self) -> Vec<Waker> {
        self.waiting.drain(..).map(|w| w.waker).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn wake_all(wakers: Vec<Waker>) -> usize {
        let n = wakers.len();
        wakers.into_iter().for_each(Waker::wake);
        n
    }

    /// The turn being handed out in these tests.
    const NOW: u64 = 1;
    /// A sender with records queued up to turn 100.
    const BUSY: Want = Want {
        places: 1_000,
        last_turn: 100,
    };
    /// A sender with nothing queued.
    const NEW: Want = Want {
        places: 1_000,
        last_turn: 0,
    };

    /// A full room of 64.
    fn full() -> Room {
        let mut room = Room::new(64);
        for _ in 0..64 {
            assert_eq!(room.try_take(1), 1);
        }
        room
    }

    #[test]
    fn a_busy_sender_is_woken_once_per_batch_of_places_not_per_place() {
        let mut room = full();
        let (count, w) = waker();
        let mut ticket = None;
        assert_eq!(room.take_or_wait(&mut ticket, BUSY, NOW, &w), Poll::Pending);
        for freed in 1..=16 {
            wake_all(room.give_back(1, NOW));
            let expected = usize::from(freed == 16);
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                expected,
                "after {freed} freed"
            );
        }
        assert_eq!(
            room.take_or_wait(&mut ticket, BUSY, NOW, &w),
            Poll::Ready(16)
        );
        assert_eq!(ticket, None);
    }

    #[test]
    fn a_busy_sender_waits_only_for_what_it_still_has_to_send() {
        let mut room = full();
        let (count, w) = waker();
        let mut ticket = None;
        let want = Want {
            places: 3,
            last_turn: 100,
        };
        assert_eq!(room.take_or_wait(&mut ticket, want, NOW, &w), Poll::Pending);
        wake_all(room.give_back(2, NOW));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        wake_all(room.give_back(1, NOW));
        assert_eq!(
            room.take_or_wait(&mut ticket, want, NOW, &w),
            Poll::Ready(3)
        );
    }

    #[test]
    fn a_newcomer_goes_before_busy_senders_and_waits_for_one_place() {
        let mut room = full();
        let (busy_count, busy) = waker();
        let (new_count, new) = waker();
        let (mut busy_ticket, mut new_ticket) = (None, None);
        assert_eq!(
            room.take_or_wait(&mut busy_ticket, BUSY, NOW, &busy),
            Poll::Pending
        );
        assert_eq!(
            room.take_or_wait(&mut new_ticket, NEW, NOW, &new),
            Poll::Pending
        );
        assert_eq!(wake_all(room.give_back(1, NOW)), 1);
        assert_eq!(new_count.0.load(Ordering::SeqCst), 1, "the newcomer first");
        assert_eq!(busy_count.0.load(Ordering::SeqCst), 0);
        assert_eq!(
            room.take_or_wait(&mut new_ticket, NEW, NOW, &new),
            Poll::Ready(1)
        );
        // The busy sender still gets its batch, 16 places later.
        for _ in 0..15 {
            assert_eq!(wake_all(room.give_back(1, NOW)), 0);
        }
        assert_eq!(wake_all(room.give_back(1, NOW)), 1);
        assert_eq!(
            room.take_or_wait(&mut busy_ticket, BUSY, NOW, &busy),
            Poll::Ready(16)
        );
    }

    #[test]
    fn newcomers_are_served_in_the_order_they_came_and_busy_senders_likewise() {
        let mut room = full();
        let wakers: Vec<_> = (0..4).map(|_| waker()).collect();
        let mut tickets = [None; 4];
        // busy 0, newcomer 1, busy 2, newcomer 3: served 1, 3, 0, 2.
        for (i, want) in [BUSY, NEW, BUSY, NEW].into_iter().enumerate() {
            assert_eq!(
                room.take_or_wait(&mut tickets[i], want, NOW, &wakers[i].1),
                Poll::Pending
            );
        }
        let woken = |wakers: &[(Arc<Count>, Waker)]| -> Vec<usize> {
            (0..4)
                .filter(|&i| wakers[i].0 .0.load(Ordering::SeqCst) > 0)
                .collect()
        };
        wake_all(room.give_back(1, NOW));
        assert_eq!(woken(&wakers), [1]);
        wake_all(room.give_back(1, NOW));
        assert_eq!(woken(&wakers), [1, 3]);
        wake_all(room.give_back(16, NOW));
        assert_eq!(woken(&wakers), [0, 1, 3]);
        wake_all(room.give_back(16, NOW));
        assert_eq!(woken(&wakers), [0, 1, 2, 3]);
    }

    #[test]
    fn nobody_jumps_the_line_while_senders_wait() {
        let mut room = full();
        let (_, w) = waker();
        let mut ticket = None;
        assert_eq!(room.take_or_wait(&mut ticket, BUSY, NOW, &w), Poll::Pending);
        wake_all(room.give_back(5, NOW));
        assert_eq!(
            room.try_take(1),
            0,
            "five free, but a sender waits for them"
        );
        let mut other = None;
        assert_eq!(
            room.take_or_wait(&mut other, BUSY, NOW, &w),
            Poll::Pending,
            "a busy sender queues behind"
        );
    }

    #[test]
    fn a_sender_that_leaves_gives_back_what_it_was_served_and_unblocks_the_line() {
        let mut room = full();
        let (first_count, first) = waker();
        let (second_count, second) = waker();
        let (mut a, mut b) = (None, None);
        assert_eq!(room.take_or_wait(&mut a, BUSY, NOW, &first), Poll::Pending);
        let three = Want {
            places: 3,
            last_turn: 100,
        };
        assert_eq!(
            room.take_or_wait(&mut b, three, NOW, &second),
            Poll::Pending
        );
        wake_all(room.give_back(3, NOW));
        assert_eq!(second_count.0.load(Ordering::SeqCst), 0, "behind the first");
        // The first leaves while waiting: the second is served from what is free.
        assert_eq!(wake_all(room.leave(a.unwrap(), NOW)), 1);
        assert_eq!(second_count.0.load(Ordering::SeqCst), 1);
        // The second leaves after being served, without coming for its places: they are free.
        assert!(room.leave(b.unwrap(), NOW).is_empty());
        assert_eq!(room.free, 3);
        assert_eq!(first_count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn batches_are_a_quarter_of_the_lane_and_up_to_half_a_small_one() {
        let batch = |capacity| Room::new(capacity).batch();
        assert_eq!(
            [1, 2, 4, 8, 16, 64, 100].map(batch),
            [1, 1, 2, 4, 4, 16, 25]
        );
    }

    #[test]
    fn a_sender_takes_what_is_free_up_to_what_it_asks_and_a_batch() {
        let mut room = Room::new(8);
        assert_eq!(room.try_take(3), 3);
        assert_eq!(room.try_take(0), 1, "at least one");
        assert_eq!(room.try_take(100), 4, "a batch (4 of 8) at most");
        assert_eq!(room.try_take(100), 0, "none left");
    }

    #[test]
    fn a_lane_of_one_place_serves_a_busy_sender_one_place() {
        let mut room = Room::new(1);
        assert_eq!(room.try_take(1), 1);
        let (_, w) = waker();
        let mut ticket = None;
        assert_eq!(room.take_or_wait(&mut ticket, BUSY, NOW, &w), Poll::Pending);
        assert_eq!(wake_all(room.give_back(1, NOW)), 1);
        assert_eq!(
            room.take_or_wait(&mut ticket, BUSY, NOW, &w),
            Poll::Ready(1)
        );
    }

    #[test]
    fn closing_wakes_every_waiting_sender() {
        let mut room = full();
        let (_, w) = waker();
        let (mut a, mut b) = (None, None);
        assert_eq!(room.take_or_wait(&mut a, BUSY, NOW, &w), Poll::Pending);
        assert_eq!(room.take_or_wait(&mut b, NEW, NOW, &w), Poll::Pending);
        assert_eq!(room.close().len(), 2);
    }

    #[test]
    fn newcomers_pass_a_busy_sender_at_most_a_batch_of_times() {
        let mut room = full();
        let (busy_count, busy) = waker();
        let mut busy_ticket = None;
        assert_eq!(
            room.take_or_wait(&mut busy_ticket, BUSY, NOW, &busy),
            Poll::Pending
        );
        // Shards at the tip, one record each, each handled before the next arrives.
        for _ in 0..16 {
            wake_all(room.give_back(1, NOW));
            let mut t = None;
            let (_, w) = waker();
            assert_eq!(room.take_or_wait(&mut t, NEW, NOW, &w), Poll::Ready(1));
        }
        // Patience used up: the next newcomer queues behind the busy sender.
        let (new_count, new) = waker();
        let mut new_ticket = None;
        assert_eq!(
            room.take_or_wait(&mut new_ticket, NEW, NOW, &new),
            Poll::Pending
        );
        assert_eq!(wake_all(room.give_back(15, NOW)), 0);
        assert_eq!(wake_all(room.give_back(1, NOW)), 1);
        assert_eq!(
            busy_count.0.load(Ordering::SeqCst),
            1,
            "the busy sender first"
        );
        assert_eq!(
            room.take_or_wait(&mut busy_ticket, BUSY, NOW, &busy),
            Poll::Ready(16)
        );
        assert_eq!(wake_all(room.give_back(1, NOW)), 1);
        assert_eq!(new_count.0.load(Ordering::SeqCst), 1);
        // A busy sender served: newcomers may pass again.
        let mut again = None;
        assert_eq!(
            room.take_or_wait(&mut again, BUSY, NOW, &busy),
            Poll::Pending
        );
        wake_all(room.give_back(1, NOW));
        let mut t = None;
        assert_eq!(room.take_or_wait(&mut t, NEW, NOW, &new), Poll::Ready(1));
    }

    #[test]
    fn a_busy_sender_whose_records_were_all_taken_becomes_a_newcomer() {
        let mut room = full();
        let wakers: Vec<_> = (0..3).map(|_| waker()).collect();
        let mut tickets = [None; 3];
        // Two shards with long backlogs, then one with records up to turn 5 only.
        let short = Want {
            places: 1_000,
            last_turn: 5,
        };
        for (i, want) in [BUSY, BUSY, short].into_iter().enumerate() {
            assert_eq!(
                room.take_or_wait(&mut tickets[i], want, NOW, &wakers[i].1),
                Poll::Pending
            );
        }
        // Turn 5 handed out: the third has nothing queued, and gets the next place.
        assert_eq!(wake_all(room.give_back(1, 5)), 1);
        assert_eq!(wakers[2].0 .0.load(Ordering::SeqCst), 1);
        assert_eq!(
            room.take_or_wait(&mut tickets[2], short, 5, &wakers[2].1),
            Poll::Ready(1)
        );
        assert_eq!(wakers[0].0 .0.load(Ordering::SeqCst), 0);
    }
}
