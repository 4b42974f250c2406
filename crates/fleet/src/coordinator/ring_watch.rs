//! The ring watch, in a task of its own: every list interval it lists the roster when it moved
//! (the coordinator's epoch read tells it, and once a lease the roster's own epoch; see
//! `Watcher::watch`) and reads the member row of the member this instance watches
//! (its successor in the ring of owner ids, see `roster`), and once a lease the member after
//! that one (`Watcher::glance`); a member whose row stood still for a lease is found dead and
//! buried.
//!
//! The watched row is read eventually consistent while it shows the member alive, at half
//! the price; any other verdict (dead, gone) is read again consistently before it is acted on
//! (`Watcher::alive_eventually`).
//!
//! # Why a task of its own
//!
//! A crashed member's shards are read again once its watcher buried it, so the watch must keep
//! its schedule whatever else the coordinator is doing. In the coordinator's take tick it
//! waited behind every take round (a round of slow takes, each allowed a lease, delayed it by
//! as much), behind every store call that did not answer, and it stopped when the instance
//! began to shut down. Here it runs from the join until the instance has left the roster, and
//! a little longer (below). It shares with the coordinator only what this instance has seen of
//! member rows ([`Link`]): the coordinator still lists the roster itself, after the rows, for
//! every take round (the rule of `roster` needs that order).
//!
//! # A member joining before a watched one
//!
//! When a member joins between this instance and its successor, the newcomer watches that
//! successor next and counts a lease from its own first reading. Had the successor crashed
//! just before (a crashed process restarted at once under a new owner id, which may sort just
//! before its old one), its shards would wait for that second count: 17 to 18 s from its last
//! renewal instead of 10 to 13 (found by the chaos campaign). So this instance goes on watching
//! its former successor, on its own count, until it is seen written after the change (then it
//! was alive after the newcomer began to read it, and the newcomer's count holds), buried, or
//! gone, for at most a lease and a list interval after the change: one more read per list
//! interval meanwhile, per member that joined so. A watcher that leaves meanwhile goes on
//! watching them as it goes on watching its successor (below).
//!
//! # Handing the watch on
//!
//! When this instance leaves, its predecessor in the ring watches its successor next, and
//! counts a lease from its own first reading of it. Had the successor crashed just before, its
//! shards would wait for that second count (about 20 s in all instead of 12). So the leaving
//! instance goes on watching its successor after it left, until either the successor buried
//! (found dead on this instance's count), or its row is seen written after `left - renew`
//! (`left`: when the rows-released epoch bump landed). In that case its next watcher, whose
//! take round after that bump lists the roster at the next take tick, counts from no later than
//! `left + take interval`, so a crash of the successor after that write is found within
//! `renew + take interval + lease` (+ one take tick) of its last renewal: 15 s with the
//! defaults, against 13 s for a plain crash. A successor alive and renewing every renew
//! interval is usually seen written in that window already (the leaver's reads go on while it
//! drains), otherwise at its next renewal: a leave waits for this at most a renew and a take
//! interval, and for a dead successor at most a lease (the burial). When no other member would
//! watch the successor next (two members), there is nothing to hand on and the leave does not
//! wait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kinesis_lease_core::{ErrorChain, Holder, Lease, LeaseKey, Outcome, Take};
use tokio::sync::oneshot;
use tokio::time::{sleep, sleep_until, Instant};

use super::link::Link;
use super::store_calls::{bounded, delete_rows};
use crate::member::member_key;
use crate::roster;
use crate::shared::Shared;

/// How many leases a departed member row stands still before the janitor deletes it.
const DEPARTED_FOR: u32 = 10;

