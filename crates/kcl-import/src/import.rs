//! `KclImport`: the import's I/O. It reads the KCL's table, the stream's shards and this
//! library's rows, hands them to the pure rules (`select`, `plan`, `liveness`), and carries
//! out the plan with conditional writes.
//!
//! # Order
//!
//! 0. Read the import's own record (see `record`): when the KCL's leases of the stream stand
//!    where they stood at the last import, the KCL has not run since and the import writes
//!    nothing, neither watching nor waiting, so rows the brokers or an operator moved since
//!    stay where they are (also when the KCL's table has been deleted since).
//! 1. Read and plan, and ask Kinesis for an iterator at every sequence number the plan would
//!    write (a KCL table of another stream has checkpoints this stream's shards do not hold).
//!    A dry run stops here; so does a plan that writes nothing, without watching the KCL: an
//!    import that writes nothing cannot race it (it still writes its record).
//! 2. Watch the KCL's leases of the stream for the KCL's lease-taker interval, twice the
//!    failover time (see `liveness::watch_window`): a counter that moves means KCL workers
//!    still run, and the import is refused (or, forced, goes on with a warning).
//! 3. Read and plan again (the KCL's rows as last watched, this library's rows now), then
//!    write: a missing row is created only if it is still missing, a row behind is moved
//!    forward fenced on the counter read; a write that loses its condition re-reads the row
//!    and decides again (never moving it back). The stream's epoch is bumped, so running
//!    brokers notice at once.
//! 4. Read the KCL's rows once more: one written since the watch means a KCL worker came back
//!    during the import ([`ImportError::KclResumed`]). Then write the record.
//!
//! Every call that fails transiently (throttling, a 5xx, a timeout, a dropped connection) is
//! retried with backoff for up to the retry window (30 s by default,
//! [`KclImport::retry_window`]); each retry is logged.

use std::sync::Arc;
use std::time::Duration;

use aws_types::SdkConfig;
use kinesis_lease_core::{Backoff, Checkpoint, ErrorChain, Lease, LeaseKey, LeaseStore};
use kinesis_stream_core::{KinesisApi, ReaderError, Shard, StartAt};
use tokio::time::Instant;

use crate::liveness::{moved, reading, watch_window, Verdict, Watch};
use crate::plan::{plan, Action, Step};
use crate::record::Imprint;
use crate::select::{select, KclMode, SelectError, Selection};
use crate::{DynamoKclTable, ImportError, KclTable};

/// The KCL's default failover time (`LeaseManagementConfig.failoverTimeMillis`).
pub const DEFAULT_FAILOVER: Duration = Duration::from_secs(10);

/// Attempts per row when a conditional write loses to another writer.
const WRITE_ATTEMPTS: usize = 3;

/// How long a call that fails transiently is retried by default.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(30);

/// What an import runs against: this library's lease store and table name, and Kinesis.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// This library's lease store.
    pub store: &'a dyn LeaseStore,
    /// Its table's name, for messages.
    pub table: &'a str,
    /// Kinesis, to list the stream's shards.
    pub kinesis: &'a dyn KinesisApi,
}

/// What an import did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// The stream.
    pub stream: String,
    /// The KCL table.
    pub kcl_table: String,
    /// How the stream's rows were recognised.
    pub mode: KclMode,
    /// One step per shard, sorted.
    pub steps: Vec<Step>,
    /// True for a dry run: nothing was written.
    pub dry_run: bool,
    /// The window the KCL was watched for, when it was.
    pub watched: Option<Duration>,
    /// Rows of the KCL table that are not leases (KCL 3.5's worker metrics, coordinator).
    pub other_entities: usize,
    /// What the caller should know (a forced import, a KCL still live).
    pub warnings: Vec<String>,
    /// True when the table had been imported from this KCL table before and the KCL has not
    /// written its leases of the stream since: nothing was planned or written (see the
    /// `record` module).
    pub imported_before: bool,
}

