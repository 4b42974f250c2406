//! `ConsumerArn`: the enhanced fan-out consumer's ARN, shared by a subscription's readers, so
//! one that registers the consumer again tells the others.

use std::sync::{Mutex, MutexGuard};

/// The fan-out consumer's ARN as this instance last learned it: set by the coordinator's first
/// registration, and again by a reader that registered the consumer again (after it was
/// deregistered) or found it registered again under a new ARN, so readers started later
/// subscribe with the current ARN at once instead of failing first.
#[derive(Debug, Default)]
pub struct ConsumerArn {
    arn: Mutex<Option<String>>,
    /// Held by the one reader registering the consumer again: the others wait, then take the
    /// ARN it found.
    renewing: tokio::sync::Mutex<()>,
}

impl ConsumerArn {
    /// No ARN yet: the subscription polls until one is set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ARN, once registered (`None`: the subscription polls).
    pub fn get(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Sets the ARN; returns the one it replaces.
    pub fn set(&self, arn: String) -> Option<String> {
        self.lock().replace(arn)
    }

    /// Sets `new` if the ARN is still `old` (a later one, set meanwhile, stays).
    pub fn replace(&self, old: &str, new: String) {
        let mut arn = self.lock();
        if arn.as_deref() == Some(old) {
            *arn = Some(new);
        }
    }

    /// The right to register the consumer again, one reader at a time.
    pub async fn renewing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.renewing.lock().await
    }

    fn lock(&self) -> MutexGuard<'_, Option<String>> {
        self.arn.lock().unwrap_or_else(|p| p.into_inner())
    }
}
