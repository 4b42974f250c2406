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
    /// A configuration value out of range.
    #[error("invalid dispatch setting `{setting}`: {reason}")]
    InvalidConfig {
        /// The setting.
        setting: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },
}
