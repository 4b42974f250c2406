//! `DispatchError`: what can go wrong handing records to dispatch.

/// Errors of the dispatch layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The subscription's channel is closed: dispatch shut down.
    #[error("dispatch for stream `{stream}` is closed; shard `{shard}` cannot deliver")]
    Closed {
        /// The stream.
        stream: String,
        /// The shard whose delivery was refused.
        shard: String,
    },
    /// The shard's lease was lost: its records are no longer delivered.
    #[error("the lease of shard `{shard}` of stream `{stream}` was lost; delivery stopped")]
    Revoked {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
    },
    /// A payload that is not what its handler expects (feature `serde`:
    /// [`Delivery::json`](crate::Delivery::json)).
    #[error("payload of record `{sequence}` on shard `{shard}` of stream `{stream}` is not the expected {expected}")]
    InvalidPayload {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// The record's sequence number (`number[/subsequence]`).
        sequence: String,
        /// The type expected.
        expected: &'static str,
        /// Why it does not parse.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A configuration value out of range.
    #[error("invalid dispatch setting `{setting}`: {reason}")]
    InvalidConfig {
        /// The setting.
        setting: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },
}
