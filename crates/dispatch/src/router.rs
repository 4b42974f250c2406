//! The router: where the shared channel is not the lanes themselves (batch handlers under
//! `workers(n)`, or a plain channel given to a by-key dispatcher), it moves each record into a
//! worker's or lane's queue, by key or to any with room.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::channel::Numbered;
use crate::ctx::Ctx;
use crate::{lane_of, DeliveryReceiver};

/// How the router picks a lane.
#[derive(Clone, Copy)]
pub(crate) enum Pick {
    /// The lane of the partition key.
    ByKey,
    /// Any lane with room, round robin (staying on a lane while it has room when `sticky`,
    /// so batches fill); the first to free up when all are full.
    AnyFree {
        /// Keep filling the same lane while it has room.
        sticky: bool,
    },
}

/// Hands each record on to a lane as it travels: its delivery is made by the lane's worker,
/// on the thread that handles and frees it.
pub(crate) async fn route(
    mut rx: DeliveryReceiver,
    lanes: Vec<mpsc::Sender<Numbered>>,
    pick: Pick,
    ctx: Arc<Ctx>,
) {
    let mut closing = ctx.closing.clone();
    let mut next = 0;
    loop {
        let delivery = tokio::select! {
            biased;
            _ = closing.wait_for(|c| *c) => return,
            d = rx.recv_numbered() => d,
        };
        let Some(delivery) = delivery else { return };
        if delivery.is_revoked() {
            continue;
        }
        let candidates: &[mpsc::Sender<Numbered>] = match pick {
            Pick::ByKey => {
                let lane = lane_of(delivery.partition_key(), lanes.len());
                &lanes[lane..=lane]
            }
            Pick::AnyFree { .. } => &lanes,
        };
        let advance = usize::from(!matches!(pick, Pick::AnyFree { sticky: true }));
        // Fast path: a lane with room, starting after the last one used.
        let mut delivery = match place(candidates, next, delivery) {
            Placement::Placed(i) => {
                next = (next + i + advance) % candidates.len();
                continue;
            }
            Placement::Closed => return,
            Placement::AllFull(delivery) => delivery,
        };
        // Every candidate is full. One lane (by key): wait for its own place.
        if let [lane] = candidates {
            tokio::select! {
                biased;
                _ = closing.wait_for(|c| *c) => return,
                permit = lane.reserve() => match permit {
                    Ok(permit) => permit.send(delivery),
                    Err(_) => return,
                },
            }
            continue;
        }
        // Several: try again each time a worker takes from its queue, watching for that before
        // trying, so that a take in between is not missed.
        loop {
            let room = ctx.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            delivery = match place(candidates, next, delivery) {
                Placement::Placed(i) => {
                    next = (next + i + advance) % candidates.len();
                    break;
                }
                Placement::Closed => return,
                Placement::AllFull(delivery) => delivery,
            };
            tokio::select! {
                biased;
                _ = closing.wait_for(|c| *c) => return,
                () = room => {}
            }
        }
    }
}

/// What trying each candidate lane once came to.
pub(crate) enum Placement {
    /// Sent to the candidate `start + i`.
    Placed(usize),
    /// A lane is closed: dispatch is ending.
    Closed,
    /// Every candidate is full; the delivery comes back.
    AllFull(Numbered),
}

/// Tries each candidate once, from `start` round, without waiting.
pub(crate) fn place(
    candidates: &[mpsc::Sender<Numbered>],
    start: usize,
    mut delivery: Numbered,
) -> Placement {
    for i in 0..candidates.len() {
        match candidates[(start + i) % candidates.len()].try_send(delivery) {
            Ok(()) => return Placement::Placed(i),
            Err(mpsc::error::TrySendError::Closed(_)) => return Placement::Closed,
            Err(mpsc::error::TrySendError::Full(d)) => delivery = d,
        }
    }
    Placement::AllFull(delivery)
}
