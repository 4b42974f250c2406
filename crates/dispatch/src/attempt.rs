//! Attempts: running a handler once on a record or a batch, with a span per call and panics
//! caught; a failure parks the record until its next attempt is due (see `parking`), and a
//! record whose attempts are used up (or that fails for good, with a dead letter set) goes to
//! the retry policy's final action. A dead-letter callback that fails leaves its record parked
//! like any failure, holding back what it held: tried again (handler, then callback) at its
//! next backoff step, never passed by the records behind it. Failures are logged once per
//! backoff step.

use std::panic::AssertUnwindSafe;
use std::task::Poll;

use futures_util::FutureExt;
use kinesis_lease_core::ErrorChain;
use tokio::time::Instant;
use tracing::Instrument;

use crate::batch::failed_with_followers;
use crate::ctx::Ctx;
use crate::delivery::Spare;
use crate::handler::{BatchHandler, Handler, OneHandler, Permanent};
use crate::parking::{Parked, Parking};
use crate::retry::Exhausted;
use crate::{Delivery, DispatchError, HandlerError};

/// The [`HandlerError`] a caught handler (or dead-letter callback) panic becomes, carrying
/// its message when the payload is a string.
pub(crate) fn panic_error(panic: Box<dyn std::any::Any + Send>) -> HandlerError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("handler panicked: {message}").into()
}

/// How one attempt ended.
pub(crate) enum Tried {
    /// Settled, or its lease was lost (the next owner handles it): nothing more to do here.
    Done,
    /// The handler failed (an `Err` or a caught panic).
    Failed(HandlerError),
}

/// True for an error that fails the same way on every attempt: a [`Permanent`] error, or a
/// payload that does not parse ([`DispatchError::InvalidPayload`]).
pub(crate) fn is_permanent(error: &HandlerError) -> bool {
    error.is::<Permanent>()
        || matches!(
            error.downcast_ref::<DispatchError>(),
            Some(DispatchError::InvalidPayload { .. })
        )
}

impl Ctx {
    /// A record taken for the first time: one attempt, parked on failure.
    pub(crate) async fn run_one(
        &self,
        handler: &OneHandler,
        delivery: Delivery,
        parking: &mut Parking,
    ) -> Option<Spare> {
        if delivery.is_revoked() {
            return None;
        }
        match self.attempt_one(handler, &delivery, 1).await {
            // Settled: its memory serves the lane's next record (see `Spare`).
            Tried::Done => delivery.into_spare(),
            Tried::Failed(error) => {
                self.failed(vec![delivery], None, 1, error, parking, false)
                    .await;
                None
            }
        }
    }

    /// A batch taken for the first time: one attempt, its failed records parked.
    pub(crate) async fn run_batch(
        &self,
        handler: &BatchHandler,
        batch: Vec<Delivery>,
        parking: &mut Parking,
    ) {
        let tried = self.attempt_batch(handler, batch, 1).await;
        if let Some(error) = tried.error {
            self.failed(tried.retry, Some(tried.named), 1, error, parking, false)
                .await;
        }
    }

    /// Parked records whose next attempt is due: attempt them again (together, for a batch's).
    pub(crate) async fn retry(&self, parked: Parked, parking: &mut Parking) {
        let attempt = parked.attempt.saturating_add(1);
        match &self.handler {
            Handler::One(handler) => {
                for delivery in parked.deliveries {
                    if delivery.is_revoked() {
                        parking.unpark(&delivery);
                        continue;
                    }
                    match self.attempt_one(handler, &delivery, attempt).await {
                        Tried::Done => parking.unpark(&delivery),
                        Tried::Failed(error) => {
                            self.failed(vec![delivery], None, attempt, error, parking, true)
                                .await;
                        }
                    }
                }
            }
            Handler::Batch(handler) => {
                let tried = self
                    .attempt_batch(handler, parked.deliveries, attempt)
                    .await;
                for delivery in &tried.done {
                    parking.unpark(delivery);
                }
                if let Some(error) = tried.error {
                    let named = Some(tried.named);
                    self.failed(tried.retry, named, attempt, error, parking, true)
                        .await;
                }
            }
        }
    }

