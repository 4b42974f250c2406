//! The reader of one shard: GetRecords into the subscription's channel.
//!
//! It opens its iterator after the checkpoint (or at the start position, see the `start`
//! rules; at a checkpoint inside a KPL aggregate it opens at the aggregate and skips the
//! sub-records that settled), unpacks KPL aggregates into one delivery per sub-record (see
//! `deaggregation`), reopens at the pinned start position while it has delivered nothing,
//! reads at most `max_reads_per_second` times a second, reads again at once while behind the
//! tip and waits a poll interval after an empty read at the tip. It recovers instead of
//! failing: an expired iterator is reopened just after the last record it delivered (no
//! duplicate, even inside an aggregate), throttling and
//! transient failures back off with jitter, a deleted stream becomes the subscription's error
//! and the lease is released. A shard ends only on proof that nothing of it is left to read:
//! the read that reached its end (no next iterator), or, after ResourceNotFound, ListShards no
//! longer listing it (a closed shard past retention; ListShards also tells a deleted stream)
//! or the reader having delivered its ending sequence number. A shard merely listed as closed
//! is no proof: the reader retries it. At the end of a closed shard it waits until every
//! delivery of the shard has settled and has the keeper write `SHARD_END`. A shard whose settlement window is full (a record that never
//! settles) is not read further until it drains, and its stuck record is logged.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kinesis_dispatch::{QuietFeed, ShardFeed, ShardSettlement, TrySend};
use kinesis_lease_core::{ErrorChain, SequenceNumber};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use kinesis_lease_core::Backoff;
use kinesis_stream_core::{ReaderError, StartAt};

use crate::control::{left_running, KeeperCmd, Phase, Signal};
use crate::deaggregation::{expand_into, KplCounters};
use crate::first_read::FirstRead;
use crate::metrics::ShardMetrics;
use crate::read_context::ReadContext;
use crate::start::StartPlan;

/// The reader of one held shard: run it with [`Reader::run`] on the shard's start plan.
#[derive(Debug)]
pub struct Reader {
    /// What the subscription's readers share.
    pub context: Arc<ReadContext>,
    /// The shard.
    pub shard: String,
    /// Where its records go: the subscription's channel, tagged with the shard's settlement.
    pub feed: ShardFeed,
    /// The shard's settlement (its window bounds what is read ahead of the checkpoint).
    pub settlement: Arc<ShardSettlement>,
    /// The lease keeper's word: read on, stop, or lost.
    pub signal: watch::Receiver<Signal>,
    /// The subscription's phase: reading stops once it leaves `Running`.
    pub phase: watch::Receiver<Phase>,
    /// Where the reader tells the keeper that the shard ended, or to release it.
    pub keeper: mpsc::Sender<KeeperCmd>,
    /// How far the last read was behind the tip, for `stats()`.
    pub millis_behind: Arc<AtomicU64>,
    /// The shard's hash key range, when the listing had it: sub-records outside it are
    /// counted.
    pub hash_range: Option<(u128, u128)>,
    /// The shard's KPL counters.
    pub kpl: Arc<KplCounters>,
    /// MillisBehindLatest of this shard.
    pub metrics: ShardMetrics,
    /// The position Kinesis refuses to read the shard at, while it does (see `refusal`).
    pub refusal: Arc<crate::Refusal>,
    /// When the take (or hand-over) that gave this holding landed: the first read is timed
    /// from it (see `first_read`).
    pub taken_at: Instant,
}

pub(crate) enum Stop {
    /// Lost, shutting down, or the channel closed.
    Stopped,
}

/// Where a shard's reading stands: what was delivered, and where to (re)open.
pub(crate) struct Delivered {
    /// The start position of the first open.
    start: StartAt,
    /// Where to open again while nothing was delivered (the pinned start).
    reopen: StartAt,
    /// Not opened yet.
    first_open: bool,
    /// Sub-records at or below this were delivered already (by a previous owner, or before a
    /// reopen inside an aggregate): skipped.
    pub(crate) skip_upto: Option<SequenceNumber>,
    /// The last record sent into the channel, as of the last `deliver` that returned `Ok`
    /// (inside a page only the last record of a run of plain records is kept; a `deliver`
    /// that returned `Err` stops the reader, which opens nothing again).
    pub(crate) last_delivered: Option<SequenceNumber>,
    /// One record's sub-records (or the record itself), reused from record to record.
    records: Vec<kinesis_dispatch::Record>,
    /// The holding's way to its first queued record.
    pub(crate) first: FirstRead,
}

