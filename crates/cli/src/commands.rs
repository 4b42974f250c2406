//! The commands' I/O: read rows, hand them to the pure modules (`view`, `target`, `lag`,
//! `render`), carry out the plan with fenced writes, print the result.
//!
//! Every command runs against a [`Context`]: a [`LeaseStore`] (DynamoDB in the binary, any
//! store in tests) and, for `leases`, a [`KinesisApi`] to ask how far behind each checkpoint
//! is. Results go to `out`, progress and warnings to `err`.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use kinesis_lease_core::{Lease, LeaseKey, LeaseStore, Outcome, SequenceNumber};
use kinesis_lease_dynamo::DynamoLeaseStore;
use kinesis_stream_core::{KinesisApi, ReaderError, StartAt};
use tokio::time::Instant;

use crate::args::{LeasesArgs, MembersArgs, MigrateIndexArgs, ReleaseArgs, ResetArgs, TableArgs};
use crate::error::CliError;
use crate::lag::probe_all;
use crate::render::{self, ChangeLine};
use crate::target::{may_retry, plan_step, ResetTo, Step};
use crate::usage;
use crate::view::{self, holdings, shard_rows, state_of, Judge, State};

/// Listings longer than this print progress lines on stderr.
const PROGRESS_FROM: usize = 100;

/// How often member rows are read again while liveness is judged.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Fenced writes retried after a lost fence (the row re-read and judged again each time).
const WRITE_ATTEMPTS: usize = 3;

/// What the commands run against.
#[derive(Debug, Clone)]
pub struct Context {
    /// The lease table's name, for messages.
    pub table: String,
    /// The lease store over it.
    pub store: Arc<dyn LeaseStore>,
    /// The same table as a DynamoDB store, when it is one: its listing reports progress.
    pub dynamo: Option<DynamoLeaseStore>,
    /// Kinesis, to ask how far behind checkpoints are and whether a reset's sequence number
    /// is of its shard (`None`: lag is not asked, and `reset --to after-sequence=N` is
    /// refused).
    pub kinesis: Option<Arc<dyn KinesisApi>>,
    /// The AWS configuration the clients were built from (`import-kcl` reads the KCL's table
    /// with it); `None` in tests.
    pub aws: Option<aws_config::SdkConfig>,
}

/// Where results and progress go.
#[derive(Debug)]
pub struct Io<'a, O: Write, E: Write> {
    /// Results.
    pub out: &'a mut O,
    /// Progress, warnings.
    pub err: &'a mut E,
}

impl<O: Write, E: Write> Io<'_, O, E> {
    pub(crate) fn result(&mut self, text: &str) -> Result<(), CliError> {
        writeln!(self.out, "{}", text.trim_end()).map_err(CliError::Output)
    }

    pub(crate) fn note(&mut self, text: &str) {
        // Progress is best effort: a closed stderr must not fail the command.
        let _ = writeln!(self.err, "{text}");
    }
}

impl Context {
    fn store_error(&self, stream: &str, source: kinesis_lease_core::LeaseError) -> CliError {
        CliError::store(&self.table, stream, source)
    }

    /// Every row of `stream` (shard rows or member rows alike), with progress lines on long
    /// listings.
    async fn list<O: Write, E: Write>(
        &self,
        stream: &str,
        io: &mut Io<'_, O, E>,
    ) -> Result<Vec<Lease>, CliError> {
        let listed = match &self.dynamo {
            Some(dynamo) => {
                let mut progress = |done: usize, total: usize| {
                    if total > PROGRESS_FROM {
                        io.note(&format!("read {done} of {total} rows of `{stream}`"));
                    }
                };
                dynamo.list_with_progress(stream, &mut progress).await
            }
            None => self.store.list(stream).await,
        };
        listed.map_err(|e| self.store_error(stream, e))
    }