/// The ring watch of one subscription (see the module docs).
pub(super) struct Watcher {
    shared: Arc<Shared>,
    link: Arc<Link>,
    /// The roster's own epoch (its item, `stream@members:*epoch`) as last read before a roster
    /// listing that succeeded.
    roster_epoch: Option<u64>,
    /// The members the roster listed last (this instance included once joined).
    members: BTreeSet<String>,
    /// Member rows of instances that left or were found dead, by owner id: the row's key and
    /// counter, and since when this instance has seen that counter. The janitor deletes them
    /// once they stood still for [`DEPARTED_FOR`] leases (see `cleanup`).
    departed: BTreeMap<String, (LeaseKey, u64, Instant)>,
    /// When the watched member is read next.
    watch_at: Instant,
    /// The last reading of the watched member's row: whose, its counter and token, and when
    /// that read was sent.
    last_read: Option<(String, u64, Option<String>, Instant)>,
    /// A time after which the watched member's row was written (the send of the last read
    /// that showed its previous holding), by member.
    written_after: Option<(String, Instant)>,
    /// A member whose burial (the take of its row) got no answer: it may have landed. A roster
    /// listing no longer shows a member whose row names this instance, so without this the
    /// watch would stop reading it and the burial would never be announced; its row is read
    /// again at the next watch whatever the roster says.
    unconfirmed: Option<String>,
    /// The successor this instance watched at its last watch.
    successor: Option<String>,
    /// The tokens of the members' holdings at the last roster listing.
    holdings: BTreeMap<String, Option<String>>,
    /// The members at its last watch, with their holdings (`None` before the first): those not
    /// among them, or holding anew, joined since.
    seen_members: Option<BTreeMap<String, Option<String>>>,
    /// Former successors still watched after members joined between this instance and them
    /// (see the module docs): who, and when this instance saw the ring change. Several when
    /// members join one after the other (a crashed newcomer replaced by another).
    formers: BTreeMap<String, Instant>,
    /// When the member after the watched one is glanced at next (see [`Watcher::glance`]).
    glance_at: Instant,
    /// When the roster's own epoch is read next: every lease, less often in a fleet of
    /// thousands (`roster::epoch_interval`), and whenever the roster's count moved.
    epoch_at: Instant,
    /// When this watch may read the stream's epoch item next, should the coordinator not
    /// read it (see [`Watcher::watch`]).
    epochs_at: Instant,
}

impl Watcher {
    pub(super) fn new(shared: Arc<Shared>, link: Arc<Link>) -> Self {
        Self {
            shared,
            link,
            roster_epoch: None,
            members: BTreeSet::new(),
            departed: BTreeMap::new(),
            watch_at: Instant::now(),
            last_read: None,
            written_after: None,
            unconfirmed: None,
            successor: None,
            holdings: BTreeMap::new(),
            seen_members: None,
            formers: BTreeMap::new(),
            glance_at: Instant::now(),
            epoch_at: Instant::now(),
            epochs_at: Instant::now(),
        }
    }

    /// Watches until `left` fires with the time this instance's leave was announced, then
    /// hands the watch on (see the module docs). A dropped `left` ends the watch at once.
    pub(super) async fn run(mut self, mut left: oneshot::Receiver<Instant>) {
        let link = self.link.clone();
        let mut phase = self.shared.phase.subscribe();
        let mut running = *phase.borrow_and_update() == kinesis_shard_reader::Phase::Running;
        loop {
            tokio::select! {
                biased;
                left_at = &mut left => {
                    if let Ok(left_at) = left_at {
                        self.hand_on(left_at).await;
                        self.finish_formers().await;
                    }
                    return;
                }
                () = sleep_until(self.watch_at) => self.watch().await,
                () = link.wake.notified() => self.watch().await,
                // The shutdown began: a consistent reading of the watched row at once, so the
                // hand-on of the leave (`hand_on`) has a reading from before it to compare with:
                // the eventually consistent ones cannot tell when a write came after them.
                Ok(()) = phase.changed(), if running => {
                    running = *phase.borrow_and_update() == kinesis_shard_reader::Phase::Running;
                    if !running {
                        self.watch().await;
                    }
                }
            }
        }
    }

