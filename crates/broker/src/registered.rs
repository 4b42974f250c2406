//! `Subscription`: a subscription as registered, waiting for `start()`. Apart from its
//! builder so that the broker, which keeps the registered ones, and the builder, which borrows
//! the broker, do not import each other.

use kinesis_dispatch::{DeliveryReceiver, DeliverySender, DispatchConfig, Handler};
use kinesis_fleet::Hooks;
use kinesis_stream_core::StartAt;

/// A registered subscription, waiting for `start()`.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) stream: String,
    pub(crate) start_at: StartAt,
    pub(crate) reposition: Option<StartAt>,
    pub(crate) reposition_marker: Option<String>,
    pub(crate) records_per_call: usize,
    pub(crate) max_unsettled: usize,
    pub(crate) fan_out: Option<String>,
    pub(crate) hooks: Hooks,
    pub(crate) quiet_idle: bool,
    /// This instance's capacity in thousandths of the default (see `capacity`).
    pub(crate) capacity_milli: u64,
    /// Shards balanced by load (see `balance_by_load`).
    pub(crate) balance_by_load: bool,
    #[cfg(feature = "kcl-import")]
    pub(crate) kcl_import: Option<kinesis_kcl_import::KclImport>,
    pub(crate) sender: DeliverySender,
    /// `None` for a stream subscription: the user holds the receiver.
    pub(crate) dispatch: Option<(DeliveryReceiver, Handler, DispatchConfig)>,
}