    /// The shard rows of `stream`, sorted; [`CliError::StreamNotFound`] when there are none.
    async fn shards<O: Write, E: Write>(
        &self,
        stream: &str,
        io: &mut Io<'_, O, E>,
    ) -> Result<Vec<Lease>, CliError> {
        let rows = shard_rows(stream, self.list(stream, io).await?);
        if rows.is_empty() {
            return Err(CliError::StreamNotFound {
                table: self.table.clone(),
                stream: stream.to_owned(),
            });
        }
        Ok(rows)
    }

    fn key(&self, stream: &str, shard: &str) -> Result<LeaseKey, CliError> {
        usage::shard_key(stream, shard)
    }

    /// Watches the member rows of `stream` until every present member moved or one renew
    /// interval (plus a margin) passed.
    async fn judge<O: Write, E: Write>(
        &self,
        stream: &str,
        renew_interval: Duration,
        io: &mut Io<'_, O, E>,
    ) -> Result<Judge, CliError> {
        let members = view::members_stream(stream);
        let started = Instant::now();
        let mut judge = Judge::new(renew_interval, self.list(&members, io).await?);
        if !judge.is_done() {
            io.note(&format!(
                "watching the member rows of `{stream}` for up to {:.1} s (a live member renews every {:.1} s)",
                judge.window().as_secs_f64(),
                renew_interval.as_secs_f64()
            ));
        }
        while !judge.is_done() {
            let left = judge.window().saturating_sub(started.elapsed());
            tokio::time::sleep(left.min(LOOK_EVERY)).await;
            let rows = self.list(&members, io).await?;
            judge.look(rows, started.elapsed());
        }
        Ok(judge)
    }

    /// Asks Kinesis for an iterator at `sequence` in `shard` (as the KCL import checks its
    /// checkpoints): a number Kinesis refuses there (another shard's, one never assigned) is
    /// refused just after it too, where the next reader would open, so the shard would stay
    /// unread for good.
    async fn check_sequence(
        &self,
        stream: &str,
        shard: &str,
        sequence: &SequenceNumber,
    ) -> Result<(), CliError> {
        let kinesis = self.kinesis.as_ref().ok_or_else(|| CliError::Invalid {
            what: "--to after-sequence=N".into(),
            reason: "Kinesis must be asked whether the number is of the shard, and this \
                     context has no Kinesis"
                .into(),
        })?;
        let at = StartAt::AtSequence(sequence.clone());
        match kinesis.shard_iterator(stream, shard, &at).await {
            Ok(_) => Ok(()),
            Err(source @ (ReaderError::Refused { .. } | ReaderError::ShardNotFound { .. })) => {
                Err(CliError::SequenceNotInShard {
                    stream: stream.to_owned(),
                    shard: shard.to_owned(),
                    sequence: sequence.number().to_owned(),
                    source: Box::new(source),
                })
            }
            Err(source) => Err(CliError::Kinesis {
                stream: stream.to_owned(),
                shard: shard.to_owned(),
                source: Box::new(source),
            }),
        }
    }

    async fn bump<O: Write, E: Write>(
        &self,
        stream: &str,
        io: &mut Io<'_, O, E>,
    ) -> Result<(), CliError> {
        self.store.bump_epoch(stream).await.map_err(|e| {
            io.note(
                "the rows were written, but the stream's epoch could not be bumped: instances \
                 notice the change at their next listing instead of within a take interval",
            );
            self.store_error(stream, e)
        })
    }
}

fn print<T: serde::Serialize, O: Write, E: Write>(
    io: &mut Io<'_, O, E>,
    args: &TableArgs,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if args.json {
        io.result(&render::json(value))
    } else {
        io.result(&table())
    }
}