impl Delivered {
    pub(crate) fn new(
        start: StartAt,
        reopen: StartAt,
        skip: Option<SequenceNumber>,
        taken: Instant,
    ) -> Self {
        Self {
            start,
            reopen,
            first_open: true,
            skip_upto: skip,
            last_delivered: None,
            records: Vec::new(),
            first: FirstRead::since(taken),
        }
    }

    /// Where to open (or open again): just after the last delivered record (at its aggregate,
    /// skipping what was delivered of it, inside one), else the start position the first
    /// time, else the pinned start: never a fresh LATEST after the first open, which would
    /// skip records.
    pub(crate) fn resume(&mut self) -> StartAt {
        let first = std::mem::replace(&mut self.first_open, false);
        match &self.last_delivered {
            Some(seq) if seq.subsequence().is_some() => {
                self.skip_upto = Some(seq.clone());
                StartAt::AtSequence(seq.clone())
            }
            Some(seq) => StartAt::AfterSequence(seq.clone()),
            None if first => self.start.clone(),
            None => self.reopen.clone(),
        }
    }
}

/// Where [`Reader::offer_plain`] stopped.
enum Next {
    /// At the page's end.
    Done,
    /// At a record that must wait for room or a place.
    Wait(kinesis_dispatch::Record),
    /// At a KPL aggregate, to unpack: the page's next record.
    Aggregate,
}

/// What [`Reader::offer`] did with a record.
enum Offer {
    /// Sent into the channel (held by the feed until its flush).
    Sent,
    /// Delivered before (at or below `skip_upto`): not sent again.
    Skipped,
    /// No room in the settlement window or no place in the channel: send it waiting.
    Wait(kinesis_dispatch::Record),
}

impl Reader {
    fn stopping(&self) -> bool {
        *self.signal.borrow() != Signal::Reading
            || *self.phase.borrow() != Phase::Running
            || self.settlement.is_revoked()
    }

    /// [`stopping`](Self::stopping) for a reader that found it false earlier in this page:
    /// a watch's value is looked at (a read lock on a line every shard's reader shares) only
    /// once it moved since this reader's receiver was made, which one atomic load tells.
    /// Nothing here marks a value seen, so a move is never missed; a value that was already
    /// not `Reading` (or not `Running`) when the receiver was made was found by the full check.
    fn stopping_since_checked(&self) -> bool {
        self.settlement.is_revoked()
            || (self.signal.has_changed().unwrap_or(true)
                && *self.signal.borrow() != Signal::Reading)
            || (self.phase.has_changed().unwrap_or(true) && *self.phase.borrow() != Phase::Running)
    }

    /// Runs `fut` unless the reader must stop first.
    pub(crate) async fn or_stop<F: Future>(&mut self, fut: F) -> Result<F::Output, Stop> {
        if self.stopping() {
            return Err(Stop::Stopped);
        }
        let (mut signal, mut phase) = (self.signal.clone(), self.phase.clone());
        tokio::select! {
            biased;
            _ = async { let _ = signal.wait_for(|s| *s != Signal::Reading).await.map(drop); } => Err(Stop::Stopped),
            _ = left_running(&mut phase) => Err(Stop::Stopped),
            out = fut => Ok(out),
        }
    }

    pub(crate) async fn pause(&mut self, delay: Duration) -> Result<(), Stop> {
        self.or_stop(tokio::time::sleep(delay)).await
    }

