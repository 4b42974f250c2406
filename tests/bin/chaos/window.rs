//! The report's window around a violation: the faults that fired shortly before it and the
//! events of its shard within a few seconds of it, so a failing seed can be read without
//! opening the logs.

use crate::checks::Violation;
use crate::events::{Event, Kind};
use crate::fired::Fired;

/// Events of the shard this long either side of the violation.
const AROUND_MS: u128 = 3_000;
/// Faults that began this long before it (a kill's takeover comes 10 s or more later).
const FAULTS_BEFORE_MS: u128 = 20_000;
/// At most this many events.
const MOST: usize = 40;

/// The lines to print under a violation (times relative to `start`, unix ms).
pub(crate) fn window(v: &Violation, events: &[Event], fired: &[Fired], start: u128) -> Vec<String> {
    if v.at == 0 {
        return Vec::new();
    }
    let rel = |t: u128| format!("{:>6.1} s", t.saturating_sub(start) as f64 / 1e3);
    let mut out: Vec<String> = fired
        .iter()
        .filter(|f| f.at() + FAULTS_BEFORE_MS >= v.at && f.at() <= v.at + AROUND_MS)
        .map(|f| format!("fault: {}", f.describe(start)))
        .collect();
    let Some(shard) = &v.shard else {
        return out;
    };
    let mut near: Vec<&Event> = events
        .iter()
        .filter(|e| &e.shard == shard && e.began + AROUND_MS >= v.at && e.began <= v.at + AROUND_MS)
        .collect();
    near.sort_by_key(|e| e.began);
    let skipped = near.len().saturating_sub(MOST);
    for e in near.into_iter().take(MOST) {
        let what = match e.kind {
            Kind::Handled => "handled",
            Kind::Failed => "failed",
            Kind::Take => "took",
            Kind::Lost => "lost",
            Kind::Checkpoint => "checkpoint",
        };
        // The tail of a sequence number tells records of one shard apart.
        let tail = &e.sequence[e.sequence.len().saturating_sub(8)..];
        let sub = e.subsequence.map_or(String::new(), |s| format!("/{s}"));
        out.push(format!(
            "{} {} {what} {shard} {tail}{sub} {}",
            rel(e.began),
            e.process,
            if e.key == "-" { "" } else { e.key.as_str() }
        ));
    }
    if skipped > 0 {
        out.push(format!(
            "... and {skipped} more events of {shard} in the window"
        ));
    }
    out
}