impl ImportReport {
    /// An empty report of `stream` from `kcl_table` (for tools that render reports).
    pub fn new(stream: impl Into<String>, kcl_table: impl Into<String>, mode: KclMode) -> Self {
        Self {
            stream: stream.into(),
            kcl_table: kcl_table.into(),
            mode,
            steps: Vec::new(),
            dry_run: false,
            watched: None,
            other_entities: 0,
            warnings: Vec::new(),
            imported_before: false,
        }
    }

    /// How many rows were written (or, dry, would be).
    pub fn written(&self) -> usize {
        self.steps.iter().filter(|s| s.action.writes()).count()
    }
}

/// Imports a KCL application's leases of one stream into this library's lease table.
///
/// One value runs one import at a time (its retry window is the running import's); clones are
/// independent.
///
/// # Examples
///
/// ```no_run
/// use kinesis_kcl_import::{KclImport, Target};
/// # async fn f(aws: &aws_types::SdkConfig, store: &dyn kinesis_lease_core::LeaseStore,
/// #            kinesis: &dyn kinesis_stream_core::KinesisApi) -> Result<(), Box<dyn std::error::Error>> {
/// let import = KclImport::dynamo(aws, "orders-kcl-app");
/// let target = Target { store, table: "orders-leases", kinesis };
/// let report = import.run(target, "orders", |note| eprintln!("{note}")).await?;
/// println!("{} rows written", report.written());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KclImport {
    table: Arc<dyn KclTable>,
    stream_key: Option<String>,
    failover: Duration,
    force: bool,
    at_timestamp_ms: Option<u64>,
    retry_window: Duration,
    /// When the running import's retry window ends (the watch does not count).
    window_end: std::sync::Mutex<Option<Instant>>,
}

impl Clone for KclImport {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            stream_key: self.stream_key.clone(),
            failover: self.failover,
            force: self.force,
            at_timestamp_ms: self.at_timestamp_ms,
            retry_window: self.retry_window,
            window_end: std::sync::Mutex::new(None),
        }
    }
}

impl KclImport {
    /// An import from `table`.
    pub fn new(table: impl KclTable + 'static) -> Self {
        Self {
            table: Arc::new(table),
            stream_key: None,
            failover: DEFAULT_FAILOVER,
            force: false,
            at_timestamp_ms: None,
            retry_window: DEFAULT_RETRY_WINDOW,
            window_end: std::sync::Mutex::new(None),
        }
    }

    /// An import from the KCL's DynamoDB table `table` (the application name, unless the
    /// application configured another).
    pub fn dynamo(config: &SdkConfig, table: impl Into<String>) -> Self {
        Self::new(DynamoKclTable::new(config, table))
    }

    /// The multi-stream identifier (`account:stream:creationEpoch`) whose leases to import,
    /// when the stream name alone is ambiguous.
    pub fn stream_key(mut self, key: impl Into<String>) -> Self {
        self.stream_key = Some(key.into());
        self
    }

    /// The KCL application's failover time (10 s by default). The KCL's counters must stand
    /// still for its lease taker's interval, twice this, before the import writes. Zero is
    /// refused when the import runs ([`ImportError::InvalidSetting`]): it would turn the
    /// watch off.
    pub fn failover_time(mut self, failover: Duration) -> Self {
        self.failover = failover;
        self
    }

    /// Writes even while KCL workers run, and moves rows held by brokers: with a warning.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The application's `AT_TIMESTAMP` start (ms since the epoch), for KCL leases that never
    /// checkpointed and store only the sentinel `AT_TIMESTAMP`.
    pub fn at_timestamp_ms(mut self, ms: u64) -> Self {
        self.at_timestamp_ms = Some(ms);
        self
    }

