//! `FairLane`: one lane of a subscription's channel, a bounded queue that hands its records
//! out by shard in turn.
//!
//! # Why not first in, first out
//!
//! Every reader of a subscription sends into the same lane. In a plain FIFO queue a shard
//! that arrives with a backlog (a shard just taken over from a crashed instance, whose records
//! piled up while nobody read them) fills every place, and the next shard taken waits behind
//! all of them: in the serial loop, the lane's whole capacity times the handler's time per
//! record (64 x 15 ms, a second, before a taken shard's first record was handled, in the
//! `takeover` benchmark). Here each record gets a turn when it is queued, one past its shard's
//! last turn and never before the turn being handed out now (virtual-time fair queueing), and
//! the lowest turn goes out first, ties in arrival order. A shard's records keep their order,
//! so each key's order holds too. A shard that starts sending, once it has a place, waits for
//! at most one record of each other busy shard; getting the place waits for at most one freed
//! place per other shard with nothing queued that waits ahead of it (see `room.rs`).
//!
//! # Places
//!
//! The lane holds at most its capacity: a sender first takes a place from the lane's
//! [`Room`] (a shard with nothing queued first, then busy shards in the order they began to
//! wait, a busy one for a batch of places: see `room.rs`), and the receiver gives it back when
//! it takes the record. Closing the lane (the receiver closes or the last receiver goes) fails
//! every sender, waiting or not; what is queued can still be received. Once every sender is
//! gone and the queue is empty, receivers get `None`.

use std::collections::VecDeque;
use std::sync::atomic::{self, AtomicU64, AtomicUsize};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::delivery::Spare;
use crate::numbered::Numbered;
use crate::room::{Room, Ticket, Want};

/// The lane is closed: nothing more can be sent.
#[derive(Debug)]
pub(crate) struct LaneClosed;

/// The state every end of one lane shares.
#[derive(Debug)]
struct FairLane {
    queue: Mutex<Queue>,
    /// Receivers of the lane still alive; the lane closes when the last one goes.
    receivers: AtomicUsize,
    /// Numbers receivers, to keep one waker per receiver.
    next_receiver: AtomicU64,
}

#[derive(Debug)]
struct Queue {
    /// The lane's free places and the senders waiting for some.
    room: Room,
    /// The queued records by turn: `turns[i]` holds those of turn `base + i`, in the order
    /// they arrived. Turns are handed out lowest first, so the lowest non-empty one is at the
    /// front: a push and a take cost a few instructions, where a binary heap of turns cost
    /// about 210 a record (`drain`'s count). A shard's records take consecutive turns from
    /// the one handed out now on, so the turns queued span at most the lane's capacity.
    turns: VecDeque<VecDeque<Numbered>>,
    /// The turn of `turns`' front.
    base: u64,
    /// Emptied entries of `turns`, kept for their memory.
    unused: Vec<VecDeque<Numbered>>,
    /// The memory of deliveries handled, given back by receivers for the senders' next records
    /// (see `Spare`).
    spares: VecDeque<Spare>,
    /// The turn of the record handed out last.
    now: u64,
    /// No more sends: the receiver closed the lane, or the last receiver went.
    closed: bool,
    /// Every sender is gone.
    orphaned: bool,
    /// Receivers waiting for a record, by receiver number.
    waiting: Vec<(u64, Waker)>,
}

