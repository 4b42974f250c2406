//! One attempt after another: running a handler on a record or a batch until it settles,
//! its lease is lost, or its attempts are used up (then skipped or dead-lettered), with a span
//! per call, panics caught, and every failure logged with its cause.

use std::panic::AssertUnwindSafe;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use kinesis_lease_core::ErrorChain;
use tokio::time::Instant;
use tracing::Instrument;

use crate::batch::failed_with_followers;
use crate::dispatcher::Ctx;
use crate::handler::{BatchHandler, OneHandler};
use crate::retry::Exhausted;
use crate::{Delivery, HandlerError};

pub(crate) fn panic_error(panic: Box<dyn std::any::Any + Send>) -> HandlerError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("handler panicked: {message}").into()
}

impl Ctx {
    /// Sleeps `delay` before a retry. Shutdown does not cut it short: a record handed to a
    /// handler is retried until it settles or the shutdown deadline abandons it, so that what
    /// completed after it is not re-delivered by the next owner.
    async fn pause(&self, delay: Duration) -> bool {
        tokio::time::sleep(delay).await;
        true
    }

    pub(crate) async fn run_one(&self, handler: &OneHandler, delivery: Delivery) {
        if delivery.is_revoked() {
            return;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Counted as running first, then checked: a hand-over that revokes the shard and
            // then waits for it to be idle either sees this attempt or stops it here.
            let running = delivery.running_ref();
            // A lease lost or handed over while this record waited: the next owner handles it.
            if delivery.is_revoked() {
                return;
            }
            // Timed (with metrics on) for one call in 64, and for every call that waits.
            let mut started = (crate::metrics::ON
                && fastrand::u32(..crate::metrics::SAMPLE_EVERY) == 0)
                .then(Instant::now);
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
            let outcome = match first {
                Poll::Ready(outcome) => outcome,
                // A handler that waits: from now on the lease is checked before every poll.
                Poll::Pending => {
                    if crate::metrics::ON && started.is_none() {
                        started = Some(Instant::now());
                    }
                    tokio::select! {
                        biased;
                        // The lease is lost: stop the attempt now, the next owner handles the
                        // record.
                        () = delivery.abandoned() => return,
                        outcome = &mut call => outcome,
                    }
                }
            };
            if let Some(started) = started {
                delivery.metrics().handled(started.elapsed());
            }
            let result = outcome.unwrap_or_else(|panic| Err(panic_error(panic)));
            drop(running);
            let error = match result {
                Ok(()) => {
                    delivery.ack();
                    return;
                }
                Err(error) => error,
            };
            delivery.attempt_failed();
            if delivery.is_revoked() {
                return;
            }
            if self.retry.exhausted_after(attempt) {
                self.exhaust(delivery, error, attempt).await;
                return;
            }
            let delay = self.retry.delay(attempt);
            tracing::warn!(
                stream = delivery.stream(),
                shard = delivery.shard(),
                sequence = %delivery.sequence(),
                attempt,
                ?delay,
                error = %ErrorChain(&*error),
                "handler failed; retrying the record in place"
            );
            if !self.pause(delay).await {
                return;
            }
        }
    }

    pub(crate) async fn run_batch(&self, handler: &BatchHandler, batch: Vec<Delivery>) {
        let mut batch: Vec<Delivery> = batch.into_iter().filter(|d| !d.is_revoked()).collect();
        let mut attempt = 0;
        while !batch.is_empty() {
            attempt += 1;
            let running: Vec<_> = batch.iter().map(Delivery::running).collect();
            batch.retain(|d| !d.is_revoked());
            if batch.is_empty() {
                return;
            }
            let started = crate::metrics::ON.then(Instant::now);
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
            if let (Some(started), Some(first)) = (started, batch.first()) {
                first.metrics().handled(started.elapsed());
            }
            drop(running);
            let (failed, error) = match outcome {
                Ok(Ok(())) => {
                    batch.iter().for_each(Delivery::ack);
                    return;
                }
                Ok(Err(failure)) => (failure.failed, failure.error),
                Err(panic) => (None, panic_error(panic)),
            };
            let failed = failed_with_followers(&batch, failed.as_deref());
            let mut retry = Vec::new();
            for (delivery, failed) in batch.into_iter().zip(failed) {
                if failed {
                    delivery.attempt_failed();
                    retry.push(delivery);
                } else {
                    delivery.ack();
                }
            }
            batch = retry.into_iter().filter(|d| !d.is_revoked()).collect();
            if batch.is_empty() {
                return;
            }
            if self.retry.exhausted_after(attempt) {
                for delivery in batch {
                    self.exhaust(delivery, error.to_string().into(), attempt)
                        .await;
                }
                return;
            }
            let delay = self.retry.delay(attempt);
            tracing::warn!(
                stream = batch[0].stream(),
                records = batch.len(),
                attempt,
                ?delay,
                error = %ErrorChain(&*error),
                "batch handler failed; retrying the failed records in place"
            );
            if !self.pause(delay).await {
                return;
            }
        }
    }

    async fn exhaust(&self, delivery: Delivery, error: HandlerError, attempts: u32) {
        let (stream, shard, sequence) = (
            delivery.stream().to_owned(),
            delivery.shard().to_owned(),
            delivery.sequence().to_string(),
        );
        // A dead-letter callback is user code on the record: a hand-over waits for it too.
        let _running = delivery.running();
        match &self.retry.exhausted {
            Exhausted::Skip => {
                tracing::error!(%stream, %shard, %sequence, attempts, error = %ErrorChain(&*error), "attempts used up; skipping the record");
                delivery.ack();
            }
            Exhausted::DeadLetter(callback) => {
                let call = callback(delivery.clone(), error);
                match AssertUnwindSafe(call).catch_unwind().await {
                    Ok(Ok(())) => {
                        tracing::warn!(%stream, %shard, %sequence, attempts, "attempts used up; record sent to the dead-letter callback");
                        delivery.metrics().dead_lettered();
                        delivery.ack();
                    }
                    Ok(Err(e)) => {
                        tracing::error!(%stream, %shard, %sequence, error = %ErrorChain(&*e), "dead-letter callback failed; the record stays unsettled");
                    }
                    Err(panic) => {
                        tracing::error!(%stream, %shard, %sequence, error = %panic_error(panic), "dead-letter callback panicked; the record stays unsettled");
                    }
                }
            }
        }
    }
}
