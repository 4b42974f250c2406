//! What an import does with each shard: pure, from the KCL's leases of the stream, the
//! stream's shard listing and this library's rows.
//!
//! # Rules
//!
//! - A KCL lease whose shard has no row here: create the row at the mapped checkpoint (see
//!   `mapping`), with the KCL's parents (or the listing's, when the KCL stored none), so
//!   children still wait for their parents.
//! - A row here that is at or past the KCL's checkpoint (or finished): leave it. Nothing moves
//!   back; a second import changes nothing.
//! - A row here that is behind (a start position, or an earlier record): move it forward to
//!   the KCL's checkpoint, fenced on the counter read, unless it is held (by an instance of
//!   this library that may be reading it right now): then refuse, unless forced.
//! - A KCL lease that never checkpointed (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`) beside an
//!   existing row: leave the row, which has its own start.
//! - A KCL lease of a shard the stream no longer lists (trimmed): skip it; children count a
//!   parent that is neither listed nor has a row as done.
//! - A listed shard without a KCL lease that is an ancestor of one with a lease: the KCL
//!   counts it done (its cleanup deletes a finished lease once its children have theirs; a
//!   `LATEST` application never leased closed shards). Create it finished (`SHARD_END`);
//!   without a row, a broker would create one and read the shard again from the start.
//! - A listed shard without a KCL lease or a row whose parent is a KCL lease the stream no
//!   longer lists and that the KCL had not finished (it aged out while the KCL read it, or
//!   after): create it at `TRIM_HORIZON`, its first record, as the KCL would continue it.
//!   The brokers would too (a shard whose ancestor held a checkpoint is read from its first
//!   record), but the import does not leave that to the table's other rows.
//! - Any other listed shard without a KCL lease (a child the KCL had not found yet): leave it
//!   to the brokers, which create its row as for any new shard.

use std::collections::{HashMap, HashSet};

use kinesis_lease_core::{rules, Checkpoint, Lease, LeaseKey};
use kinesis_stream_core::Shard;

use crate::mapping::{kcl_checkpoint, kcl_text, Reach};
use crate::select::KclLease;

/// What the import does with one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
// One action per shard of one import, made once: boxing the row would cost more code than the
// bytes it saves.
#[allow(clippy::large_enum_variant)]
pub enum Action {
    /// Create the row (there is none).
    Create(Lease),
    /// Store `checkpoint` in the existing row, freeing it, fenced on `fence`.
    Advance {
        /// The counter read.
        fence: u64,
        /// The checkpoint to store.
        checkpoint: Checkpoint,
        /// The instance holding the row when it was read, if any: its member row is poked with
        /// the write (see `LeaseStore::evict`).
        holder: Option<String>,
    },
    /// Nothing to write.
    Leave,
    /// Not imported (the shard is gone from the stream).
    Skip,
    /// Refuse the whole import: writing this row could hurt a reader.
    Refuse,
}

impl Action {
    /// True for the actions that write.
    pub fn writes(&self) -> bool {
        matches!(self, Action::Create(_) | Action::Advance { .. })
    }

    /// What the action is called in a plan (`dry`) or a report.
    pub fn verb(&self, dry: bool) -> &'static str {
        match (self, dry) {
            (Action::Create(_), true) => "create",
            (Action::Create(_), false) => "created",
            (Action::Advance { .. }, true) => "advance",
            (Action::Advance { .. }, false) => "advanced",
            (Action::Leave, _) => "unchanged",
            (Action::Skip, _) => "skipped",
            (Action::Refuse, _) => "refused",
        }
    }
}

/// One shard of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The shard id.
    pub shard: String,
    /// The KCL's checkpoint as stored (`sequence/subsequence` or a sentinel), `None` when the
    /// KCL has no lease of the shard.
    pub kcl: Option<String>,
    /// The KCL lease's owner, if any.
    pub kcl_owner: Option<String>,
    /// This library's checkpoint before the import (`None`: no row; `-`: a row without one).
    pub before: Option<String>,
    /// The checkpoint the row holds after the import, if it has a row then.
    pub after: Option<String>,
    /// What the import does.
    pub action: Action,
    /// Why, in a few words.
    pub note: String,
}