impl Queue {
    /// Queues `record` in its shard's turn; `last` is the shard's last turn in this lane (its
    /// feed keeps it, so a shard costs the lane nothing while it has nothing queued).
    fn push(&mut self, last: &AtomicU64, record: Numbered) {
        // One past the shard's last turn, and no earlier than the turn being handed out: a
        // shard that starts sending joins the current turn, behind at most one record of each
        // other shard queued in it. Read and written under the queue's lock.
        // At most the lane's capacity past it: a shard's records queued here take consecutive
        // turns from `now` on, so only a shard's turns carried over from another channel (a
        // settlement fed into two; see `ShardSettlement::turns`) could be further ahead, and
        // the turns queued must span no more than the lane holds (each turn is a queue here).
        let capacity = self.room.capacity() as u64;
        let turn = (last.load(atomic::Ordering::Relaxed) + 1)
            .max(self.now)
            .min(self.now.saturating_add(capacity));
        last.store(turn, atomic::Ordering::Relaxed);
        if self.turns.is_empty() {
            self.base = turn;
        }
        // Below the front when the queue emptied after a shard's record and that shard's next
        // one set the front one turn on: another shard joining the current turn goes before.
        while turn < self.base {
            let empty = self.unused.pop().unwrap_or_default();
            self.turns.push_front(empty);
            self.base -= 1;
        }
        let index = usize::try_from(turn - self.base).unwrap_or(usize::MAX);
        while self.turns.len() <= index {
            let empty = self.unused.pop().unwrap_or_default();
            self.turns.push_back(empty);
        }
        self.turns[index].push_back(record);
    }

    fn pop(&mut self) -> Option<Numbered> {
        loop {
            let front = self.turns.front_mut()?;
            if let Some(record) = front.pop_front() {
                self.now = self.base;
                return Some(record);
            }
            // The front turn is done: on to the next.
            if let Some(empty) = self.turns.pop_front() {
                self.unused.push(empty);
            }
            self.base += 1;
        }
    }

    /// Takes the next record in turn and frees its place; the senders served by that place,
    /// to wake once the lock is gone.
    fn hand_out(&mut self) -> Option<(Numbered, Vec<Waker>)> {
        let record = self.pop()?;
        Some((record, self.give_back(1)))
    }

    /// `places` are free again: the senders served, to wake once the lock is gone.
    fn give_back(&mut self, places: usize) -> Vec<Waker> {
        self.room.give_back(places, self.now)
    }

    /// A sender stops waiting for places: the senders served, to wake once the lock is gone.
    fn leave(&mut self, ticket: Ticket) -> Vec<Waker> {
        self.room.leave(ticket, self.now)
    }

    /// Moves up to `places` spares into `spares`, the oldest first: each turns over, and none
    /// keeps the settlement of a shard long gone alive while others are used.
    fn lend_spares(&mut self, places: usize, spares: &mut Vec<Spare>) {
        let lent = places.min(self.spares.len());
        spares.extend(self.spares.drain(..lent));
    }

    /// Keeps the memory of a delivery handled for a sender's next record, up to the lane's
    /// capacity (more would be memory nobody uses: at most that many records are queued); one
    /// more is given back, to be freed once the lock is gone.
    fn keep_spare(&mut self, spare: Spare) -> Option<Spare> {
        // A closed lane takes no more records: no sender could use it.
        if !self.closed && self.spares.len() < self.room.capacity() {
            self.spares.push_back(spare);
            return None;
        }
        Some(spare)
    }

    /// The spares whose last shard was let go (each holds on to that shard's settlement), to
    /// free once the lock is gone.
    fn released_spares(&mut self) -> Vec<Spare> {
        if !self.spares.iter().any(Spare::is_revoked) {
            return Vec::new();
        }
        let mut released = Vec::new();
        let mut kept = VecDeque::with_capacity(self.spares.len());
        for spare in self.spares.drain(..) {
            if spare.is_revoked() {
                released.push(spare);
            } else {
                kept.push_back(spare);
            }
        }
        self.spares = kept;
        released
    }

    /// Takes every queued record out (none is handed out after).
    fn take_all(&mut self) -> (Vec<Numbered>, VecDeque<Spare>) {
        let queued = self.turns.drain(..).flatten().collect();
        (queued, std::mem::take(&mut self.spares))
    }

