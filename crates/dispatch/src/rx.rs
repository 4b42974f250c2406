//! `Rx`: the two kinds of queue a dispatch loop takes deliveries from, behind one trait, so
//! gathering a batch (`batch`) and the loops (`dispatcher`) read either the same way.
//!
//! - A [`DeliveryReceiver`]: the subscription's shared channel, or one lane by key of it.
//! - A lane's queue of [`Numbered`] records (each its delivery), fed by the router (lanes by
//!   key behind a plain channel).

use tokio::sync::mpsc;

use crate::channel::Numbered;
use crate::{Delivery, DeliveryReceiver};

/// A queue a loop reads deliveries from.
pub(crate) trait Rx: Send {
    /// The next delivery, waiting for it; `None` once the queue is closed and empty.
    fn recv(&mut self) -> impl std::future::Future<Output = Option<Delivery>> + Send;
    /// A delivery already waiting, if any, without waiting.
    fn try_recv(&mut self) -> Option<Delivery>;
}

impl Rx for DeliveryReceiver {
    async fn recv(&mut self) -> Option<Delivery> {
        DeliveryReceiver::recv(self).await
    }
    fn try_recv(&mut self) -> Option<Delivery> {
        DeliveryReceiver::try_recv(self)
    }
}

impl Rx for mpsc::Receiver<Numbered> {
    async fn recv(&mut self) -> Option<Delivery> {
        mpsc::Receiver::recv(self)
            .await
            .map(Numbered::into_delivery)
    }
    fn try_recv(&mut self) -> Option<Delivery> {
        mpsc::Receiver::try_recv(self)
            .ok()
            .map(Numbered::into_delivery)
    }
}