/// `leases`: one line per shard, with how far its checkpoint is behind the tip, or that the
/// shard is stuck when Kinesis refuses to read it from its checkpoint.
///
/// # Errors
///
/// [`CliError::TableNotFound`], [`CliError::StreamNotFound`], [`CliError::Store`]; Kinesis
/// failures and refused checkpoints are warnings, shown per shard.
pub async fn leases<O: Write, E: Write>(
    ctx: &Context,
    args: &LeasesArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let stream = &args.table.stream;
    let rows = ctx.shards(stream, io).await?;
    let probes = match (&ctx.kinesis, args.no_lag) {
        (Some(kinesis), false) => {
            let mut progress = |done: usize, total: usize| {
                if total > 8 && (done.is_multiple_of(8) || done == total) {
                    io.note(&format!("asked Kinesis about {done} of {total} shards"));
                }
            };
            Some(probe_all(kinesis.clone(), stream, &rows, &mut progress).await)
        }
        _ => None,
    };
    let lines: Vec<_> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| render::lease_line(row, probes.as_ref().map(|p| &p[i])))
        .collect();
    for line in &lines {
        if let Some(error) = &line.lag_error {
            io.note(&format!(
                "warning: how far shard `{}` of `{stream}` is behind is not known: {error}",
                line.shard
            ));
        }
        if let Some(refused) = &line.checkpoint_refused {
            io.note(&format!(
                "warning: shard `{shard}` of `{stream}` is stuck: Kinesis refuses to read it from \
                 its checkpoint {checkpoint} ({refused}), so no reader can go on; move it with \
                 `kinesis-broker reset --table {table} --stream {stream} --shard {shard} --to \
                 trim-horizon|latest|at-timestamp=RFC3339|after-sequence=N`",
                shard = line.shard,
                checkpoint = line.checkpoint.as_deref().unwrap_or("-"),
                table = ctx.table,
            ));
        }
    }
    print(io, &args.table, &lines, || render::leases_table(&lines))
}

/// `members`: the roster, each member judged alive or not.
///
/// # Errors
///
/// [`CliError::TableNotFound`], [`CliError::StreamNotFound`] (no member row and no shard
/// row), [`CliError::Store`].
pub async fn members<O: Write, E: Write>(
    ctx: &Context,
    args: &MembersArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let stream = &args.table.stream;
    let judge = ctx.judge(stream, args.renew_interval, io).await?;
    let shards = shard_rows(stream, ctx.list(stream, io).await?);
    let verdicts = judge.verdicts();
    if verdicts.is_empty() && shards.is_empty() {
        return Err(CliError::StreamNotFound {
            table: ctx.table.clone(),
            stream: stream.clone(),
        });
    }
    let lines = render::member_lines(&verdicts, &holdings(&shards));
    print(io, &args.table, &lines, || render::members_table(&lines))
}

/// `migrate-index`: the stream's index and its roster's moved into pages.
pub async fn migrate_index<O: Write, E: Write>(
    ctx: &Context,
    args: &MigrateIndexArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let stream = &args.table.stream;
    let dynamo = ctx.dynamo.as_ref().ok_or_else(|| CliError::Invalid {
        what: "command".into(),
        reason: "migrate-index moves a DynamoDB lease table's index; this table is not one".into(),
    })?;
    let mut lines = Vec::new();
    for index in [stream.clone(), view::members_stream(stream)] {
        let done = dynamo
            .migrate_index(&index)
            .await
            .map_err(|e| ctx.store_error(stream, e))?;
        lines.push(render::MigrationLine {
            index,
            already_paged: done.already_paged,
            moved: done.moved,
        });
    }
    print(io, &args.table, &lines, || render::migration_table(&lines))
}

fn change(before: &Lease, after: &Lease, result: &'static str, note: String) -> ChangeLine {
    ChangeLine {
        shard: before.key.shard().to_owned(),
        result,
        // The operator's hold is nobody's (as `leases` shows it).
        owner_before: before
            .owner
            .clone()
            .filter(|_| !kinesis_lease_core::rules::is_evicted(before)),
        checkpoint_before: before.checkpoint.as_ref().map(|c| c.stored()),
        checkpoint: after.checkpoint.as_ref().map(|c| c.stored()),
        counter_before: before.counter,
        counter: after.counter,
        note,
    }
}