    /// Every waiting receiver's waker, to wake once the lock is released. All of them, not
    /// one: a receiver woken but no longer polling (its loop busy elsewhere, or gone) must not
    /// leave a record queued while another receiver sleeps. Only idle receivers wait, so this
    /// costs something only when there is little to do. One waiter (a lane with one loop) is
    /// taken without giving up the list's memory.
    fn wakers(&mut self) -> Wakers {
        match self.waiting.len() {
            0 => Wakers::None,
            1 => self
                .waiting
                .pop()
                .map_or(Wakers::None, |(_, w)| Wakers::One(w)),
            _ => Wakers::Many(std::mem::take(&mut self.waiting)),
        }
    }
}

/// Wakers taken from the list, to wake outside the lock.
enum Wakers {
    None,
    One(Waker),
    Many(Vec<(u64, Waker)>),
}

/// Wakes the senders the room served (outside the lock).
fn wake_senders(served: Vec<Waker>) {
    served.into_iter().for_each(Waker::wake);
}

fn wake(wakers: Wakers) {
    match wakers {
        Wakers::None => {}
        Wakers::One(waker) => waker.wake(),
        Wakers::Many(wakers) => {
            for (_, waker) in wakers {
                waker.wake();
            }
        }
    }
}

impl FairLane {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock()
    }

    fn close(&self) {
        let mut queue = self.queue();
        queue.closed = true;
        let wakers = queue.wakers();
        let senders = queue.room.close();
        // No sender takes places any more: the spares would serve nobody.
        let spares = std::mem::take(&mut queue.spares);
        drop(queue);
        drop(spares);
        wake(wakers);
        wake_senders(senders);
    }
}

/// Creates one lane of `capacity` places (at least one).
pub(crate) fn fair_lane(capacity: usize) -> (LaneTx, LaneRx) {
    let lane = Arc::new(FairLane {
        queue: Mutex::new(Queue {
            room: Room::new(capacity),
            turns: VecDeque::new(),
            base: 0,
            unused: Vec::new(),
            spares: VecDeque::new(),
            now: 0,
            closed: false,
            orphaned: false,
            waiting: Vec::new(),
        }),
        receivers: AtomicUsize::new(1),
        next_receiver: AtomicU64::new(1),
    });
    (
        LaneTx { lane: lane.clone() },
        LaneRx {
            lane,
            id: 0,
            closed: false,
        },
    )
}

/// A lane's sending side (one per lane; the channel's senders share it).
#[derive(Debug)]
pub(crate) struct LaneTx {
    lane: Arc<FairLane>,
}

impl LaneTx {
    /// Waits for a place (see [`Room`]), then queues what `make` returns in its shard's turn
    /// and wakes the receivers. `make` runs only once the place is had, so a send cancelled
    /// while it waits leaves nothing behind; `unmake` gets the record back when the lane closed
    /// meanwhile.
    pub(crate) async fn send_with(
        &self,
        turn: &AtomicU64,
        make: impl FnOnce() -> Numbered,
        unmake: impl FnOnce(Numbered),
    ) -> Result<(), LaneClosed> {
        if self.try_places(1)? == 0 {
            self.places(turn, 1).await?;
        }
        match self.push_all(turn, std::iter::once(make())).pop() {
            None => Ok(()),
            Some(record) => {
                unmake(record);
                Err(LaneClosed)
            }
        }
    }

    /// Takes up to `places` places (at least one asked for) if some are free now and no
    /// sender waits: how many it took (`Ok(0)`: none).
    pub(crate) fn try_places(&self, places: usize) -> Result<usize, LaneClosed> {
        self.try_places_lending(places, None)
    }

    /// As [`try_places`](Self::try_places), moving into `spares`, under the same lock, the
    /// memory of one delivery handled per place taken (see `Spare`).
    pub(crate) fn try_places_lending(
        &self,
        places: usize,
        spares: Option<&mut Vec<Spare>>,
    ) -> Result<usize, LaneClosed> {
        let mut queue = self.lane.queue();
        if queue.closed {
            return Err(LaneClosed);
        }
        let taken = queue.room.try_take(places);
        if let Some(spares) = spares {
            queue.lend_spares(taken, spares);
        }
        Ok(taken)
    }

