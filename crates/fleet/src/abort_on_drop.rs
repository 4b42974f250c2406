//! `AbortOnDrop`: a task guard, so a spawned task never outlives its owner.

/// Cancels the task it guards when dropped, so a task never outlives its owner.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