    /// Records that failed their `attempt`-th attempt with `error`: used up (or failing for
    /// good, with a dead letter to send them to), they go to the policy's final action;
    /// otherwise, or when that action fails, they are parked until their next attempt is due.
    /// `named`: per record, whether the handler named it as failed (`None`: each was, a
    /// one-record handler); a record retried only to keep its key's order is never sent to the
    /// dead letter for an error that was not its own. `parked`: they were taken from the
    /// parking (their units are held already).
    async fn failed(
        &self,
        deliveries: Vec<Delivery>,
        named: Option<Vec<bool>>,
        attempt: u32,
        error: HandlerError,
        parking: &mut Parking,
        parked: bool,
    ) {
        let named = named.unwrap_or_else(|| vec![true; deliveries.len()]);
        let deliveries: Vec<(Delivery, bool)> = deliveries
            .into_iter()
            .zip(named)
            .filter(|(d, _)| {
                let revoked = d.is_revoked();
                if revoked && parked {
                    parking.unpark(d);
                }
                !revoked
            })
            .collect();
        if deliveries.is_empty() {
            return;
        }
        let used_up = self.retry.exhausted_after(attempt);
        let permanent =
            is_permanent(&error) && matches!(self.retry.exhausted, Exhausted::DeadLetter(_));
        let message = ErrorChain(&*error).to_string();
        let mut error = Some(error);
        let mut waiting = Vec::with_capacity(deliveries.len());
        for (delivery, named) in deliveries {
            // Once one record's final action failed, the rest wait with it: none of them may
            // settle before it.
            let last = used_up || (permanent && named);
            if !last || !waiting.is_empty() {
                waiting.push(delivery);
                continue;
            }
            let error = error.take().unwrap_or_else(|| message.clone().into());
            if self.exhaust(&delivery, error, attempt, !used_up).await {
                if parked {
                    parking.unpark(&delivery);
                }
            } else {
                waiting.push(delivery);
            }
        }
        let Some(first) = waiting.first() else {
            return;
        };
        let delay = self.retry.delay(attempt);
        // Once per backoff step (and every tenth attempt at the cap), not per attempt: a
        // record failing for hours must not flood the logs.
        let step =
            attempt == 1 || delay != self.retry.delay(attempt - 1) || attempt.is_multiple_of(10);
        if step {
            tracing::warn!(
                stream = first.stream(),
                shard = first.shard(),
                sequence = %first.sequence(),
                partition_key = first.partition_key(),
                records = waiting.len(),
                attempt,
                ?delay,
                error = %message,
                "handler failed; the record waits for its next attempt, holding back only \
                 what must stay behind it"
            );
        }
        let due = Instant::now() + delay;
        if parked {
            parking.park_again(waiting, attempt, due);
        } else {
            parking.park(waiting, attempt, due);
        }
    }