    /// Lists the roster: who is a member, since when each member row's holding stood still,
    /// and which rows are departed. False when the listing failed.
    async fn list_roster(&mut self) -> bool {
        let shared = self.shared.clone();
        let stream = roster::members_stream(&shared.config.stream);
        match bounded(&shared, "list", shared.store.list(&stream)).await {
            Ok(rows) => {
                let now = Instant::now();
                self.members = roster::present(&rows);
                self.holdings = roster::holdings(&rows);
                let departed = crate::cleanup::departed(&rows);
                self.departed
                    .retain(|id, _| departed.iter().any(|r| r.key.shard() == id));
                for row in departed {
                    let entry = self.departed.entry(row.key.shard().to_owned()).or_insert((
                        row.key.clone(),
                        row.counter,
                        now,
                    ));
                    if entry.1 != row.counter {
                        *entry = (row.key.clone(), row.counter, now);
                    }
                }
                self.link.record_listing(&rows, now);
                true
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "listing the roster failed");
                // Listed again at the next watch: a burial's or a departure's listing that
                // failed was never retried, so the janitor never learnt of the departed row
                // and it stood for good (simulation seed 518, with its tail: b2's row buried at
                // 70 s under store faults, still there at 260 s).
                self.link.roster_moved.store(true, Ordering::SeqCst);
                false
            }
        }
    }

    /// Reads `member`'s row; notes when it was seen written. `None` when the read failed.
    async fn read(&mut self, member: &str, key: &LeaseKey) -> Option<Option<Lease>> {
        let shared = self.shared.clone();
        let sent = Instant::now();
        let row = match bounded(&shared, "read", shared.store.read(key)).await {
            Ok(row) => row,
            Err(error) => {
                tracing::warn!(%member, error = %ErrorChain(&error), "reading the watched member failed");
                return None;
            }
        };
        self.note_read(member, row.as_ref(), sent);
        Some(row)
    }

    /// Notes a consistent reading of `member`'s row (`row`), sent at `sent`: when it shows a
    /// holding other than the last reading's, the row was written after that reading was sent.
    /// (Never an eventually consistent reading: its row may be older than the time it was
    /// sent.)
    fn note_read(&mut self, member: &str, row: Option<&Lease>, sent: Instant) {
        let (counter, token) = row.map_or((0, None), |r| (r.counter, r.token.clone()));
        if let Some((m, c, t, at)) = &self.last_read {
            if m == member && (*c != counter || *t != token) {
                self.written_after = Some((member.to_owned(), *at));
            }
        }
        self.last_read = Some((member.to_owned(), counter, token, sent));
    }

    /// The watched `member`'s row as an eventually consistent read shows it, when it shows
    /// the member alive (present, and not standing still for a lease on this instance's
    /// count): the reading is recorded, and the member looked at again when it would be dead.
    /// False when that read failed or showed anything else (dead, gone, buried by this
    /// instance): then a consistent read decides, since a replica behind may show a row as it
    /// was before a renewal, a join or a burial.
    ///
    /// Half the price of a consistent read (0.5 RCU against 1 on DynamoDB), and it can delay a
    /// verdict by a replica's lag but never bring one forward: a reading records the time this
    /// instance first saw a holding, which an older answer of the same holding can only make
    /// later; an answer showing another holding than the one recorded is not recorded
    /// ([`Link::record_eventual`]).
    async fn alive_eventually(&mut self, member: &str, key: &LeaseKey) -> bool {
        let shared = self.shared.clone();
        let config = &shared.config;
        let row = match bounded(&shared, "read", shared.store.read_eventually(key)).await {
            Ok(Some(row)) if roster::is_present(&row) => row,
            Ok(_) => return false,
            Err(error) => {
                tracing::debug!(%member, error = %ErrorChain(&error), "an eventually consistent read of the watched member failed");
                return false;
            }
        };
        let now = Instant::now();
        let Some(since) = self.link.record_eventual(&row, now) else {
            return false;
        };
        if roster::is_dead(now.duration_since(since), config.lease_duration) {
            return false;
        }
        self.schedule(since, now);
        true
    }

    /// Looks at the watched member again when it would be dead, having stood still since
    /// `since`, and never in the past: a schedule that disagreed with the verdict once made
    /// the watch spin (a planted slow takeover in the simulation, which hung instead of
    /// failing).
    fn schedule(&mut self, since: Instant, now: Instant) {
        let dead_at = since + roster::dead_after(self.shared.config.lease_duration);
        self.watch_at = self
            .watch_at
            .min(dead_at.max(now + std::time::Duration::from_millis(1)));
    }

    /// The roster's own epoch (the item of `members`, the roster's pseudo-stream); `None` when
    /// the read failed.
    async fn own_epoch(&self, members: &str) -> Option<u64> {
        match bounded(&self.shared, "epoch", self.shared.store.epoch(members)).await {
            Ok(epoch) => Some(epoch),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "reading the roster's epoch failed");
                None
            }
        }
    }

    /// Every list interval, and at once when the coordinator saw the roster's count move:
    /// lists the roster if it moved, and reads the member row of the member this instance
    /// watches; a member whose row stood still for a lease is found dead.
    async fn watch(&mut self) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let now = Instant::now();
        self.watch_at = now + config.list_interval;
        let members = roster::members_stream(&config.stream);
        // The roster is listed only when its epoch moved: a listing reads every member's row,
        // and listed on a timer it made every instance read every other (the fleet's reads
        // grew with the square of its size). A member that joined and crashed before its
        // roster bump landed moves no epoch and is never watched, but it took no shard either:
        // an instance takes shards only once its join's bump has landed (`MemberState`). Should
        // a row be handed to it meanwhile, the take round the hand-over's bump sets off lists
        // the roster, and the watch learns of the member from it (`Link::present`).
        // The roster's count of bumps comes with the stream's epoch, which the coordinator
        // reads every take interval (`Link::saw_roster_epoch`): when it moved, the roster is
        // listed at once. The roster's own epoch is read here too, once a lease, for bumps
        // that no count saw: those of instances of a release before the count, during a
        // rolling deploy. Less often in a fleet of thousands (`roster::epoch_interval`), with
        // half a list interval of slack (a watch may run late).
        let every = roster::epoch_interval(config.lease_duration, self.link.members());
        let own = if now >= self.epoch_at || self.roster_epoch.is_none() {
            self.epoch_at = now + every - config.list_interval / 2;
            self.own_epoch(&members).await
        } else {
            None
        };
        // The coordinator has not read the epoch item for two of its intervals (a take round
        // of slow takes, a store call that does not answer, a shutdown's drain): read here.
        let coordinator_every = roster::epoch_interval(config.take_interval, self.link.members());
        let read_lately = self
            .link
            .roster_epoch_read_at()
            .is_some_and(|at| now.duration_since(at) <= coordinator_every * 2);
        // Spaced as the coordinator's, so a whole fleet whose take rounds are slow at once
        // (a throttled table) keeps the item's reads within its partition's limit.
        if !read_lately && now >= self.epochs_at {
            self.epochs_at = now + coordinator_every - config.take_interval / 2;
            match bounded(&shared, "epoch", shared.store.epochs(&config.stream)).await {
                Ok(epochs) => self.link.roster_epoch_read(epochs.roster, None),
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "reading the stream's epochs failed");
                }
            }
        }
        let counted = self.link.take_roster_moved();
        // Read before the listing that the count starts, and kept with it, so that the next
        // own reading does not list the same change again (a bump moves both).
        let own = match own {
            None if counted => self.own_epoch(&members).await,
            own => own,
        };
        let moved = own.is_some_and(|epoch| Some(epoch) != self.roster_epoch);
        // The coordinator's last take round listed other members than this watch knows (see
        // `Link::differs_from`).
        if counted || moved || self.link.differs_from(&self.members) {
            // A listing that fails is tried again at the next watch (`list_roster`), not
            // only once the own epoch is read again.
            if self.list_roster().await {
                if let Some(epoch) = own {
                    self.roster_epoch = Some(epoch);
                }
            }
        }
        self.delete_departed().await;
        let successor = roster::successor(&self.members, &config.owner).map(str::to_owned);
        // The successor this instance would watch had nobody joined since its last watch: when
        // members joined between, it stays watched for a while. (Not only the last successor:
        // a burial and a join within one watch make the member after the buried one this
        // instance's to watch without its ever being the successor at a watch.)
        // A member buried by another and back under its own id within one watch holds anew:
        // it counts as joined, as it would had this instance buried it (`buried`).
        let current: BTreeMap<String, Option<String>> = self
            .members
            .iter()
            .map(|m| (m.clone(), self.holdings.get(m).cloned().flatten()))
            .collect();
        if let Some(seen) = &self.seen_members {
            if let Some(old) = roster::successor_without_joins(seen, &current, &config.owner) {
                if Some(old) != successor.as_deref() {
                    self.formers.entry(old.to_owned()).or_insert(now);
                }
            }
        }
        self.seen_members = Some(current);
        tracing::trace!(successor = ?successor, formers = ?self.formers.keys().collect::<Vec<_>>(), members = self.members.len(), "watch");
        self.successor.clone_from(&successor);
        self.watch_formers().await;
        self.glance(successor.as_deref()).await;
        let Some(watched) = self.unconfirmed.clone().or(successor) else {
            return;
        };
        let Ok(key) = member_key(&config.stream, &watched) else {
            return;
        };
        // While running, an eventually consistent read at half the price, when it shows the
        // member alive. An unconfirmed burial, and the watch while this instance shuts down
        // (whose readings tell `hand_on` when the member was written), read consistently.
        let running = *shared.phase.borrow() == kinesis_shard_reader::Phase::Running;
        if running && self.unconfirmed.is_none() && self.alive_eventually(&watched, &key).await {
            return;
        }
        let Some(row) = self.read(&watched, &key).await else {
            return;
        };
        // The read answered: whatever it shows settles an unconfirmed burial (a take that did
        // not land leaves the row present, and it is buried again below once dead).
        self.unconfirmed = None;
        let now = Instant::now();
        match row {
            Some(row) if roster::is_present(&row) => {
                let since = self.link.record(&row, now);
                if roster::is_dead(now.duration_since(since), config.lease_duration) {
                    self.bury(&key, &watched, row.counter).await;
                } else {
                    self.schedule(since, now);
                }
            }
            // This instance's take of it landed, though its answer was lost.
            Some(row) if row.is_held_by(&config.owner) => {
                self.buried(&key, &watched, row.counter).await;
            }
            // It left, or another instance found it dead: the roster changed. Its leave bumped
            // the epoch, unless that failed; bump it (again) so nobody misses its rows.
            _ => {
                // Once per departure: it is not watched again, even if the listing fails.
                self.members.remove(&watched);
                self.link.relist.store(true, Ordering::SeqCst);
                shared.bump_epoch("a member left").await;
                self.list_roster().await;
            }
        }
    }

    /// Once a lease, reads the member after `successor` in the ring and records what it shows
    /// (`Link::record`), without judging it. Should the successor and that member crash
    /// together, this instance buries the successor first and watches that member next: its
    /// count then starts from this sighting, not from a first reading after the burial, so its
    /// shards are read again 14 to 15 s after its last renewal instead of 20
    /// (`a_neighbour_restarting_under_its_own_id_does_not_restart_the_count_of_the_next`). The
    /// roster listing every lease gave the same sightings of every member, at one read per
    /// member; this is one eventually consistent read per lease in all (0.05 RCU/s).
    async fn glance(&mut self, successor: Option<&str>) {
        let now = Instant::now();
        if now < self.glance_at {
            return;
        }
        let shared = self.shared.clone();
        let config = &shared.config;
        let Some(next) = successor
            .and_then(|s| roster::successor(&self.members, s))
            .filter(|n| *n != config.owner && Some(*n) != successor)
            .map(str::to_owned)
        else {
            return;
        };
        let Ok(key) = member_key(&config.stream, &next) else {
            return;
        };
        self.glance_at = now + config.lease_duration;
        // Eventually consistent: a sighting only starts a count, which an older answer can
        // only make later (see `alive_eventually`).
        if let Ok(Some(row)) = bounded(&shared, "read", shared.store.read_eventually(&key)).await {
            if roster::is_present(&row) {
                let _ = self.link.record_eventual(&row, Instant::now());
            }
        }
    }

    /// Goes on watching former successors after members joined between this instance and
    /// them, each until it is seen written since the change, buried, or gone, and for at most
    /// a lease and a list interval after the change (judged after a last reading): its new
    /// watcher counts its standing still from its own first reading only, which may come long
    /// after its last renewal (see the module docs).
    async fn watch_formers(&mut self) {
        let mut formers: Vec<(String, Instant)> =
            self.formers.iter().map(|(m, c)| (m.clone(), *c)).collect();
        formers.sort();
        for (member, changed) in formers {
            if self.watch_former(&member, changed).await {
                self.formers.remove(&member);
            }
        }
    }

    /// One reading of the former successor `member` (the ring changed at `changed`): true
    /// once it need not be watched any longer.
    async fn watch_former(&mut self, member: &str, changed: Instant) -> bool {
        let shared = self.shared.clone();
        let config = &shared.config;
        if !self.members.contains(member) || self.successor.as_deref() == Some(member) {
            return true;
        }
        let Ok(key) = member_key(&config.stream, member) else {
            return true;
        };
        let expired = |now: Instant| now >= changed + config.lease_duration + config.list_interval;
        let row = match bounded(&shared, "read", shared.store.read(&key)).await {
            Ok(row) => row,
            Err(error) => {
                tracing::warn!(%member, error = %ErrorChain(&error), "reading a former watched member failed");
                return expired(Instant::now());
            }
        };
        let now = Instant::now();
        match row {
            Some(row) if roster::is_present(&row) => {
                let since = self.link.record(&row, now);
                if since > changed {
                    // Written since the change: alive then, so its new watcher's count, from
                    // a reading no earlier than that write, is as good as this one.
                    true
                } else if roster::is_dead(now.duration_since(since), config.lease_duration) {
                    self.bury(&key, member, row.counter).await;
                    true
                } else {
                    self.schedule(since, now);
                    expired(now)
                }
            }
            // Buried by its new watcher, or gone.
            _ => true,
        }
    }

    /// After the hand-on of a leave: the former successors still watched are watched to the
    /// end, every take interval.
    async fn finish_formers(&mut self) {
        while !self.formers.is_empty() {
            self.watch_formers().await;
            if self.formers.is_empty() {
                return;
            }
            sleep(self.shared.config.take_interval).await;
        }
    }

    /// After this instance left the roster (its leave announced at `left_at`): goes on
    /// watching its last successor until it is buried, or seen written after `left_at -
    /// renew`, or gone; for at most a lease and a list interval. Nothing to do when no other
    /// member would watch it next.
    async fn hand_on(&mut self, left_at: Instant) {
        let shared = self.shared.clone();
        let config = &shared.config;
        // An unconfirmed burial is settled first: if it landed, nobody else will announce it.
        let unconfirmed = self.unconfirmed.clone();
        let Some(watched) = unconfirmed
            .clone()
            .or_else(|| roster::successor(&self.members, &config.owner).map(str::to_owned))
        else {
            return;
        };
        if unconfirmed.is_none()
            && !self
                .members
                .iter()
                .any(|m| *m != config.owner && *m != watched)
        {
            // Nobody else would watch it next: nothing to hand on.
            return;
        }
        let Ok(key) = member_key(&config.stream, &watched) else {
            return;
        };
        let enough = left_at
            .checked_sub(config.renew_interval)
            .unwrap_or(left_at);
        let until = left_at + config.lease_duration + config.list_interval;
        loop {
            self.watch_formers().await;
            let handed_on = self
                .written_after
                .as_ref()
                .is_some_and(|(m, after)| *m == watched && *after >= enough);
            if handed_on {
                tracing::debug!(member = %watched, "watch handed on");
                return;
            }
            if Instant::now() >= until {
                tracing::warn!(member = %watched, "left without seeing the watched member renew or die");
                if self.unconfirmed.is_some() {
                    // A burial that may have landed, never confirmed: announce it anyway (a
                    // needless announcement costs the others one listing).
                    self.announce(&key).await;
                }
                return;
            }
            if let Some(row) = self.read(&watched, &key).await {
                self.unconfirmed = None;
                let now = Instant::now();
                match row {
                    Some(row) if roster::is_present(&row) => {
                        let since = self.link.record(&row, now);
                        if roster::is_dead(now.duration_since(since), config.lease_duration) {
                            self.bury(&key, &watched, row.counter).await;
                            if self.unconfirmed.is_none() {
                                return;
                            }
                        }
                    }
                    Some(row) if row.is_held_by(&config.owner) => {
                        self.buried(&key, &watched, row.counter).await;
                        return;
                    }
                    // It left, or another instance buried it.
                    _ => return,
                }
            }
            sleep(config.take_interval).await;
        }
    }

    /// Takes the member row of `member`, found dead, fenced on the `counter` that stood still
    /// for a lease: no renewal of it can land later, so none of its keepers can go on. Then
    /// tells the others, whose next listing may take its rows at once.
    async fn bury(&mut self, key: &LeaseKey, member: &str, counter: u64) {
        let shared = self.shared.clone();
        let config = &shared.config;
        let holder = Holder::new(config.owner.clone(), roster::new_token());
        let take = Take::fenced(config.lease_duration, counter);
        match bounded(&shared, "take", shared.store.take(key, &holder, &take)).await {
            Ok(Outcome::Written(taken)) => self.buried(key, member, taken.counter).await,
            // Held by this instance already: an earlier take of ours landed late.
            Ok(Outcome::Lost(lost)) if lost.holder.as_deref() == Some(config.owner.as_str()) => {
                self.buried(key, member, lost.counter).await;
            }
            Ok(Outcome::Lost(_)) => {}
            Err(error) => {
                tracing::warn!(%member, error = %ErrorChain(&error), "taking a dead member's row failed; the next watch sees whether it landed");
                self.unconfirmed = Some(member.to_owned());
            }
        }
    }

    /// After this instance took the member row of `member`, found dead (at `counter` now):
    /// tells this coordinator and the others, whose next listing may take its rows at once.
    async fn buried(&mut self, key: &LeaseKey, member: &str, counter: u64) {
        let shared = self.shared.clone();
        tracing::warn!(%member, counter, "member found dead (its row stood still for a lease); its shards are free");
        shared.metrics.member_found_dead();
        // Once per burial: it is not watched again, even if the listing below fails.
        self.members.remove(member);
        // Should it come back under the same id (a restart keeping its hostname), it counts as
        // a member that joined: the one after it in the ring stays this instance's to watch.
        if let Some(seen) = &mut self.seen_members {
            seen.remove(member);
        }
        self.announce(key).await;
    }

    /// Tells this coordinator and the others that the roster changed (a member whose row is
    /// `key` was buried): the roster's epoch and the stream's are bumped, and the roster listed.
    async fn announce(&mut self, key: &LeaseKey) {
        let shared = self.shared.clone();
        // This coordinator lists at its next tick, whatever the bumps below do.
        self.link.relist.store(true, Ordering::SeqCst);
        // The row stays, held by this instance (so its counter never starts over while anyone
        // may still watch it); the janitor deletes it much later.
        let bumped = shared
            .bump_within(key.stream(), shared.config.lease_duration)
            .await;
        if let Err(error) = bumped {
            // Owed, as a join's is: tried again after the member row's next renewal.
            tracing::warn!(error = %ErrorChain(&error), "could not bump the roster's epoch; retrying after the next renewal");
            shared.roster_bump_owed.store(true, Ordering::SeqCst);
        }
        // Retried here for up to a lease: while this instance drains in a shutdown its
        // coordinator no longer ticks, so an owed bump would wait for the leave, and this
        // watcher may be the only one to know.
        if !shared
            .bump_epoch_leaving(&shared.config.stream, "a member found dead")
            .await
        {
            shared.bump_owed.store(true, Ordering::SeqCst);
        }
        self.list_roster().await;
    }

    /// The janitor's part of a watch: deletes the member rows of instances that left or were
    /// buried once this instance has seen them stand still for [`DEPARTED_FOR`] leases: by then
    /// nobody still acts on an old reading of them (a row deleted and created again starts
    /// its counter over).
    async fn delete_departed(&mut self) {
        let shared = self.shared.clone();
        if !crate::cleanup::is_janitor(&self.members, &shared.config.owner) {
            return;
        }
        let lease = shared.config.lease_duration;
        let doomed: Vec<(LeaseKey, u64)> = self
            .departed
            .values()
            .filter(|(_, _, since)| since.elapsed() >= lease * DEPARTED_FOR)
            .map(|(key, counter, _)| (key.clone(), *counter))
            .collect();
        // A delete that failed stays due, tried again at the next watch: dropped, its row
        // came back to this janitor only at the next change of the roster, and in a quiet
        // fleet stood for good (review).
        let failed = delete_rows(&shared, doomed.clone()).await;
        for (key, _) in &doomed {
            if !failed.contains(key) {
                self.departed.remove(key.shard());
            }
        }
    }
}