    /// Moves up to `places` spares (the memory of deliveries handled) into `spares`, for
    /// places taken by waiting for them ([`places`](Self::places)): one lock per batch.
    pub(crate) fn take_spares(&self, places: usize, spares: &mut Vec<Spare>) {
        self.lane.queue().lend_spares(places, spares);
    }

    /// Gives back spares a sender took and did not use (its page ended first).
    pub(crate) fn return_spares(&self, spares: &mut Vec<Spare>) {
        let mut refused = Vec::new();
        {
            let mut queue = self.lane.queue();
            for spare in spares.drain(..) {
                refused.extend(queue.keep_spare(spare));
            }
        }
        drop(refused);
    }

    /// Waits for places for a shard whose last turn in this lane is `turn` and that could use
    /// `wanted` of them now: one if the shard has nothing queued here, else a batch of up to
    /// `wanted` (see [`Room`]). Resolves to the number of places taken, each to be filled by
    /// [`push_all`](Self::push_all) or given back by [`give_back`](Self::give_back).
    pub(crate) fn places<'a>(&'a self, turn: &'a AtomicU64, wanted: usize) -> Places<'a> {
        Places {
            lane: &self.lane,
            turn,
            wanted,
            ticket: None,
        }
    }

    /// Gives back `places` taken and not used.
    pub(crate) fn give_back(&self, places: usize) {
        if places == 0 {
            return;
        }
        let served = self.lane.queue().give_back(places);
        wake_senders(served);
    }

    /// Queues `records` (each in a place taken before), in order and in their shard's turns
    /// (`turn`: the shard's last turn in this lane), under one lock, then wakes the waiting
    /// receivers. Gives back the records a closed lane refuses (no allocation otherwise).
    #[must_use = "records given back were not queued"]
    pub(crate) fn push_all(
        &self,
        turn: &AtomicU64,
        records: impl Iterator<Item = Numbered>,
    ) -> Vec<Numbered> {
        let mut queue = self.lane.queue();
        if queue.closed {
            drop(queue);
            return records.collect();
        }
        for record in records {
            queue.push(turn, record);
        }
        let wakers = queue.wakers();
        drop(queue);
        wake(wakers);
        Vec::new()
    }
}

impl Drop for LaneTx {
    fn drop(&mut self) {
        let mut queue = self.lane.queue();
        queue.orphaned = true;
        let wakers = queue.wakers();
        drop(queue);
        wake(wakers);
    }
}

/// The future of [`LaneTx::places`]: leaving the line when dropped, and giving back places
/// it was served and never came for.
#[derive(Debug)]
pub(crate) struct Places<'a> {
    lane: &'a FairLane,
    turn: &'a AtomicU64,
    wanted: usize,
    ticket: Option<Ticket>,
}

impl Future for Places<'_> {
    type Output = Result<usize, LaneClosed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut queue = this.lane.queue();
        if queue.closed {
            // Places served before the close go back with the ticket, in `drop`.
            return Poll::Ready(Err(LaneClosed));
        }
        let want = Want {
            places: this.wanted,
            last_turn: this.turn.load(atomic::Ordering::Relaxed),
        };
        let now = queue.now;
        queue
            .room
            .take_or_wait(&mut this.ticket, want, now, cx.waker())
            .map(Ok)
    }
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let served = self.lane.queue().leave(ticket);
            wake_senders(served);
        }
    }
}

/// A lane's receiving side; [`share`](Self::share) makes another receiver of the same lane.
#[derive(Debug)]
pub(crate) struct LaneRx {
    lane: Arc<FairLane>,
    id: u64,
    /// This receiver closed the lane already.
    closed: bool,
}

