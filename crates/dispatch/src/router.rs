//! The router: where a plain channel (one lane) is given to a by-key dispatcher, it moves each
//! record into its key's lane.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::channel::Numbered;
use crate::ctx::Ctx;
use crate::{lane_of, DeliveryReceiver};

/// Hands each record on to the lane of its partition key as it travels: its delivery is made
/// by the lane's worker, on the thread that handles and frees it. A full lane makes the
/// router wait for a place in it (each key keeps its order).
pub(crate) async fn route(
    mut rx: DeliveryReceiver,
    lanes: Vec<mpsc::Sender<Numbered>>,
    ctx: Arc<Ctx>,
) {
    let mut closing = ctx.closing.clone();
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
        let lane = &lanes[lane_of(delivery.partition_key(), lanes.len())];
        // Fast path: the lane has room.
        let delivery = match lane.try_send(delivery) {
            Ok(()) => continue,
            Err(mpsc::error::TrySendError::Closed(_)) => return,
            Err(mpsc::error::TrySendError::Full(delivery)) => delivery,
        };
        tokio::select! {
            biased;
            _ = closing.wait_for(|c| *c) => return,
            permit = lane.reserve() => match permit {
                Ok(permit) => permit.send(delivery),
                Err(_) => return,
            },
        }
    }
}