    /// How long the calls of one import that fail transiently (throttling, a 5xx, a timeout, a
    /// dropped connection) are retried in all, with backoff, before the import fails naming
    /// the call (30 s by default). The watch of the KCL does not count. The broker gives what
    /// is left of its start-up deadline, when that is shorter.
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.retry_window = window;
        self
    }

    /// The retry window set (see [`retry_window`](Self::retry_window)).
    pub fn configured_retry_window(&self) -> Duration {
        self.retry_window
    }

    /// Starts the retry window of an import.
    fn open_window(&self) {
        *self.window() = Some(Instant::now() + self.retry_window);
    }

    /// Moves the end of the retry window by `by` (the time spent watching the KCL).
    fn extend_window(&self, by: Duration) {
        if let Some(end) = self.window().as_mut() {
            *end += by;
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.window_end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The KCL table's name.
    pub fn kcl_table(&self) -> &str {
        self.table.name()
    }

    fn check_settings(&self) -> Result<(), ImportError> {
        if self.failover.is_zero() {
            return Err(ImportError::InvalidSetting {
                setting: "failover time",
                value: format!("{:?}", self.failover),
                reason: "must be more than zero: the import watches the KCL's leases for twice \
                         the failover time, and a zero one would not watch at all",
            });
        }
        Ok(())
    }

    /// Runs `call`, retrying its transient failures with backoff for the retry window.
    async fn retrying<T, F, Fut>(&self, stream: &str, mut call: F) -> Result<T, ImportError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ImportError>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let error = match call().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let Some(operation) = error.transient_operation() else {
                return Err(error);
            };
            let end = self.window().unwrap_or_else(Instant::now);
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(error);
            }
            let wait = backoff.next_delay().min(left);
            tracing::warn!(%stream, operation, ?wait, error = %ErrorChain(&error), "an import call failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// The plan, without writing anything or watching the KCL (a dry run).
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), except the refusals that come from watching and writing.
    pub async fn plan(
        &self,
        target: Target<'_>,
        stream: &str,
    ) -> Result<ImportReport, ImportError> {
        self.open_window();
        let (selection, listed) = match self.read_unless_imported(target, stream).await? {
            Ok(read) => read,
            Err(mut before) => {
                before.dry_run = true;
                return Ok(before);
            }
        };
        let report = self
            .report(target, stream, &selection, &listed, true)
            .await?;
        self.probe(target, stream, &report).await?;
        Ok(report)
    }

    /// Imports the KCL's leases of `stream`; `notes` receives progress and warnings.
    ///
    /// # Errors
    ///
    /// [`ImportError::KclRunning`] when a KCL lease of the stream moved within the failover
    /// time (nothing written); [`ImportError::Refused`] for a row of ours held by a broker and
    /// behind the KCL (nothing written), or one that kept changing; [`ImportError::KclResumed`]
    /// when the KCL wrote its table during the writes; the reading errors
    /// ([`ImportError::NoLeases`], [`ImportError::AmbiguousStream`],
    /// [`ImportError::ForeignShards`], [`ImportError::Unmappable`], ...) and the failures of
    /// the tables and of Kinesis.
    pub async fn run<F: FnMut(&str)>(
        &self,
        target: Target<'_>,
        stream: &str,
        mut notes: F,
    ) -> Result<ImportReport, ImportError> {
        self.open_window();
        let (selection, listed) = match self.read_unless_imported(target, stream).await? {
            Ok(read) => read,
            Err(before) => return Ok(before),
        };
        let first = self
            .report(target, stream, &selection, &listed, false)
            .await?;
        self.refusals(target, stream, &first)?;
        if first.written() == 0 {
            self.write_record(target, stream, &selection.leases).await?;
            return Ok(first);
        }
        self.probe(target, stream, &first).await?;
        let mut warnings = Vec::new();
        let watching = Instant::now();
        let last = self
            .watch(stream, &selection, &mut notes, &mut warnings)
            .await?;
        // The watch waits on purpose: it does not use up the retry window.
        self.extend_window(watching.elapsed());
        // Another instance that imported meanwhile (a fleet starting together): its record.
        if let Some(row) = self.record(target, stream).await? {
            if Imprint::recorded(&row) == Some(Imprint::of(&last.leases)) {
                return self
                    .imported_before(target, stream, Some((&last, &listed)))
                    .await;
            }
        }
        let mut report = self.report(target, stream, &last, &listed, false).await?;
        self.refusals(target, stream, &report)?;
        report.watched = Some(watch_window(self.failover));
        let mut wrote = false;
        for step in &mut report.steps {
            if self.write(target, stream, &last, &listed, step).await? {
                wrote = true;
            }
        }
        if wrote {
            self.retrying(stream, || async {
                target
                    .store
                    .bump_epoch(stream)
                    .await
                    .map_err(|source| store_error(target, stream, source))
            })
            .await?;
        }
        // A KCL worker that came back during the writes.
        let after = self.select(stream, self.scan(stream).await?)?;
        if let Some(movement) = moved(&reading(&last.leases), &reading(&after.leases)) {
            if !self.force {
                return Err(ImportError::KclResumed {
                    table: self.table.name().to_owned(),
                    stream: stream.to_owned(),
                    movement: Box::new(movement),
                });
            }
            warnings.push(format!("forced: {movement} during the import"));
        }
        self.write_record(target, stream, &last.leases).await?;
        for warning in &warnings {
            notes(&format!("warning: {warning}"));
        }
        report.warnings = warnings;
        Ok(report)
    }

    /// The KCL's table, read whole.
    async fn scan(&self, stream: &str) -> Result<Vec<crate::KclRow>, ImportError> {
        self.retrying(stream, || self.table.scan()).await
    }

    fn select(&self, stream: &str, rows: Vec<crate::KclRow>) -> Result<Selection, ImportError> {
        let table = self.table.name().to_owned();
        select(&rows, stream, self.stream_key.as_deref()).map_err(|e| match e {
            SelectError::NoLeases { hint } => ImportError::NoLeases {
                table,
                stream: stream.to_owned(),
                hint,
            },
            SelectError::Ambiguous { candidates } => ImportError::AmbiguousStream {
                table,
                stream: stream.to_owned(),
                candidates,
            },
        })
    }

    /// The KCL's leases of the stream and the stream's shards, checked against each other.
    async fn read_kcl(
        &self,
        target: Target<'_>,
        stream: &str,
    ) -> Result<(Selection, Vec<Shard>), ImportError> {
        let selection = self.select(stream, self.scan(stream).await?)?;
        let listed = self
            .retrying(stream, || async {
                target
                    .kinesis
                    .list_shards(stream)
                    .await
                    .map_err(|source| ImportError::Kinesis {
                        stream: stream.to_owned(),
                        shard: None,
                        operation: "ListShards",
                        source: Box::new(source),
                    })
            })
            .await?;
        let known = selection
            .leases
            .iter()
            .any(|l| listed.iter().any(|s| s.id == l.shard));
        if !known {
            let mut shards: Vec<&str> = selection.leases.iter().map(|l| l.shard.as_str()).collect();
            let more = shards.len().saturating_sub(4);
            shards.truncate(4);
            let mut shards = shards.join(", ");
            if more > 0 {
                shards.push_str(&format!(" and {more} more"));
            }
            return Err(ImportError::ForeignShards {
                table: self.table.name().to_owned(),
                stream: stream.to_owned(),
                shards,
            });
        }
        Ok((selection, listed))
    }

    async fn ours(&self, target: Target<'_>, stream: &str) -> Result<Vec<Lease>, ImportError> {
        self.retrying(stream, || async {
            target
                .store
                .list(stream)
                .await
                .map_err(|source| store_error(target, stream, source))
        })
        .await
    }

    async fn report(
        &self,
        target: Target<'_>,
        stream: &str,
        selection: &Selection,
        listed: &[Shard],
        dry_run: bool,
    ) -> Result<ImportReport, ImportError> {
        let ours = self.ours(target, stream).await?;
        let steps = plan(
            stream,
            &selection.leases,
            listed,
            &ours,
            self.at_timestamp_ms,
            self.force,
        )
        .map_err(|u| ImportError::Unmappable {
            table: self.table.name().to_owned(),
            stream: stream.to_owned(),
            shard: u.shard,
            reason: u.reason,
        })?;
        Ok(ImportReport {
            stream: stream.to_owned(),
            kcl_table: self.table.name().to_owned(),
            mode: selection.mode.clone(),
            steps,
            dry_run,
            watched: None,
            other_entities: selection.other_entities,
            warnings: Vec::new(),
            imported_before: false,
        })
    }

    fn refusals(
        &self,
        target: Target<'_>,
        stream: &str,
        report: &ImportReport,
    ) -> Result<(), ImportError> {
        let refused: Vec<&Step> = report
            .steps
            .iter()
            .filter(|s| s.action == Action::Refuse)
            .collect();
        match refused.first() {
            None => Ok(()),
            Some(step) => Err(ImportError::Refused {
                table: target.table.to_owned(),
                stream: stream.to_owned(),
                shard: step.shard.clone(),
                reason: if refused.len() > 1 {
                    format!(
                        "{} (and {} more); nothing was written",
                        step.note,
                        refused.len() - 1
                    )
                } else {
                    format!("{}; nothing was written", step.note)
                },
            }),
        }
    }

    /// Asks Kinesis for an iterator at each sequence number the plan would write: a KCL
    /// checkpoint the stream's shard does not hold means the KCL table belongs to another
    /// stream (single-stream tables do not name theirs, and shard ids repeat across streams).
    async fn probe(
        &self,
        target: Target<'_>,
        stream: &str,
        report: &ImportReport,
    ) -> Result<(), ImportError> {
        for step in &report.steps {
            let checkpoint = match &step.action {
                Action::Create(row) => row.checkpoint.as_ref(),
                Action::Advance { checkpoint, .. } => Some(checkpoint),
                _ => None,
            };
            let Some(Checkpoint::Sequence(seq)) = checkpoint else {
                continue;
            };
            let at = StartAt::AtSequence(seq.clone());
            let asked = self
                .retrying(stream, || async {
                    match target
                        .kinesis
                        .shard_iterator(stream, &step.shard, &at)
                        .await
                    {
                        Ok(_) => Ok(Ok(())),
                        Err(
                            error @ (ReaderError::Refused { .. }
                            | ReaderError::ShardNotFound { .. }),
                        ) => Ok(Err(error)),
                        Err(source) => Err(ImportError::Kinesis {
                            stream: stream.to_owned(),
                            shard: Some(step.shard.clone()),
                            operation: "GetShardIterator",
                            source: Box::new(source),
                        }),
                    }
                })
                .await?;
            match asked {
                Ok(()) => {}
                Err(error) => {
                    return Err(ImportError::Unmappable {
                        table: self.table.name().to_owned(),
                        stream: stream.to_owned(),
                        shard: step.shard.clone(),
                        reason: format!(
                            "Kinesis does not know the KCL's checkpoint {} in this shard ({}): is \
                             `{stream}` the stream this KCL application reads?",
                            seq.number(),
                            ErrorChain(&error)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Watches the KCL's leases for one failover time; the last reading.
    async fn watch<F: FnMut(&str)>(
        &self,
        stream: &str,
        first: &Selection,
        notes: &mut F,
        warnings: &mut Vec<String>,
    ) -> Result<Selection, ImportError> {
        let mut watch = Watch::new(watch_window(self.failover), &first.leases);
        notes(&format!(
            "watching the KCL's leases of `{stream}` in `{}` for {:.1} s, the KCL's lease-taker interval (live KCL workers renew or take leases within it)",
            self.table.name(),
            watch.window().as_secs_f64()
        ));
        let started = Instant::now();
        loop {
            let left = watch.window().saturating_sub(started.elapsed());
            tokio::time::sleep(left.min(watch.every())).await;
            let last = self.select(stream, self.scan(stream).await?)?;
            watch.look(&last.leases, started.elapsed());
            match watch.verdict() {
                Verdict::Watching => {}
                Verdict::Still => return Ok(last),
                Verdict::Live(movement) if self.force => {
                    warnings.push(format!(
                        "forced while KCL workers run: {movement}; the KCL and the brokers may both read the stream"
                    ));
                    return Ok(last);
                }
                Verdict::Live(movement) => {
                    return Err(ImportError::KclRunning {
                        table: self.table.name().to_owned(),
                        stream: stream.to_owned(),
                        movement: Box::new(movement),
                        window: watch.window(),
                    })
                }
            }
        }
    }

    /// Carries out one step; true when it wrote.
    async fn write(
        &self,
        target: Target<'_>,
        stream: &str,
        kcl: &Selection,
        listed: &[Shard],
        step: &mut Step,
    ) -> Result<bool, ImportError> {
        let shard = step.shard.clone();
        let refused = |reason: String| ImportError::Refused {
            table: target.table.to_owned(),
            stream: stream.to_owned(),
            shard: shard.clone(),
            reason,
        };
        let key = LeaseKey::new(stream, step.shard.as_str())
            .map_err(|source| store_error(target, stream, source))?;
        let mut action = step.action.clone();
        let intended = match &action {
            Action::Create(row) => row.checkpoint.clone(),
            Action::Advance { checkpoint, .. } => Some(checkpoint.clone()),
            _ => None,
        };
        for _ in 0..WRITE_ATTEMPTS {
            // A lost answer retried: the create finds its own row, the evict loses its fence,
            // and the re-plan below reads the row at the KCL's checkpoint and leaves it.
            let landed = match &action {
                Action::Create(row) => {
                    self.retrying(stream, || async {
                        target
                            .store
                            .create(row)
                            .await
                            .map_err(|source| store_error(target, stream, source))
                    })
                    .await?
                }
                Action::Advance {
                    fence,
                    checkpoint,
                    holder,
                } => self
                    .retrying(stream, || async {
                        let member = holder
                            .as_deref()
                            .and_then(|h| LeaseKey::member(stream, h).ok());
                        target
                            .store
                            .evict(&key, *fence, Some(checkpoint), member.as_ref())
                            .await
                            .map_err(|source| store_error(target, stream, source))
                    })
                    .await?
                    .is_written(),
                _ => return Ok(false),
            };
            if landed {
                step.action = action;
                return Ok(true);
            }
            // Written by another since it was read: decide again from the row as it is now.
            let now = self
                .retrying(stream, || async {
                    target
                        .store
                        .read(&key)
                        .await
                        .map_err(|source| store_error(target, stream, source))
                })
                .await?;
            // Our write landed and its answer was lost (the retry found its own row): it was
            // written, and running brokers must be told.
            if let Some(row) = &now {
                if row.checkpoint == intended
                    && (row.token.is_none() || kinesis_lease_core::rules::is_evicted(row))
                {
                    step.action = action;
                    return Ok(true);
                }
            }
            let replanned = plan(
                stream,
                &kcl.leases,
                listed,
                now.as_slice(),
                self.at_timestamp_ms,
                self.force,
            )
            .map_err(|u| refused(u.reason))?;
            let again = replanned
                .into_iter()
                .find(|s| s.shard == shard)
                .ok_or_else(|| refused("the shard left the plan".into()))?;
            step.before = again.before.clone();
            step.after = again.after.clone();
            step.note = format!("written meanwhile by another writer; {}", again.note);
            match again.action {
                Action::Refuse => {
                    return Err(refused(format!("{} (written meanwhile)", again.note)))
                }
                Action::Leave | Action::Skip => {
                    step.action = Action::Leave;
                    return Ok(false);
                }
                next => action = next,
            }
        }
        Err(refused(format!(
            "the row kept changing over {WRITE_ATTEMPTS} attempts; import again"
        )))
    }
}

fn store_error(
    target: Target<'_>,
    stream: &str,
    source: kinesis_lease_core::LeaseError,
) -> ImportError {
    ImportError::Store {
        table: target.table.to_owned(),
        stream: stream.to_owned(),
        source: Box::new(source),
    }
}

mod recorded;

#[cfg(test)]
mod tests;