fn lost_reason(before: &Lease, holder: Option<&str>, counter: u64) -> String {
    format!(
        "the row was written since it was read (counter {} -> {counter}, now held by {}); \
         nothing was changed: run the command again",
        before.counter,
        holder.map_or_else(|| "nobody".to_owned(), |h| format!("`{h}`"))
    )
}

/// `release`: frees one row, fenced on the counter read. A row written between the read and
/// the write is read again and judged as it stands (up to three writes): the same holding
/// (owner and token) is freed on the new counter, a row freed meanwhile is reported
/// `already_free`.
///
/// # Errors
///
/// [`CliError::ShardNotFound`]; [`CliError::Refused`] for a finished row, one another holder
/// (or the same owner restarted, with a new token) took between the read and the write, or
/// one that kept changing over three writes; [`CliError::Store`].
pub async fn release<O: Write, E: Write>(
    ctx: &Context,
    args: &ReleaseArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let (stream, shard) = (&args.table.stream, &args.shard);
    let key = ctx.key(stream, shard)?;
    let refused = |reason: String| CliError::Refused {
        table: ctx.table.clone(),
        stream: stream.clone(),
        shard: shard.clone(),
        reason,
    };
    let row = ctx
        .store
        .read(&key)
        .await
        .map_err(|e| ctx.store_error(stream, e))?
        .ok_or_else(|| CliError::ShardNotFound {
            table: ctx.table.clone(),
            stream: stream.clone(),
            shard: shard.clone(),
        })?;
    // A live holder renews between our read and our write now and then: the row is read
    // again and judged as it stands: the same holding is freed, a row freed or finished
    // meanwhile is reported as such, another holding (taken meanwhile) is refused. The last
    // pass only judges.
    let mut current = row.clone();
    let mut line = None;
    for attempt in 0..=WRITE_ATTEMPTS {
        match state_of(&current) {
            State::Finished => {
                return Err(refused(
                    "the shard is finished (SHARD_END): there is nothing to read and nobody \
                     holds it"
                        .into(),
                ))
            }
            State::Free => {
                line = Some(change(
                    &current,
                    &current,
                    "already_free",
                    "nobody held it; nothing written".into(),
                ));
            }
            State::Evicted => {
                line = Some(change(
                    &current,
                    &current,
                    "already_free",
                    "already released by an operator; nothing written".into(),
                ));
            }
            State::Held | State::HandedOver if attempt == WRITE_ATTEMPTS => break,
            State::Held | State::HandedOver => {
                match ctx
                    .store
                    .evict(
                        &key,
                        current.counter,
                        None,
                        holder_member(&current).as_ref(),
                    )
                    .await
                    .map_err(|e| ctx.store_error(stream, e))?
                {
                    Outcome::Written(after) => {
                        let owner = current.owner.as_deref().unwrap_or("-");
                        let note = format!(
                            "`{owner}` stops reading it at its next renewal (records it handled \
                             since the checkpoint are handled again); an instance takes it once \
                             it has stood still for a lease, and reads after the checkpoint"
                        );
                        ctx.bump(stream, io).await?;
                        line = Some(change(&current, &after, "released", note));
                    }
                    Outcome::Lost(lost) => {
                        let fresh = ctx
                            .store
                            .read(&key)
                            .await
                            .map_err(|e| ctx.store_error(stream, e))?;
                        match fresh {
                            // Judged again at the top: the same holding, or no holding at all.
                            Some(fresh)
                                if may_retry(&current, &fresh, false)
                                    || !matches!(
                                        state_of(&fresh),
                                        State::Held | State::HandedOver
                                    ) =>
                            {
                                current = fresh;
                                continue;
                            }
                            _ => {
                                return Err(refused(lost_reason(
                                    &row,
                                    lost.holder.as_deref(),
                                    lost.counter,
                                )))
                            }
                        }
                    }
                }
            }
        }
        break;
    }
    let line = line.ok_or_else(|| {
        refused(format!(
            "the row kept changing over {WRITE_ATTEMPTS} attempts; nothing was changed: run the \
             command again"
        ))
    })?;
    let lines = [line];
    print(io, &args.table, &lines, || render::changes_table(&lines))
}

