//! Batches: the [`Unit`] a loop hands the handler at once, gathering one (up to its size, or
//! what arrives within the window of its first record) and, when some of its records failed,
//! which to retry so each key keeps its order.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::parking::Parking;
use crate::rx::Rx;
use crate::Delivery;

/// What a loop hands the handler at once.
pub(crate) enum Unit {
    /// One delivery, for a one-record handler.
    One(Delivery),
    /// A batch of deliveries, for a batch handler.
    Batch(Vec<Delivery>),
}

/// The unit beginning with `first`: itself, or a batch of up to `max` gathered within
/// `window` of it. Records held back behind a parked one are queued behind it instead.
pub(crate) async fn gather<R: Rx>(
    rx: &mut R,
    first: Delivery,
    max: Option<usize>,
    window: Duration,
    parking: &mut Parking,
) -> Unit {
    let Some(max) = max else {
        return Unit::One(first);
    };
    let deadline = Instant::now() + window;
    let mut batch = Vec::with_capacity(max.min(1024));
    batch.push(first);
    while batch.len() < max {
        // One at a time, each place given back as it is taken, so the readers refill the
        // channel while the batch fills (taking all that waits in one go gave every place
        // back at once and left the batch waiting on the readers: 0.72x of the bare loop).
        let next = match rx.try_recv() {
            Some(d) => d,
            None => match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(d)) => d,
                Ok(None) | Err(_) => break,
            },
        };
        if let Some(d) = parking.admit(next) {
            batch.push(d);
        }
    }
    Unit::Batch(batch)
}

/// Which records of a batch to retry: the failed ones (all when `failed` is `None`) and every
/// later record with the key of a failed one, so each key keeps its order.
///
/// An index outside the batch means the handler's bookkeeping is wrong, so no record of the
/// batch can be trusted as handled: the whole batch is retried, and the error names the
/// indices.
pub(crate) fn failed_with_followers(batch: &[Delivery], failed: Option<&[usize]>) -> Vec<bool> {
    let mut marks = match failed {
        None => return vec![true; batch.len()],
        Some(indices) if indices.iter().any(|&i| i >= batch.len()) => {
            let outside: Vec<usize> = indices
                .iter()
                .copied()
                .filter(|&i| i >= batch.len())
                .collect();
            tracing::error!(
                stream = batch.first().map(Delivery::stream),
                shard = batch.first().map(Delivery::shard),
                batch = batch.len(),
                ?outside,
                "BatchFailure::items named records outside the batch; retrying the whole batch"
            );
            return vec![true; batch.len()];
        }
        Some(indices) => {
            let mut marks = vec![false; batch.len()];
            for &i in indices {
                if let Some(mark) = marks.get_mut(i) {
                    *mark = true;
                }
            }
            marks
        }
    };
    let mut keys = HashSet::new();
    for (delivery, mark) in batch.iter().zip(marks.iter_mut()) {
        if *mark {
            keys.insert(delivery.partition_key());
        } else if keys.contains(delivery.partition_key()) {
            *mark = true;
        }
    }
    marks
}