    /// One attempt of `delivery` (its `attempt`-th).
    async fn attempt_one(&self, handler: &OneHandler, delivery: &Delivery, attempt: u32) -> Tried {
        // Counted as running first, then checked: a hand-over that revokes the shard and then
        // waits for it to be idle either sees this attempt or stops it here.
        let running = delivery.running_ref();
        // A lease lost or handed over while this record waited: the next owner handles it.
        if delivery.is_revoked() {
            return Tried::Done;
        }
        // The shard's load (`ShardSettlement::busy`): the first poll is timed in one call in
        // `BUSY_SAMPLE_EVERY` and counts that many times over, and a call that waits is timed
        // from then on whole, so both parts are counted without bias at two clock reads per
        // `BUSY_SAMPLE_EVERY` calls done at their first poll. The same draw times one call in
        // 64 for the `HandlerDuration` histogram (with metrics on).
        let draw = fastrand::u32(..crate::metrics::SAMPLE_EVERY);
        let sampled =
            (draw < crate::metrics::SAMPLE_EVERY / crate::BUSY_SAMPLE_EVERY).then(Instant::now);
        // One span per call: what the handler logs names its record.
        let span = tracing::info_span!(
            "handle",
            stream = delivery.stream(),
            shard = delivery.shard(),
            sequence = delivery.sequence_text(),
            partition_key = delivery.partition_key(),
            attempt,
        );
        let mut call = {
            let _entered = span.enter();
            AssertUnwindSafe((handler.0)(delivery.clone()))
                .catch_unwind()
                .instrument(span.clone())
        };
        // The hot path: a handler done at its first poll needs no watch on the lease (the
        // shard was checked just above).
        let first = std::future::poll_fn(|cx| Poll::Ready(call.poll_unpin(cx))).await;
        let polled = sampled.map(|started| {
            let now = Instant::now();
            delivery.add_busy((now - started) * crate::BUSY_SAMPLE_EVERY);
            (started, now)
        });
        let outcome = match first {
            Poll::Ready(outcome) => {
                if let (true, 0, Some((started, now))) = (crate::metrics::ON, draw, polled) {
                    delivery.metrics().handled(now - started);
                }
                outcome
            }
            // A handler that waits: from now on the lease is checked before every poll.
            Poll::Pending => {
                let waiting = polled.map_or_else(Instant::now, |(_, now)| now);
                let outcome = tokio::select! {
                    biased;
                    // The lease is lost: stop the attempt now, the next owner handles the
                    // record.
                    () = delivery.abandoned() => return Tried::Done,
                    outcome = &mut call => outcome,
                };
                delivery.add_busy(waiting.elapsed());
                if crate::metrics::ON {
                    let from = polled.map_or(waiting, |(started, _)| started);
                    delivery.metrics().handled(from.elapsed());
                }
                outcome
            }
        };
        let result = outcome.unwrap_or_else(|panic| Err(panic_error(panic)));
        drop(running);
        match result {
            Ok(()) => {
                delivery.ack();
                Tried::Done
            }
            Err(error) => {
                delivery.attempt_failed();
                if delivery.is_revoked() {
                    Tried::Done
                } else {
                    Tried::Failed(error)
                }
            }
        }
    }

    /// One attempt of a batch (its `attempt`-th). A shard whose lease is lost during the call
    /// stops it; the call is made again without that shard's records.
    async fn attempt_batch(
        &self,
        handler: &BatchHandler,
        batch: Vec<Delivery>,
        attempt: u32,
    ) -> BatchTried {
        let (mut batch, mut done): (Vec<Delivery>, Vec<Delivery>) =
            batch.into_iter().partition(|d| !d.is_revoked());
        loop {
            let running: Vec<_> = batch.iter().map(Delivery::running).collect();
            let revoked;
            (batch, revoked) = batch.into_iter().partition(|d| !d.is_revoked());
            done.extend(revoked);
            if batch.is_empty() {
                return BatchTried::done(done);
            }
            let started = Instant::now();
            let span = tracing::info_span!(
                "handle_batch",
                stream = batch[0].stream(),
                shards = batch
                    .iter()
                    .map(Delivery::shard)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len(),
                first_sequence = batch[0].sequence_text(),
                records = batch.len(),
                attempt,
            );
            let call = {
                let _entered = span.enter();
                (handler.f)(batch.clone())
            }
            .instrument(span.clone());
            let abandoned =
                futures_util::future::select_all(batch.iter().map(|d| Box::pin(d.abandoned())));
            let outcome = tokio::select! {
                biased;
                // A shard of the batch lost its lease: stop the attempt, and run it again
                // without that shard's records (the others are still this instance's).
                _ = abandoned => continue,
                outcome = AssertUnwindSafe(call).catch_unwind() => outcome,
            };
            // The call's time, shared evenly among its records (and so among their shards).
            let took = started.elapsed();
            let share = took / u32::try_from(batch.len()).unwrap_or(u32::MAX);
            batch.iter().for_each(|d| d.add_busy(share));
            if let (true, Some(first)) = (crate::metrics::ON, batch.first()) {
                first.metrics().handled(took);
            }
            drop(running);
            let (failed, error) = match outcome {
                Ok(Ok(())) => {
                    batch.iter().for_each(Delivery::ack);
                    done.extend(batch);
                    return BatchTried::done(done);
                }
                Ok(Err(failure)) => (failure.failed, failure.error),
                Err(panic) => (None, panic_error(panic)),
            };
            let named = named_records(batch.len(), failed.as_deref());
            let failed = failed_with_followers(&batch, failed.as_deref());
            let (mut retry, mut retry_named) = (Vec::new(), Vec::new());
            for ((delivery, failed), named) in batch.into_iter().zip(failed).zip(named) {
                if failed {
                    delivery.attempt_failed();
                }
                if failed && !delivery.is_revoked() {
                    retry.push(delivery);
                    retry_named.push(named);
                } else {
                    if !failed {
                        delivery.ack();
                    }
                    done.push(delivery);
                }
            }
            let error = (!retry.is_empty()).then_some(error);
            return BatchTried {
                done,
                retry,
                named: retry_named,
                error,
            };
        }
    }