impl LaneRx {
    /// Another receiver of the same lane: each record goes to one of them.
    pub(crate) fn share(&self) -> Self {
        self.lane.receivers.fetch_add(1, atomic::Ordering::SeqCst);
        Self {
            lane: self.lane.clone(),
            id: self
                .lane
                .next_receiver
                .fetch_add(1, atomic::Ordering::Relaxed),
            closed: false,
        }
    }

    /// The next record in turn; `None` once the lane is closed or every sender gone, and
    /// nothing is queued.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Numbered>> {
        let mut queue = self.lane.queue();
        if let Some((record, served)) = queue.hand_out() {
            drop(queue);
            wake_senders(served);
            return Poll::Ready(Some(record));
        }
        if queue.closed || queue.orphaned {
            return Poll::Ready(None);
        }
        let waker = cx.waker();
        match queue.waiting.iter_mut().find(|(id, _)| *id == self.id) {
            Some((_, known)) => known.clone_from(waker),
            None => queue.waiting.push((self.id, waker.clone())),
        }
        Poll::Pending
    }

    /// The next record in turn (see [`poll_next`](Self::poll_next)).
    pub(crate) async fn recv(&mut self) -> Option<Numbered> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// A record if one is queued now.
    pub(crate) fn try_recv(&mut self, spare: Option<Spare>) -> Option<Numbered> {
        let mut queue = self.lane.queue();
        let refused = spare.and_then(|spare| queue.keep_spare(spare));
        let handed = queue.hand_out();
        drop(queue);
        drop(refused);
        let (record, served) = handed?;
        wake_senders(served);
        Some(record)
    }

    /// The loop taking from this lane is about to wait: `spare` is kept for the senders' next
    /// records, and the spares of shards let go since (whose settlements they keep alive) are
    /// freed, outside the lock. While records flow, spares are used oldest first and turn
    /// over; this bounds how long an idle lane keeps a released shard's settlement.
    pub(crate) fn idle(&mut self, spare: Option<Spare>) {
        // Without a spare to keep, nothing to do (and no lock): a loop with nothing settled
        // alone since its last wait (batches, records that failed) made no spare, and the
        // sweep waits for the next wait that brings one.
        if spare.is_none() {
            return;
        }
        let (refused, released) = {
            let mut queue = self.lane.queue();
            let refused = spare.and_then(|spare| queue.keep_spare(spare));
            (refused, queue.released_spares())
        };
        drop((refused, released));
    }

    /// Closes the lane: every sender fails from now on; what is queued can still be received.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.lane.close();
    }
}