/// The rows a reset names: the one `--shard` names, or every shard row.
async fn targets<O: Write, E: Write>(
    ctx: &Context,
    args: &ResetArgs,
    io: &mut Io<'_, O, E>,
) -> Result<Vec<Lease>, CliError> {
    let stream = &args.table.stream;
    match &args.shard {
        Some(shard) => {
            let key = ctx.key(stream, shard)?;
            let row = ctx
                .store
                .read(&key)
                .await
                .map_err(|e| ctx.store_error(stream, e))?;
            row.map(|r| vec![r]).ok_or_else(|| CliError::ShardNotFound {
                table: ctx.table.clone(),
                stream: stream.clone(),
                shard: shard.clone(),
            })
        }
        None => ctx.shards(stream, io).await,
    }
}

/// `reset`: moves the checkpoints of one shard or all, freeing their rows, fenced.
///
/// # Errors
///
/// [`CliError::ShardNotFound`], [`CliError::StreamNotFound`];
/// [`CliError::SequenceNotInShard`] when Kinesis refuses `--to after-sequence=N` in the shard,
/// [`CliError::Kinesis`] when it could not be asked (nothing is written);
/// [`CliError::Refused`] when a row is held by a live member or finished (without `--force`:
/// nothing is written), or was written between the read and the write (the others are written
/// and reported); [`CliError::Store`].
pub async fn reset<O: Write, E: Write>(
    ctx: &Context,
    args: &ResetArgs,
    io: &mut Io<'_, O, E>,
) -> Result<(), CliError> {
    let stream = &args.table.stream;
    usage::reset(args)?;
    let target = args.to.checkpoint();
    let refused = |shard: &str, reason: String| CliError::Refused {
        table: ctx.table.clone(),
        stream: stream.clone(),
        shard: shard.to_owned(),
        reason,
    };
    let first = targets(ctx, args, io).await?;
    if let (Some(shard), ResetTo::AfterSequence(sequence)) = (&args.shard, &args.to) {
        // Before judging or writing anything: a number Kinesis refuses in this shard would
        // leave it unread for good.
        ctx.check_sequence(stream, shard, sequence).await?;
    }
    // Holders to judge: only a live member's rows are refused.
    let held: HashSet<String> = first
        .iter()
        .filter(|r| state_of(r) == State::Held)
        .filter_map(|r| r.owner.clone())
        .collect();
    let mut alive = HashSet::new();
    if !held.is_empty() && !args.force {
        let judge = ctx.judge(stream, args.renew_interval, io).await?;
        let verdicts = judge.verdicts();
        for owner in &held {
            match verdicts.iter().find(|v| &v.owner == owner) {
                Some(v) if v.alive => {
                    alive.insert(owner.clone());
                }
                Some(v) => io.note(&format!("`{owner}` is not alive: {}", v.judged)),
                None => io.note(&format!("`{owner}` has no member row: not alive")),
            }
        }
    }
    // Read again, so the writes are fenced on counters read after the judgement; a holder
    // that appeared meanwhile was not judged and counts as alive.
    let rows = if held.is_empty() || args.force {
        first
    } else {
        targets(ctx, args, io).await?
    };
    for row in &rows {
        if let Some(owner) = &row.owner {
            if state_of(row) == State::Held && !held.contains(owner) {
                alive.insert(owner.clone());
            }
        }
    }
    let named = args.shard.is_some();
    let plan: Vec<(Lease, Step)> = rows
        .into_iter()
        .map(|row| {
            let step = plan_step(&row, &alive, named, args.force);
            (row, step)
        })
        .collect();
    let refusals: Vec<(&Lease, &String)> = plan
        .iter()
        .filter_map(|(row, step)| match step {
            Step::Refuse { reason } => Some((row, reason)),
            _ => None,
        })
        .collect();
    if let Some((row, reason)) = refusals.first() {
        for (other, why) in &refusals[1..] {
            io.note(&format!("refused: shard `{}`: {why}", other.key.shard()));
        }
        let reason = if refusals.len() > 1 {
            format!(
                "{reason} (and {} more; nothing was written)",
                refusals.len() - 1
            )
        } else {
            format!("{reason}; nothing was written")
        };
        return Err(refused(row.key.shard(), reason));
    }
    let mut lines = Vec::new();
    let mut lost = None;
    // A store failure part-way: the rows written before it are still reported and announced.
    let mut failure = None;
    'rows: for (row, step) in plan {
        match step {
            Step::Skip { reason } => {
                lines.push(change(&row, &row, "skipped", reason));
                continue;
            }
            Step::Refuse { .. } => unreachable!("refusals returned above"),
            Step::Move => {}
        }
        let mut current = row.clone();
        let mut written = None;
        for _ in 0..WRITE_ATTEMPTS {
            let outcome = match ctx
                .store
                .evict(
                    &current.key,
                    current.counter,
                    Some(&target),
                    holder_member(&current).as_ref(),
                )
                .await
            {
                Ok(outcome) => outcome,
                Err(e) => {
                    failure = Some(ctx.store_error(stream, e));
                    break 'rows;
                }
            };
            match outcome {
                Outcome::Written(after) => {
                    written = Some(after);
                    break;
                }
                Outcome::Lost(l) => {
                    // Written since: judge the row again as it stands now.
                    let fresh = match ctx.store.read(&current.key).await {
                        Ok(fresh) => fresh,
                        Err(e) => {
                            failure = Some(ctx.store_error(stream, e));
                            break 'rows;
                        }
                    };
                    let still = fresh
                        .as_ref()
                        .map(|r| plan_step(r, &alive, named, args.force));
                    match (fresh, still) {
                        (Some(fresh), Some(Step::Move))
                            if may_retry(&current, &fresh, args.force) =>
                        {
                            current = fresh;
                        }
                        _ => {
                            lost = Some((
                                row.key.shard().to_owned(),
                                lost_reason(&row, l.holder.as_deref(), l.counter),
                            ));
                            break;
                        }
                    }
                }
            }
        }
        match written {
            Some(after) => {
                let note = match state_of(&current) {
                    State::Held => format!(
                        "freed: `{}` stops reading it at its next renewal; an instance takes it \
                         once it has stood still for a lease and reads from {target}",
                        current.owner.as_deref().unwrap_or("-")
                    ),
                    _ => format!(
                        "an instance takes it once it has stood still for a lease and reads \
                         from {target}"
                    ),
                };
                // Before: the row as the write that landed was fenced on.
                lines.push(change(&current, &after, "reset", note));
            }
            None if lost.is_none() => {
                lost = Some((
                    row.key.shard().to_owned(),
                    format!("the row kept changing over {WRITE_ATTEMPTS} attempts; run the command again"),
                ));
            }
            None => {}
        }
    }
    if lines.iter().any(|l| l.result == "reset") {
        if let Err(e) = ctx.bump(stream, io).await {
            failure.get_or_insert(e);
        }
    }
    print(io, &args.table, &lines, || render::changes_table(&lines))?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    match lost {
        Some((shard, reason)) => Err(refused(&shard, reason)),
        None => Ok(()),
    }
}

/// The member row of `row`'s holder, poked with an evict so that a holder writing its row
/// only when its checkpoint moves (quiet idle shards) learns of it at its member row's next
/// renewal; `None` for a free row and the operator's hold.
fn holder_member(row: &Lease) -> Option<LeaseKey> {
    let owner = row.owner.as_deref()?;
    if owner == kinesis_lease_core::rules::EVICTED_OWNER {
        return None;
    }
    LeaseKey::member(row.key.stream(), owner).ok()
}
