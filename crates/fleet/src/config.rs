//! `ReaderConfig`: the timings and positions of one subscription's readers.

use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::{Clock, SystemClock};

use kinesis_shard_reader::ReadSettings;
use kinesis_stream_core::{ReaderError, StartAt};

use crate::Hooks;

/// Settings of one subscription's coordinator and shard readers.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// The stream to read.
    pub stream: String,
    /// This broker's lease-owner id.
    pub owner: String,
    /// How long a lease lasts unless renewed (10 s).
    pub lease_duration: Duration,
    /// How often a held lease is renewed (3 s); the due checkpoint rides along.
    pub renew_interval: Duration,
    /// How often the stream's epoch item is read (1 s): a changed epoch (rows released, handed
    /// over, ended, or left by a dead instance) makes the coordinator list the rows at once, and
    /// a changed roster count (a join, a leave, a burial) the ring watch list the roster.
    pub take_interval: Duration,
    /// How often the member row this instance watches is read (2 s): how crashed instances are
    /// noticed, at one small read per interval whatever the number of shards. Also the pace of
    /// the second take round after a start, and of listings while rows written before the
    /// roster are held.
    pub list_interval: Duration,
    /// How often the stream's shards are listed (10 s; also at once when a shard ends).
    pub shard_sync_interval: Duration,
    /// How long a reader at the tip waits after an empty read (1 s).
    pub poll_interval: Duration,
    /// GetRecords calls per second per shard, at most (5, the Kinesis limit).
    pub max_reads_per_second: u32,
    /// Records asked for per GetRecords call (1 to 10,000).
    pub records_per_call: usize,
    /// Where the subscription begins (the tip by default): pinned into each row by its first
    /// take (see the `start` rules). Children of a later split or merge start at their first
    /// record.
    pub start_at: StartAt,
    /// When set, where every shard starts over its stored checkpoint, once per subscription:
    /// the take that applies it writes the marker into the row, and rows carrying the marker
    /// are never repositioned again, whoever takes them.
    pub reposition: Option<StartAt>,
    /// The marker of `reposition` (default: the position's name).
    pub reposition_marker: Option<String>,
    /// This host's wall clock, read to pin a `LATEST` start as a time, for the time written in
    /// the token of every take of a handed row, and against which instances balancing by load
    /// read other instances' tokens (planning only: no ownership decision reads it).
    pub clock: Arc<dyn Clock>,
    /// How far before the take a `LATEST` start is pinned (30 s): covers the difference
    /// between this host's clock and Kinesis'.
    pub start_slack: Duration,
    /// The most deliveries a shard's settlement window holds (10,000): past it the shard is
    /// not read further until its head settles, and the stuck record is reported.
    pub max_unsettled: usize,
    /// When set, shards are read by enhanced fan-out through the stream consumer of this name
    /// (registered, or reused if it exists, before any shard is taken) instead of polling.
    /// Never deregistered by the library: other instances share it.
    pub fan_out: Option<String>,
    /// Code run when a shard is taken, before its final checkpoint, when its lease is lost and
    /// when it has ended (none by default).
    pub hooks: Hooks,
    /// Idle shards that cost nothing (off by default): a held row is written only when its
    /// checkpoint moved, on takes, hand-overs, releases and shard ends, and this instance's
    /// member row, renewed every renew interval, stands for the rest. Off, every held row is
    /// renewed every renew interval, as the lease contract says. See `keeper`.
    pub quiet_idle: bool,
    /// This instance's capacity for the stream's shards, in thousandths of the default
    /// (1,000): published on its member row with the load it carries, so that a member with
    /// twice the capacity counts as half as loaded by the same load.
    pub capacity_milli: u64,
    /// Balances shards by load instead of by count (off by default): every
    /// `load_plan::SAMPLE_INTERVAL` this instance compares its load over capacity with one other
    /// member's (one small read) and hands it a shard when that lowers the larger of the two
    /// (see `load_plan`); it asks nobody for shards by count. Every instance of the stream
    /// should run with it: one without it still asks by count, undoing moves by load.
    pub balance_by_load: bool,
}

