//! `Holder`: who writes a row, an owner id and the token of one holding.
//!
//! Its own file, below both the row ([`Lease`](crate::Lease), which tells whether a holder
//! holds it) and the store ([`LeaseStore`](crate::LeaseStore), whose writes name one).

/// Who writes: the lease owner id and the token of its current holding of the row.
///
/// The owner id names an instance; the token names one holding. A take writes a token the
/// taker chose (fresh for every take), and renew, checkpoint, release and hand-over succeed
/// only while the row still carries both. A second process running with the same owner id
/// holds different tokens, so it can never renew or checkpoint the first one's holdings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// The lease-owner id.
    pub owner: String,
    /// The token of this holding.
    pub token: String,
}

impl Holder {
    /// A holder with `owner` id and `token`.
    pub fn new(owner: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            owner: owner.into(),
            token: token.into(),
        }
    }
}