    /// Reads the shard from `plan` until it ends, its lease is lost, or the subscription
    /// leaves `Running`.
    pub async fn run(mut self, plan: StartPlan) {
        if let Some(arn) = self.context.consumer_arn.get() {
            return self.run_fan_out(plan, arn).await;
        }
        let StartPlan {
            open: start,
            reopen,
            skip,
            ..
        } = plan;
        let mut at = Delivered::new(start, reopen, skip, self.taken_at);
        let config = self.context.config.clone();
        let kinesis = self.context.kinesis.clone();
        let (stream, shard) = (config.stream.as_str(), self.shard.clone());
        let mut iterator: Option<String> = None;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut last_read: Option<Instant> = None;
        let gap = config.min_read_gap();
        loop {
            let it = match iterator.take() {
                Some(it) => it,
                None => {
                    let position = at.resume();
                    self.refusal.opening(&position);
                    match self
                        .or_stop(kinesis.shard_iterator(stream, &shard, &position))
                        .await
                    {
                        Err(Stop::Stopped) => return,
                        Ok(Ok(it)) => {
                            at.first.opened();
                            it
                        }
                        Ok(Err(error)) => {
                            let last = at.last_delivered.clone();
                            if self.failed(error, &mut backoff, last).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            if let Some(at) = last_read {
                let wait = (at + gap).saturating_duration_since(Instant::now());
                if !wait.is_zero() && self.pause(wait).await.is_err() {
                    return;
                }
            }
            last_read = Some(Instant::now());
            let page = match self
                .or_stop(kinesis.get_records(stream, &shard, &it, config.records_per_call))
                .await
            {
                Err(Stop::Stopped) => return,
                Ok(Ok(page)) => page,
                Ok(Err(ReaderError::ExpiredIterator { .. })) => {
                    tracing::info!(after = ?at.last_delivered.as_ref().map(ToString::to_string), "iterator expired; reopening after the last delivered record");
                    continue;
                }
                Ok(Err(error)) => {
                    // Keep the iterator for the retry unless Kinesis refused it.
                    if !matches!(error, ReaderError::Refused { .. }) {
                        iterator = Some(it);
                    }
                    let last = at.last_delivered.clone();
                    if self.failed(error, &mut backoff, last).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            backoff.reset();
            self.read_succeeded();
            // A page that does not say how far behind it is counts as at the tip.
            let at_tip = page.millis_behind.unwrap_or(0) == 0;
            if let Some(behind) = page.millis_behind {
                self.millis_behind.store(behind, Ordering::Relaxed);
                self.metrics.behind(behind);
            }
            let empty = page.records.is_empty();
            at.first.page(page.records.len(), at_tip);
            if self.deliver(page.records, &mut at).await.is_err() {
                return;
            }
            match page.next_iterator {
                None => return self.shard_ended(page.child_shards).await,
                Some(next) => iterator = Some(next),
            }
            if empty && at_tip && self.pause(config.poll_interval).await.is_err() {
                return;
            }
        }
    }

    /// Sends one read's records into the channel, in order, one Kinesis record at a time with
    /// KPL aggregates unpacked (at most one aggregate's sub-records are held here beyond what
    /// was delivered), skipping what `at` says was delivered already. `Err` when the reader
    /// must stop.
    ///
    /// Records go in quietly while places are free (see `QuietFeed`): the handlers' loops are
    /// woken once the page is in, or before the reader waits for anything, not once per
    /// record; a record that finds no place is sent with waiting, the reader stopping at once
    /// if its lease goes meanwhile.
    pub(crate) async fn deliver(
        &mut self,
        page: Vec<kinesis_dispatch::Record>,
        at: &mut Delivered,
    ) -> Result<(), Stop> {
        let max_unsettled = self.context.config.max_unsettled;
        if self.stopping() {
            return Err(Stop::Stopped);
        }
        let mut quiet = self.feed.quietly();
        // Room left in the settlement window, counted down here and read again (a lock on the
        // window the handlers settle in) only once it runs out: records only leave the window
        // meanwhile, and this reader is the shard's only sender.
        let mut room = 0;
        let mut page = page.into_iter();
        loop {
            // Plain records go on in a plain loop, handed from call to call by value (a record
            // is a couple of hundred bytes: each move through a vector or a waiting future is
            // a copy); only a record that must wait, or an aggregate, comes back here.
            let record =
                match self.offer_plain(&mut quiet, &mut page, at, &mut room, max_unsettled)? {
                    Next::Done => return Ok(()),
                    Next::Wait(record) => {
                        self.send_waiting(&mut quiet, record, at, &mut room, max_unsettled)
                            .await?;
                        continue;
                    }
                    Next::Aggregate => match page.next() {
                        Some(record) => record,
                        None => return Ok(()),
                    },
                };
            // An aggregate is unpacked into `records`.
            let mut records = std::mem::take(&mut at.records);
            records.clear();
            expand_into(record, self.hash_range, &self.kpl, &mut records);
            // What is still to come, for the feed to wait for places in batches: the rest of
            // the page and this record's sub-records.
            quiet.expect(page.len() + records.len());
            for record in records.drain(..) {
                if let Offer::Wait(record) =
                    self.offer(&mut quiet, record, true, at, &mut room, max_unsettled)?
                {
                    self.send_waiting(&mut quiet, record, at, &mut room, max_unsettled)
                        .await?;
                }
            }
            if records.capacity() <= 4_096 {
                // Reused for the next record (a huge aggregate of tiny sub-records gives its
                // memory back instead).
                at.records = records;
            }
        }
    }

    /// Sends the page's plain records while none has to wait, up to the page's end, the
    /// first record that must wait, or the first aggregate.
    fn offer_plain(
        &mut self,
        quiet: &mut QuietFeed,
        page: &mut std::vec::IntoIter<kinesis_dispatch::Record>,
        at: &mut Delivered,
        room: &mut u64,
        max_unsettled: usize,
    ) -> Result<Next, Stop> {
        // Looked at where it lies before it is taken: one copy fewer of each record.
        while let Some(next) = page.as_slice().first() {
            if kinesis_kpl::is_aggregated(&next.payload) {
                return Ok(Next::Aggregate);
            }
            // What is still to come, for the feed to wait for places in batches.
            quiet.expect(page.len());
            let Some(record) = page.next() else { break };
            // `last_delivered` is needed once `deliver` returned (to open again after it), so
            // only the last plain record of a run is remembered: the one before the page's end
            // or an aggregate (whose sub-records are each remembered, one may be the last).
            // A record given back to wait is remembered when it is sent.
            let remember = page
                .as_slice()
                .first()
                .is_none_or(|next| kinesis_kpl::is_aggregated(&next.payload));
            if let Offer::Wait(record) =
                self.offer(quiet, record, remember, at, room, max_unsettled)?
            {
                return Ok(Next::Wait(record));
            }
        }
        Ok(Next::Done)
    }

    /// Sends `record` if it can without waiting: skipped when delivered before, sent when the
    /// settlement window has room and the channel a place, given back to wait for them
    /// otherwise. A record sent is kept as `at.last_delivered` when `remember` says so.
    #[inline]
    fn offer(
        &mut self,
        quiet: &mut QuietFeed,
        record: kinesis_dispatch::Record,
        remember: bool,
        at: &mut Delivered,
        room: &mut u64,
        max_unsettled: usize,
    ) -> Result<Offer, Stop> {
        if let Some(skip) = &at.skip_upto {
            if record.sequence <= *skip {
                return Ok(Offer::Skipped);
            }
            // Past the checkpoint (or the last delivered record): read on as usual.
            at.skip_upto = None;
        }
        if *room == 0 {
            *room = self.room(max_unsettled);
            if *room == 0 {
                return Ok(Offer::Wait(record));
            }
        }
        if self.stopping_since_checked() {
            return Err(Stop::Stopped);
        }
        let sequence = remember.then(|| record.sequence.clone());
        match quiet.try_send(record) {
            Ok(TrySend::Sent) => {}
            Ok(TrySend::Full(record)) => return Ok(Offer::Wait(record)),
            Err(_) => return Err(Stop::Stopped),
        }
        *room -= 1;
        if sequence.is_some() {
            at.last_delivered = sequence;
        }
        at.first.queued();
        Ok(Offer::Sent)
    }

    /// Sends `record`, which [`offer`](Self::offer) found no room or no place for, waiting
    /// for them (the records held so far queued first, the loops woken), stopping at once if
    /// the reader must.
    async fn send_waiting(
        &mut self,
        quiet: &mut QuietFeed,
        record: kinesis_dispatch::Record,
        at: &mut Delivered,
        room: &mut u64,
        max_unsettled: usize,
    ) -> Result<(), Stop> {
        while *room == 0 {
            quiet.flush();
            self.wait_for_room(max_unsettled).await?;
            *room = self.room(max_unsettled);
        }
        if self.stopping_since_checked() {
            return Err(Stop::Stopped);
        }
        let sequence = record.sequence.clone();
        match self.or_stop(quiet.send(record)).await {
            Ok(Ok(())) => {}
            // Revoked or closed: nothing more can be delivered.
            Ok(Err(_)) | Err(Stop::Stopped) => return Err(Stop::Stopped),
        }
        *room -= 1;
        at.last_delivered = Some(sequence);
        at.first.queued();
        Ok(())
    }

    /// The shard was read to its end: once every delivery of it has settled, the keeper
    /// writes `SHARD_END`.
    pub(crate) async fn shard_ended(&mut self, children: Vec<String>) {
        tracing::info!(
            ?children,
            "shard end reached; waiting for its deliveries to settle"
        );
        let settlement = self.settlement.clone();
        if self.or_stop(settlement.all_settled()).await.is_ok() {
            let _ = self.keeper.send(KeeperCmd::ShardEnd).await;
        }
    }

    /// True while the shard's settlement window has room for another record.
    fn has_room(&self, limit: usize) -> bool {
        self.room(limit) > 0
    }

    /// How many more records the shard's settlement window takes now (a limit of 0 counts as
    /// 1, as `wait_for_room` does: the configuration refuses 0, and a reader must not spin).
    fn room(&self, limit: usize) -> u64 {
        (limit.max(1) as u64).saturating_sub(self.settlement.window_len())
    }

    /// Waits while the shard's settlement window is full, reporting its stuck head once.
    async fn wait_for_room(&mut self, limit: usize) -> Result<(), Stop> {
        if self.has_room(limit) {
            return Ok(());
        }
        if let Some(stuck) = self.settlement.stuck() {
            tracing::error!(
                sequence = %stuck.sequence,
                attempts = stuck.attempts,
                window = stuck.window,
                "settlement window full: a record does not settle; reading of this shard waits for it"
            );
        }
        let settlement = self.settlement.clone();
        self.or_stop(settlement.wait_for_room(limit)).await
    }

    /// Handles a failed call: backs off for retryable ones, fails the subscription for a
    /// deleted stream, ends a shard Kinesis no longer has. `Err` when the reader must stop.
    ///
    /// ResourceNotFound (`ShardNotFound`) ends the shard only on proof that nothing of it is
    /// left to read: ListShards no longer lists it (it aged out past retention), or
    /// `last_delivered` (the last record this reader delivered) is its ending sequence number.
    /// A shard ListShards shows closed is no such proof: the reader may be anywhere in it (and
    /// on a fan-out subscription the error may come from the consumer), so it retries.
    pub(crate) async fn failed(
        &mut self,
        error: ReaderError,
        backoff: &mut Backoff,
        last_delivered: Option<SequenceNumber>,
    ) -> Result<(), Stop> {
        match error {
            ReaderError::ShardNotFound { .. } => {
                let kinesis = self.context.kinesis.clone();
                let stream = self.context.config.stream.clone();
                let listed = self.or_stop(kinesis.list_shards(&stream)).await?;
                match listed {
                    Err(error @ ReaderError::StreamNotFound { .. }) => {
                        self.context.fail(error);
                        let _ = self.keeper.send(KeeperCmd::Release).await;
                        Err(Stop::Stopped)
                    }
                    Ok(shards) if !shards.iter().any(|s| s.id == self.shard) => {
                        tracing::error!(error = %ErrorChain(&error), "shard gone (past retention): it has ended; records not read before it aged out are lost to every consumer");
                        let settlement = self.settlement.clone();
                        if self.or_stop(settlement.all_settled()).await.is_ok() {
                            let _ = self.keeper.send(KeeperCmd::ShardEnd).await;
                        }
                        Err(Stop::Stopped)
                    }
                    Ok(shards)
                        if shards.iter().any(|s| {
                            s.id == self.shard
                                && read_to_end(
                                    s.ending_sequence.as_deref(),
                                    last_delivered.as_ref(),
                                )
                        }) =>
                    {
                        tracing::warn!(error = %ErrorChain(&error), "shard not found after its last record was delivered: it has ended");
                        self.shard_ended(Vec::new()).await;
                        Err(Stop::Stopped)
                    }
                    // Listed (open, or closed and not read to its end), or the listing failed:
                    // retry after a pause.
                    _ => {
                        let delay = backoff.next_delay();
                        tracing::warn!(error = %ErrorChain(&error), ?delay, "shard not found but still listed; retrying");
                        self.pause(delay).await
                    }
                }
            }
            ReaderError::StreamNotFound { .. } => {
                self.context.fail(error);
                let _ = self.keeper.send(KeeperCmd::Release).await;
                Err(Stop::Stopped)
            }
            error => {
                let delay = backoff.next_delay();
                if error.is_retryable() {
                    tracing::warn!(error = %ErrorChain(&error), ?delay, "read failed; backing off");
                } else if self
                    .refusal
                    .refused(ErrorChain(&error).to_string(), at_position(&error))
                {
                    self.metrics.refused(true);
                    if at_position(&error) {
                        tracing::error!(
                            refusal = ?self.refusal.text(),
                            ?delay,
                            "Kinesis refuses to read this shard at its position: it is held and \
                             not read until the position is readable; reset the shard to a \
                             position of its own (kinesis-broker reset --shard .. --to ..). \
                             Retrying after a pause"
                        );
                    } else {
                        tracing::error!(
                            refusal = ?self.refusal.text(),
                            ?delay,
                            "Kinesis refuses to read this shard (not for its position: check the \
                             IAM policy and the stream's KMS key); it is held and not read until \
                             Kinesis answers. Retrying after a pause"
                        );
                    }
                } else {
                    tracing::debug!(error = %ErrorChain(&error), ?delay, "Kinesis refused a read again; retrying after a pause");
                }
                self.pause(delay).await
            }
        }
    }
}

impl Reader {
    /// A read or an event succeeded: a refusal kept before is over.
    pub(crate) fn read_succeeded(&self) {
        if self.refusal.is_refused() {
            self.refusal.cleared();
            self.metrics.refused(false);
            tracing::info!("Kinesis reads this shard again");
        }
    }
}

/// True when Kinesis refused a call that opens the shard at a position (GetShardIterator,
/// SubscribeToShard): the position may be what it refuses.
fn at_position(error: &ReaderError) -> bool {
    matches!(
        error,
        ReaderError::Refused {
            operation: "GetShardIterator" | "SubscribeToShard",
            ..
        }
    )
}

/// True when `last_delivered` is the shard's last record: at `ending`, the ending sequence
/// number of a closed shard. A sub-record of a KPL aggregate at the ending sequence number is
/// no proof (more sub-records of it may follow); neither is a record past the ending number:
/// no record of a shard lies past its real ending, so that ending is not one (kinesis-local
/// gives `i64::MAX`, below every sequence number it hands out), and taking it for the end would
/// finish the shard with records unread.
fn read_to_end(ending: Option<&str>, last_delivered: Option<&SequenceNumber>) -> bool {
    let (Some(ending), Some(last)) = (ending, last_delivered) else {
        return false;
    };
    let Ok(ending) = SequenceNumber::new(ending, None) else {
        return false;
    };
    let record = SequenceNumber::new(last.number(), None).unwrap_or_else(|_| last.clone());
    record == ending && last.subsequence().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = "49680771137534649747445830373881049489836951356531802114";

    fn seq(number: &str, subsequence: Option<u64>) -> SequenceNumber {
        SequenceNumber::new(number, subsequence).expect("a sequence number")
    }

    #[test]
    fn the_last_record_at_the_ending_number_is_the_end() {
        assert!(read_to_end(Some(RECORD), Some(&seq(RECORD, None))));
    }

    #[test]
    fn a_record_before_the_ending_number_is_not_the_end() {
        let ending = "49680771137534649747445830373881049489836951356531802115";
        assert!(!read_to_end(Some(ending), Some(&seq(RECORD, None))));
        assert!(!read_to_end(Some(ending), None));
    }

    #[test]
    fn a_sub_record_at_the_ending_number_is_not_the_end() {
        assert!(!read_to_end(Some(RECORD), Some(&seq(RECORD, Some(0)))));
    }

    /// kinesis-local closes shards with an ending number of `i64::MAX`, below every real
    /// sequence number: a record past the ending is no proof the shard was read to its end
    /// (a refused read there ended the shard with records unread).
    #[test]
    fn a_record_past_an_ending_number_that_is_not_one_is_not_the_end() {
        assert!(!read_to_end(
            Some("9223372036854775807"),
            Some(&seq(RECORD, None))
        ));
    }
}
