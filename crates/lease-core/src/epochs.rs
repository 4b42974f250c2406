//! [`Epochs`]: a stream's two epochs, read together.
//!
//! Every instance reads its stream's epoch once a take interval, and its roster's was read
//! every list interval: two items, each at least half a read unit on DynamoDB, a third of the
//! reads of an idle instance. A store that keeps both in one item answers both for the price
//! of one read ([`LeaseStore::epochs`](crate::LeaseStore::epochs)).

/// A stream's epoch and its roster's, as one read of [`LeaseStore::epochs`] saw them. Each is
/// only ever compared for equality with an earlier reading of the same field.
///
/// [`LeaseStore::epochs`]: crate::LeaseStore::epochs
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Epochs {
    /// The stream's epoch ([`LeaseStore::epoch`](crate::LeaseStore::epoch) of the stream):
    /// moves when rows were freed or moved.
    pub rows: u64,
    /// A counter of the stream's roster bumps (bumps of the epoch of
    /// [`LeaseKey::members_stream`](crate::LeaseKey::members_stream)): moves when a member
    /// joined, left or was found dead. Not necessarily equal to that epoch: a store may count
    /// it apart, beside the stream's epoch.
    pub roster: u64,
}

impl Epochs {
    /// Both epochs.
    pub fn new(rows: u64, roster: u64) -> Self {
        Self { rows, roster }
    }
}