/// A KCL lease that cannot be imported: the whole import is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmappable {
    /// The shard.
    pub shard: String,
    /// Why.
    pub reason: String,
}

fn shown(checkpoint: Option<&Checkpoint>) -> String {
    checkpoint.map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// Plans the import of `kcl` (the KCL's leases of `stream`) against `listed` (the stream's
/// shards, open and closed) and `ours` (this library's rows of the stream, bookkeeping rows
/// included or not). `at_timestamp_ms` maps the KCL's `AT_TIMESTAMP`; `force` turns refusals
/// for held rows into moves. Steps are sorted by shard.
///
/// # Errors
///
/// The first KCL lease (by shard) that cannot be mapped.
pub fn plan(
    stream: &str,
    kcl: &[KclLease],
    listed: &[Shard],
    ours: &[Lease],
    at_timestamp_ms: Option<u64>,
    force: bool,
) -> Result<Vec<Step>, Unmappable> {
    let listing: HashMap<&str, &Shard> = listed.iter().map(|s| (s.id.as_str(), s)).collect();
    let rows: HashMap<&str, &Lease> = ours
        .iter()
        .filter(|r| r.key.stream() == stream)
        .map(|r| (r.key.shard(), r))
        .collect();
    let leased: HashSet<&str> = kcl.iter().map(|l| l.shard.as_str()).collect();
    let mut steps = Vec::new();
    for lease in kcl {
        let shard = lease.shard.as_str();
        let unmappable = |reason: String| Unmappable {
            shard: shard.to_owned(),
            reason,
        };
        let mut step = Step {
            shard: shard.to_owned(),
            kcl: Some(kcl_text(&lease.row)),
            kcl_owner: lease.row.owner.clone(),
            before: rows.get(shard).map(|r| shown(r.checkpoint.as_ref())),
            after: None,
            action: Action::Leave,
            note: String::new(),
        };
        let pending = lease
            .row
            .pending()
            .map(|p| format!(" (pending checkpoint {p} ignored: never committed)"))
            .unwrap_or_default();
        let Some(listed_shard) = listing.get(shard) else {
            step.action = Action::Skip;
            step.after = step.before.clone();
            step.note = "the stream no longer lists this shard (trimmed): not imported".into();
            steps.push(step);
            continue;
        };
        let target = kcl_checkpoint(&lease.row, at_timestamp_ms).map_err(unmappable)?;
        match rows.get(shard) {
            None => {
                let parents = if lease.row.parents.is_empty() {
                    listed_shard.parents()
                } else {
                    lease.row.parents.clone()
                };
                let key = LeaseKey::new(stream, shard).map_err(|e| unmappable(e.to_string()))?;
                let row = Lease::new(key, parents).starting_at(Some(target.clone()));
                step.after = Some(target.to_string());
                step.note = match &target {
                    Checkpoint::Sequence(_) => "resumes after the KCL's checkpoint".to_owned(),
                    Checkpoint::ShardEnd => "finished by the KCL".to_owned(),
                    _ => "never checkpointed by the KCL: starts where the KCL would".to_owned(),
                } + &pending;
                step.action = Action::Create(row);
            }
            Some(row) => {
                let (ours_at, kcl_at) =
                    (Reach::of(row.checkpoint.as_ref()), Reach::of(Some(&target)));
                step.after = step.before.clone();
                if target.is_start_position() {
                    step.note = "the KCL never checkpointed it; the row has its own start".into();
                } else if ours_at >= kcl_at {
                    step.note = "already at or past the KCL's checkpoint".to_owned() + &pending;
                } else if row.token.is_some() && !rules::is_evicted(row) && !force {
                    // Held by an instance (an operator's hold reads nothing).
                    step.action = Action::Refuse;
                    step.note = format!(
                        "behind the KCL's checkpoint and held by `{}`, which may be reading it: \
                         stop it and import again, or add --force",
                        row.owner.as_deref().unwrap_or("-")
                    );
                } else {
                    step.after = Some(target.to_string());
                    step.note = match &row.owner {
                        Some(owner) if row.token.is_some() && !rules::is_evicted(row) => format!(
                            "moved forward to the KCL's checkpoint (forced: `{owner}` stops at its next renewal)"
                        ),
                        _ => "moved forward to the KCL's checkpoint".to_owned(),
                    } + &pending;
                    step.action = Action::Advance {
                        fence: row.counter,
                        checkpoint: target,
                        holder: row.owner.clone().filter(|o| o != rules::EVICTED_OWNER),
                    };
                }
            }
        }
        steps.push(step);
    }
    // Listed shards the KCL has no lease of.
    let ancestors = ancestors_of(&leased, &listing);
    // KCL leases of shards gone from the stream that the KCL had not finished.
    let unfinished_gone: HashSet<&str> = kcl
        .iter()
        .filter(|l| !listing.contains_key(l.shard.as_str()))
        .filter(|l| l.row.checkpoint.as_deref() != Some("SHARD_END"))
        .map(|l| l.shard.as_str())
        .collect();
    for shard in listed.iter().filter(|s| !leased.contains(s.id.as_str())) {
        let id = shard.id.as_str();
        let existing = rows.get(id);
        let mut step = Step {
            shard: id.to_owned(),
            kcl: None,
            kcl_owner: None,
            before: existing.map(|r| shown(r.checkpoint.as_ref())),
            after: existing.map(|r| shown(r.checkpoint.as_ref())),
            action: Action::Leave,
            note: String::new(),
        };
        if existing.is_some() {
            step.note = "no KCL lease; the row is left as it is".into();
        } else if ancestors.contains(id) {
            let key = LeaseKey::new(stream, id).map_err(|e| Unmappable {
                shard: id.to_owned(),
                reason: e.to_string(),
            })?;
            step.action = Action::Create(
                Lease::new(key, shard.parents()).starting_at(Some(Checkpoint::ShardEnd)),
            );
            step.after = Some(Checkpoint::ShardEnd.to_string());
            step.note = "no KCL lease, but descendants have one: done for the KCL, created \
                         finished so it is not read again"
                .into();
        } else if shard
            .parents()
            .iter()
            .any(|p| unfinished_gone.contains(p.as_str()))
        {
            let key = LeaseKey::new(stream, id).map_err(|e| Unmappable {
                shard: id.to_owned(),
                reason: e.to_string(),
            })?;
            step.action = Action::Create(
                Lease::new(key, shard.parents()).starting_at(Some(Checkpoint::TrimHorizon)),
            );
            step.after = Some(Checkpoint::TrimHorizon.to_string());
            step.note = "no KCL lease; its parent aged out of the stream while the KCL read it: \
                         created at its first record"
                .into();
        } else {
            step.note = "no KCL lease (a shard the KCL had not found yet): brokers create its row \
                         as for any new shard"
                .into();
        }
        steps.push(step);
    }
    steps.sort_by(|a, b| a.shard.cmp(&b.shard));
    Ok(steps)
}

/// The listed shards that are ancestors (through the listing's parents) of a leased shard.
fn ancestors_of<'a>(
    leased: &HashSet<&'a str>,
    listing: &HashMap<&'a str, &'a Shard>,
) -> HashSet<&'a str> {
    let mut found = HashSet::new();
    let mut todo: Vec<&str> = leased.iter().copied().collect();
    while let Some(shard) = todo.pop() {
        let Some(listed) = listing.get(shard) else {
            continue;
        };
        for parent in [listed.parent.as_deref(), listed.adjacent_parent.as_deref()]
            .into_iter()
            .flatten()
        {
            if let Some((&id, _)) = listing.get_key_value(parent) {
                if found.insert(id) {
                    todo.push(id);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