impl ReaderConfig {
    /// How long after a write of a lease (its own row, or the member row) was sent the keeper
    /// may go on: `lease - renew`, the renew interval kept as a margin for handlers still
    /// running and clocks ticking at slightly different rates.
    pub(crate) fn keep_for(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_interval)
    }

    /// Defaults for `stream`, read by `owner`.
    pub fn new(stream: impl Into<String>, owner: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            owner: owner.into(),
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(3),
            take_interval: Duration::from_secs(1),
            list_interval: Duration::from_secs(2),
            shard_sync_interval: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_reads_per_second: 5,
            records_per_call: 1_000,
            start_at: StartAt::Latest,
            reposition: None,
            reposition_marker: None,
            clock: Arc::new(SystemClock),
            start_slack: Duration::from_secs(30),
            max_unsettled: 10_000,
            fan_out: None,
            hooks: Hooks::new(),
            quiet_idle: false,
            capacity_milli: kinesis_lease_core::Load::DEFAULT_CAPACITY_MILLI,
            balance_by_load: false,
        }
    }

    /// Checks the timings and positions.
    ///
    /// # Errors
    ///
    /// [`ReaderError::Invalid`] naming the setting: a zero interval or duration, a renew
    /// interval not shorter than the lease, a start or reposition at a sequence number (those
    /// belong to one shard), or a zero `max_unsettled`.
    pub fn validate(&self) -> Result<(), ReaderError> {
        let invalid = |what: &'static str, value: String, reason: &str| ReaderError::Invalid {
            what,
            value,
            reason: format!("{reason} (stream `{}`)", self.stream),
        };
        for (what, value) in [
            ("lease duration", self.lease_duration),
            ("renew interval", self.renew_interval),
            ("take interval", self.take_interval),
            ("list interval", self.list_interval),
            ("hook bound", self.hooks.bound_of_one()),
            ("shard sync interval", self.shard_sync_interval),
            ("poll interval", self.poll_interval),
        ] {
            if value.is_zero() {
                return Err(invalid(
                    what,
                    format!("{value:?}"),
                    "must be more than zero",
                ));
            }
        }
        if self.owner.is_empty() || self.owner.starts_with('*') {
            return Err(invalid(
                "owner id",
                self.owner.clone(),
                "must not be empty nor start with `*` (kept for the table's own rows)",
            ));
        }
        if self.renew_interval >= self.lease_duration {
            return Err(invalid(
                "renew interval",
                format!("{:?}", self.renew_interval),
                &format!(
                    "must be shorter than the lease duration ({:?})",
                    self.lease_duration
                ),
            ));
        }
        if !kinesis_shard_reader::start::is_subscription_position(&self.start_at) {
            return Err(invalid(
                "start position",
                format!("{:?}", self.start_at),
                "a subscription starts at TRIM_HORIZON, LATEST or AT_TIMESTAMP; a sequence number belongs to one shard",
            ));
        }
        if let Some(position) = &self.reposition {
            if !kinesis_shard_reader::start::is_subscription_position(position) {
                return Err(invalid(
                    "reposition",
                    format!("{position:?}"),
                    "a subscription repositions to TRIM_HORIZON, LATEST or AT_TIMESTAMP; a sequence number belongs to one shard",
                ));
            }
        }
        if self.capacity_milli == 0 || self.capacity_milli > 1_000_000 {
            return Err(invalid(
                "capacity",
                format!("{} thousandths", self.capacity_milli),
                "must be more than zero and at most 1,000 times the default",
            ));
        }
        if self.max_reads_per_second == 0 {
            return Err(invalid(
                "max reads per second",
                "0".into(),
                "must be more than zero",
            ));
        }
        if self.max_unsettled == 0 {
            return Err(invalid(
                "max unsettled",
                "0".into(),
                "must be more than zero",
            ));
        }
        Ok(())
    }

    /// The reposition and its marker, if one is set.
    pub(crate) fn reposition(&self) -> Option<(&StartAt, String)> {
        self.reposition.as_ref().map(|position| {
            let marker = self
                .reposition_marker
                .clone()
                .unwrap_or_else(|| kinesis_shard_reader::start::reposition_marker(position));
            (position, marker)
        })
    }

    /// The GetRecords limit for a handler taking `batch_size` records at a time: the batch
    /// size, but at least 1,000 and at most 10,000.
    pub fn records_per_call_for(batch_size: usize) -> usize {
        batch_size.clamp(1_000, 10_000)
    }

    /// What reading needs of these settings.
    pub(crate) fn read_settings(&self) -> ReadSettings {
        ReadSettings {
            stream: self.stream.clone(),
            poll_interval: self.poll_interval,
            max_reads_per_second: self.max_reads_per_second,
            records_per_call: self.records_per_call,
            max_unsettled: self.max_unsettled,
            fan_out: self.fan_out.clone(),
        }
    }
}
