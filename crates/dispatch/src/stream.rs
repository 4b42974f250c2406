//! `DeliveryStream`: the subscription's deliveries as a `tokio_stream::Stream`, acked by hand.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;

use crate::{Delivery, DeliveryReceiver};

/// Yields one delivery at a time, whichever shard it came from; call
/// [`Delivery::ack`] once each is processed. Deliveries of shards whose lease was lost are
/// skipped, since their settlement can no longer be checkpointed. A delivery counts as being
/// handled from the moment it is yielded until it is acked or dropped: a planned hand-over of
/// its shard waits for it (at most a lease duration), so two instances never work on one
/// shard's records at once.
#[derive(Debug)]
pub struct DeliveryStream {
    receiver: DeliveryReceiver,
}

impl DeliveryStream {
    /// Wraps a subscription's receiver, made by [`channel`](crate::channel) (a channel of lanes by
    /// key from [`channel_for`](crate::channel_for) would be taken from lane by lane, out of each
    /// shard's order).
    pub fn new(receiver: DeliveryReceiver) -> Self {
        Self { receiver }
    }
}

impl Stream for DeliveryStream {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let this = self.get_mut();
        loop {
            match this.receiver.poll_recv(cx) {
                Poll::Ready(Some(d)) => {
                    // Counted as running first, then checked, as handlers are: a hand-over
                    // that revoked the shard either sees it or it is skipped here.
                    d.hand_out();
                    if d.is_revoked() {
                        continue;
                    }
                    return Poll::Ready(Some(d));
                }
                other => return other,
            }
        }
    }
}
