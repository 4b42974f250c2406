//! `Published`: where one record was stored, what a put returns and what a put that stopped
//! part-way reports per record.

use kinesis_lease_core::SequenceNumber;

/// Where one record was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// The shard it was stored on.
    pub shard: String,
    /// Its sequence number; for a record packed into a KPL aggregate, the aggregate's sequence
    /// number with the record's position in it as subsequence (what consumers checkpoint).
    pub sequence: SequenceNumber,
}