impl Drop for LaneRx {
    fn drop(&mut self) {
        let last = self.lane.receivers.fetch_sub(1, atomic::Ordering::SeqCst) == 1;
        if last && !self.closed {
            // The last receiver: nobody takes from the lane again, so senders must not wait.
            self.lane.close();
        }
        let mut queue = self.lane.queue();
        queue.waiting.retain(|(id, _)| *id != self.id);
        if last {
            // Nobody will take what is queued: free it now (as a dropped channel does), not
            // when the last sender goes. Its records stay unsettled, as undelivered records do.
            let queued = queue.take_all();
            drop(queue);
            drop(queued);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ShardSettlement;
    use kinesis_lease_core::SequenceNumber;
    use kinesis_stream_core::Record;

    /// A shard's settlement and its last turn in the lane (a feed's).
    struct Shard {
        settlement: Arc<ShardSettlement>,
        turn: AtomicU64,
    }

    fn shard(name: &str) -> Arc<Shard> {
        Arc::new(Shard {
            settlement: ShardSettlement::new("s", name),
            turn: AtomicU64::new(0),
        })
    }

    async fn send(tx: &LaneTx, shard: &Shard, n: u64) {
        let settlement = &shard.settlement;
        let record = Record::new(
            format!("{}-{n}", settlement.shard()),
            "k",
            SequenceNumber::new(format!("{n:020}"), None).unwrap(),
        );
        let s = settlement.clone();
        tx.send_with(
            &shard.turn,
            move || {
                let ordinal = s.register(record.sequence.clone());
                Numbered::new(record, s, ordinal, None)
            },
            |_| {},
        )
        .await
        .unwrap();
    }

    fn name(record: &Numbered) -> String {
        record.payload_text()
    }

    /// A shard whose turns ran far ahead in another channel (a settlement fed into two) is
    /// queued no further than the lane's capacity past the turn handed out now: the lane keeps
    /// one queue per turn, and a hundred million empty ones would not fit. The order is as
    /// before: behind the shards that started sending here.
    #[tokio::test]
    async fn a_shard_whose_turns_ran_ahead_elsewhere_is_queued_within_the_lanes_span() {
        let (tx, mut rx) = fair_lane(4);
        let (far, near) = (shard("far"), shard("near"));
        far.turn.store(100_000_000, atomic::Ordering::Relaxed);
        send(&tx, &far, 0).await;
        send(&tx, &near, 0).await;
        send(&tx, &near, 1).await;
        assert!(
            tx.lane.queue().turns.len() <= 5,
            "turns spanned past the lane"
        );
        let order: Vec<String> = (0..3).map(|_| name(&rx.try_recv(None).unwrap())).collect();
        assert_eq!(order, ["near-0", "near-1", "far-0"]);
    }

    #[tokio::test]
    async fn a_shard_that_starts_sending_waits_one_record_of_each_busy_shard() {
        let (tx, mut rx) = fair_lane(64);
        let (a, b, c) = (shard("a"), shard("b"), shard("c"));
        for n in 0..40 {
            send(&tx, &a, n).await;
        }
        assert_eq!(name(&rx.recv().await.unwrap()), "a-0");
        // B and C arrive behind 39 records of A.
        send(&tx, &b, 0).await;
        send(&tx, &b, 1).await;
        send(&tx, &c, 0).await;
        let order: Vec<String> = (0..7).map(|_| name(&rx.try_recv(None).unwrap())).collect();
        assert_eq!(order, ["b-0", "c-0", "a-1", "b-1", "a-2", "a-3", "a-4"]);
    }

    #[tokio::test]
    async fn a_shard_that_starts_sending_joins_the_current_turn() {
        let (tx, mut rx) = fair_lane(64);
        let (a, b, c) = (shard("a"), shard("b"), shard("c"));
        for n in 0..3 {
            send(&tx, &a, n).await;
            send(&tx, &b, n).await;
        }
        assert_eq!(name(&rx.try_recv(None).unwrap()), "a-0");
        // B's first record is queued in the turn being handed out; C joins that turn.
        send(&tx, &c, 0).await;
        let order: Vec<String> = (0..3).map(|_| name(&rx.try_recv(None).unwrap())).collect();
        assert_eq!(order, ["b-0", "c-0", "a-1"]);
    }

    #[tokio::test]
    async fn the_last_receiver_gone_frees_what_was_queued() {
        let (tx, rx) = fair_lane(4);
        let a = shard("a");
        send(&tx, &a, 0).await;
        assert_eq!(
            Arc::strong_count(&a.settlement),
            2,
            "the queued record holds the settlement"
        );
        drop(rx);
        assert_eq!(
            Arc::strong_count(&a.settlement),
            1,
            "freed with the last receiver"
        );
        drop(tx);
    }

    #[tokio::test]
    async fn each_shard_keeps_its_order() {
        let (tx, mut rx) = fair_lane(1_000);
        let shards: Vec<_> = (0..5).map(|i| shard(&format!("s{i}"))).collect();
        // Shards join at different times, with different backlogs, while records go out.
        let mut next = vec![0u64; shards.len()];
        let mut seen: std::collections::HashMap<String, u64> = Default::default();
        for round in 0..=201u64 {
            for (i, s) in shards.iter().enumerate() {
                if round >= i as u64 * 10 && (round + i as u64).is_multiple_of(i as u64 + 1) {
                    send(&tx, s, next[i]).await;
                    next[i] += 1;
                }
            }
            if round.is_multiple_of(3) {
                while let Some(record) = rx.try_recv(None) {
                    let text = name(&record);
                    let (shard, n) = text.split_once('-').unwrap();
                    let n: u64 = n.parse().unwrap();
                    match seen.insert(shard.to_owned(), n) {
                        Some(prev) => assert_eq!(n, prev + 1, "{shard} out of order"),
                        None => assert_eq!(n, 0, "{shard} starts at its first record"),
                    }
                }
            }
        }
        // The last round (201) drained everything: every record came out, once, in order.
        for (i, s) in shards.iter().enumerate() {
            assert_eq!(seen.get(s.settlement.shard()).map(|n| n + 1), Some(next[i]));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_makes_senders_wait_their_turn_and_closing_fails_them() {
        let (tx, mut rx) = fair_lane(2);
        let a = shard("a");
        send(&tx, &a, 0).await;
        send(&tx, &a, 1).await;
        let tx = Arc::new(tx);
        let waiting = {
            let (tx, a) = (tx.clone(), a.clone());
            tokio::spawn(async move { send(&tx, &a, 2).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no place: it waits");
        assert_eq!(name(&rx.recv().await.unwrap()), "a-0");
        waiting.await.unwrap();
        rx.close();
        let record = Record::new("x", "k", SequenceNumber::new("9", None).unwrap());
        let refused = tx
            .send_with(
                &a.turn,
                || Numbered::new(record, a.settlement.clone(), 0, None),
                |_| {},
            )
            .await;
        assert!(refused.is_err(), "closed: sends fail");
        // What was queued is still received, then the end.
        assert_eq!(name(&rx.recv().await.unwrap()), "a-1");
        assert_eq!(name(&rx.recv().await.unwrap()), "a-2");
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn receivers_end_once_every_sender_is_gone_and_the_queue_is_empty() {
        let (tx, mut rx) = fair_lane(4);
        let mut other = rx.share();
        let a = shard("a");
        send(&tx, &a, 0).await;
        let waiting = tokio::spawn(async move { other.recv().await.map(|r| name(&r)) });
        assert_eq!(name(&rx.recv().await.unwrap()), "a-0");
        drop(tx);
        assert_eq!(waiting.await.unwrap(), None, "a waiting receiver is woken");
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn the_last_receiver_gone_fails_waiting_senders() {
        let (tx, rx) = fair_lane(1);
        let a = shard("a");
        send(&tx, &a, 0).await;
        let tx = Arc::new(tx);
        let waiting = {
            let (tx, a) = (tx.clone(), a.clone());
            tokio::spawn(async move {
                let record = Record::new("x", "k", SequenceNumber::new("1", None).unwrap());
                tx.send_with(
                    &a.turn,
                    || Numbered::new(record, a.settlement.clone(), 1, None),
                    |_| {},
                )
                .await
                .is_err()
            })
        };
        tokio::task::yield_now().await;
        let shared = rx.share();
        drop(rx);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one receiver is left");
        drop(shared);
        assert!(waiting.await.unwrap(), "no receiver: the send fails");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_receivers_take_every_record_once() {
        let (tx, rx) = fair_lane(8);
        let receivers: Vec<_> = (0..4).map(|_| rx.share()).collect();
        drop(rx);
        let takers: Vec<_> = receivers
            .into_iter()
            .map(|mut rx| {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(record) = rx.recv().await {
                        got.push(name(&record));
                    }
                    got
                })
            })
            .collect();
        let shards: Vec<_> = (0..3).map(|i| shard(&format!("s{i}"))).collect();
        for n in 0..500 {
            send(&tx, &shards[(n % 3) as usize], n).await;
        }
        drop(tx);
        let mut all = Vec::new();
        for taker in takers {
            all.extend(taker.await.unwrap());
        }
        assert_eq!(all.len(), 500, "every record taken once");
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 500, "none twice");
    }
}