    /// The policy's final action on `delivery` (`permanent`: it failed for good, its attempts
    /// are not used up); true when the record is settled, false when a dead-letter callback
    /// failed and the record must be tried again.
    async fn exhaust(
        &self,
        delivery: &Delivery,
        error: HandlerError,
        attempts: u32,
        permanent: bool,
    ) -> bool {
        let why = if permanent {
            "the record failed for good"
        } else {
            "attempts used up"
        };
        let (stream, shard, sequence) = (
            delivery.stream().to_owned(),
            delivery.shard().to_owned(),
            delivery.sequence().to_string(),
        );
        // A dead-letter callback is user code on the record: a hand-over waits for it too.
        let _running = delivery.running();
        match &self.retry.exhausted {
            Exhausted::Skip => {
                tracing::error!(%stream, %shard, %sequence, attempts, error = %ErrorChain(&*error), "{why}; skipping the record");
                delivery.ack();
                true
            }
            Exhausted::DeadLetter(callback) => {
                let call = callback(delivery.clone(), error);
                match AssertUnwindSafe(call).catch_unwind().await {
                    Ok(Ok(())) => {
                        tracing::warn!(%stream, %shard, %sequence, attempts, "{why}; record sent to the dead-letter callback");
                        delivery.metrics().dead_lettered();
                        delivery.ack();
                        true
                    }
                    Ok(Err(e)) => {
                        tracing::error!(%stream, %shard, %sequence, error = %ErrorChain(&*e), "dead-letter callback failed; the record stays unsettled and parked, and is tried again at its next step");
                        false
                    }
                    Err(panic) => {
                        tracing::error!(%stream, %shard, %sequence, error = %panic_error(panic), "dead-letter callback panicked; the record stays unsettled and parked, and is tried again at its next step");
                        false
                    }
                }
            }
        }
    }
}

/// What one attempt of a batch left.
struct BatchTried {
    /// Settled, or their lease lost.
    done: Vec<Delivery>,
    /// To attempt again: the failed records and, for order, the later records of their keys.
    retry: Vec<Delivery>,
    /// Per record of `retry`: whether the handler named it as failed.
    named: Vec<bool>,
    /// The error, when some failed.
    error: Option<HandlerError>,
}

impl BatchTried {
    fn done(done: Vec<Delivery>) -> Self {
        Self {
            done,
            retry: Vec::new(),
            named: Vec::new(),
            error: None,
        }
    }
}

/// Per record of a batch of `len`: whether the handler's failure named it. A failure of the
/// whole batch (`BatchFailure::all`, a panic) names a record only when it is the batch's only
/// one: a `?` in a batch handler does not say which record failed for good.
fn named_records(len: usize, failed: Option<&[usize]>) -> Vec<bool> {
    match failed {
        None => vec![len == 1; len],
        Some(indices) => {
            let mut named = vec![false; len];
            for &i in indices {
                if let Some(mark) = named.get_mut(i) {
                    *mark = true;
                }
            }
            named
        }
    }
}
