//! `PublishError`: why a put failed, naming the stream (and, for a put that stopped part-way,
//! which records were stored).

use kinesis_stream_core::ReaderError;

use crate::Published;

/// Errors of [`Publisher`](crate::Publisher). Exhaustive, so the facade maps each variant to
/// its own error without a catch-all.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Publishing failed; nothing is known to be stored.
    #[error("publishing to `{stream}` failed")]
    Publish {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: Box<ReaderError>,
    },
    /// Publishing stopped after some records were stored: `published` says, per record in the
    /// order given, where it was stored (`None`: not known to be stored). Each key's stored
    /// records are the first ones of that key, so putting the `None` ones again, in order,
    /// keeps every key's order. That is at least once: a call whose answer was lost (a timeout)
    /// may have stored records still listed as `None`.
    #[error("publishing to `{stream}` stopped with {} of {} records stored", published.iter().flatten().count(), published.len())]
    PartlyPublished {
        /// The stream.
        stream: String,
        /// Where each record was stored, in the order given; `None` for those not stored.
        published: Vec<Option<Published>>,
        /// Why it stopped.
        #[source]
        source: Box<ReaderError>,
    },
}
