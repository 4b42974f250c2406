//! `BrokerError`: what configuring, starting and running a broker can run into.

use std::sync::Arc;

use kinesis_dispatch::DispatchError;
use kinesis_lease_core::LeaseError;
use kinesis_stream_core::ReaderError;

/// Errors of the broker, each naming the stream or table concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A second subscription to a stream this broker already reads.
    #[error("stream `{stream}` already has a subscription on this broker; one broker reads a stream through one subscription")]
    DuplicateSubscription {
        /// The stream.
        stream: String,
    },
    /// The lease store instance is already mounted on another broker.
    #[error("this lease store instance is already mounted on broker `{owner}`; give each broker its own store (several stores may share one table)")]
    StoreAlreadyMounted {
        /// The lease-owner id of the broker that holds it.
        owner: String,
    },
    /// A setting that cannot work: a zero interval, a renew interval not shorter than the lease,
    /// a start position at a sequence number.
    #[error("invalid broker setting `{setting}`: {reason}")]
    InvalidConfig {
        /// The setting.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Another live process uses this broker's lease-owner id on `stream`.
    #[error("lease owner id `{owner}` is live in another process on stream `{stream}`; give every process its own id")]
    OwnerInUse {
        /// The owner id.
        owner: String,
        /// The stream.
        stream: String,
        /// The probe's finding.
        #[source]
        source: Box<kinesis_stream_core::ReaderError>,
    },
    /// An AWS client has no region (or no credentials provider) configured, so no call could
    /// be signed: checked by `build()` for an `sdk_config(..)` and a DynamoDB lease table, and
    /// by `start()` for the environment's configuration.
    #[error("no AWS {setting} configured for {client}: {hint}")]
    AwsSetting {
        /// The missing setting: `region` or `credentials provider`.
        setting: &'static str,
        /// The client it was missing for: `Kinesis`, or the DynamoDB lease table `T`.
        client: String,
        /// How to set it.
        hint: &'static str,
    },
    /// A check of `start()` kept failing transiently (connection refused, throttling, 5xx)
    /// until the start-up deadline (`startup_deadline`, 30 s by default); each retry was
    /// logged.
    #[error("{operation} on {endpoint} kept failing for {waited:?} ({attempts} attempts) while starting stream `{stream}`")]
    Unreachable {
        /// The stream being started.
        stream: String,
        /// The call that failed: `ListShards`, `DescribeTable`, `GetItem`, ...
        operation: &'static str,
        /// The endpoint it was sent to (`http://127.0.0.1:4567`, or the region's).
        endpoint: String,
        /// How long it was retried.
        waited: std::time::Duration,
        /// How many times it was tried.
        attempts: u32,
        /// The last failure.
        #[source]
        source: kinesis_lease_core::BoxError,
    },
    /// `start()` on a broker without subscriptions.
    #[error("the broker has no subscription to start")]
    NoSubscriptions,
    /// The stream name is invalid, or the stream does not exist.
    #[error("stream `{stream}` cannot be read")]
    Stream {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: Box<ReaderError>,
    },
    /// The lease table is missing, has the wrong schema, or cannot be reached.
    #[error("lease table for stream `{stream}` is not usable")]
    LeaseTable {
        /// The stream whose leases it holds.
        stream: String,
        /// Why.
        #[source]
        source: Box<LeaseError>,
    },
    /// Importing the KCL's checkpoints at start refused (KCL workers still run, a row held by
    /// another instance) or failed; nothing of this subscription started.
    #[cfg(feature = "kcl-import")]
    #[error("importing the KCL's checkpoints of stream `{stream}` failed")]
    KclImport {
        /// The stream.
        stream: String,
        /// The import's error (it names the KCL table and the shard).
        #[source]
        source: Box<kinesis_kcl_import::ImportError>,
    },
    /// A dispatch setting is invalid.
    #[error("subscription to `{stream}` is misconfigured")]
    Dispatch {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: Box<DispatchError>,
    },
    /// A running subscription failed (its stream was deleted).
    #[error("subscription to `{stream}` failed")]
    Subscription {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: Arc<ReaderError>,
    },
    /// Publishing failed.
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
        published: Vec<Option<crate::Published>>,
        /// Why it stopped.
        #[source]
        source: Box<ReaderError>,
    },
    /// Waiting for a shutdown signal failed.
    #[error("cannot listen for shutdown signals")]
    Signal(#[source] std::io::Error),
}

/// Maps a Kinesis failure at start to the broker error naming the stream.
pub(crate) fn stream_error(stream: &str, source: ReaderError) -> BrokerError {
    BrokerError::Stream {
        stream: stream.to_owned(),
        source: Box::new(source),
    }
}
