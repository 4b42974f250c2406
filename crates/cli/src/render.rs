//! The two faces of every result: an aligned table for people, JSON for scripts. Pure: each
//! function turns observations into lines, and lines into text.
//!
//! JSON field names never change meaning; new fields may be added. `null` means not known or
//! not applicable (a free row's `owner`, a finished row's lag).

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, Table};
use kinesis_lease_core::{ErrorChain, Lease, Load};
use serde::Serialize;

use crate::lag::{Probe, Records};
use crate::view::{state_of, Verdict};

/// A load as its row published it (see `kinesis_lease_core::Load`): averaged over the last
/// minute, per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LoadLine {
    /// Records handled per minute.
    pub records_per_min: u64,
    /// Payload bytes handled per minute.
    pub bytes_per_min: u64,
    /// Milliseconds of handler time per minute (60,000: one handler busy all the time).
    pub busy_ms_per_min: u64,
    /// On a member: its capacity in thousandths of the default (1,000); `null` on a shard.
    pub capacity_milli: Option<u64>,
}

impl From<&Load> for LoadLine {
    fn from(load: &Load) -> Self {
        Self {
            records_per_min: load.records_per_min,
            bytes_per_min: load.bytes_per_min,
            busy_ms_per_min: load.busy_ms_per_min,
            capacity_milli: load.capacity_milli,
        }
    }
}

/// `12.5 rec/s, 6.3 KB/s, busy 45 %` (busy: handler time over one handler's time), or `-`.
fn load_text(load: Option<&LoadLine>) -> String {
    let Some(load) = load else {
        return "-".to_owned();
    };
    let bytes = load.bytes_per_min as f64 / 60.0;
    let bytes = if bytes >= 1_000_000.0 {
        format!("{:.1} MB/s", bytes / 1_000_000.0)
    } else if bytes >= 1_000.0 {
        format!("{:.1} KB/s", bytes / 1_000.0)
    } else {
        format!("{bytes:.0} B/s")
    };
    format!(
        "{:.1} rec/s, {bytes}, busy {:.0} %",
        load.records_per_min as f64 / 60.0,
        load.busy_ms_per_min as f64 / 600.0
    )
}

/// One shard row, as `leases` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseLine {
    /// The shard id.
    pub shard: String,
    /// Who holds it (or it was handed to); `null` when free.
    pub owner: Option<String>,
    /// `held`, `free`, `handed_over` or `finished`.
    pub state: &'static str,
    /// The stored text: a sequence number, `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<ms>`,
    /// `SHARD_END`; `null` when none was ever written.
    pub checkpoint: Option<String>,
    /// The subsequence inside a KPL aggregate, if any.
    pub subsequence: Option<u64>,
    /// The row's counter: bumped by every write.
    pub counter: u64,
    /// The shards this one was split or merged from.
    pub parents: Vec<String>,
    /// Another owner that asked for the row.
    pub wanted_by: Option<String>,
    /// How far the checkpoint is behind the tip, in ms (`MillisBehindLatest`).
    pub behind_ms: Option<u64>,
    /// Exactly how many records follow the checkpoint, when one probe reached the tip.
    pub behind_records: Option<u64>,
    /// At least this many records follow the checkpoint, when the probe did not reach it.
    pub behind_records_at_least: Option<u64>,
    /// Why Kinesis could not say how far behind the checkpoint is.
    pub lag_error: Option<String>,
    /// Kinesis' answer when it refuses to open the shard at its checkpoint (while it opens
    /// the shard at `TRIM_HORIZON`): no reader can go on from there, the shard is stuck until
    /// it is `reset` to a valid position; `null` otherwise.
    pub checkpoint_refused: Option<String>,
    /// The shard's load as its holder last published it; `null` when none was.
    pub load: Option<LoadLine>,
}

/// The line of `row`, with its lag probe if one was made.
pub fn lease_line(row: &Lease, probe: Option<&Probe>) -> LeaseLine {
    let mut line = LeaseLine {
        shard: row.key.shard().to_owned(),
        // An evicted row names the operator's hold, which is nobody's.
        owner: row
            .owner
            .clone()
            .filter(|_| !kinesis_lease_core::rules::is_evicted(row)),
        state: state_of(row).json(),
        checkpoint: row.checkpoint.as_ref().map(|c| c.stored()),
        subsequence: row.checkpoint.as_ref().and_then(|c| c.subsequence()),
        counter: row.counter,
        parents: row.parents.clone(),
        wanted_by: row.wanted_by.clone(),
        behind_ms: None,
        behind_records: None,
        behind_records_at_least: None,
        lag_error: None,
        checkpoint_refused: None,
        load: row.load.as_ref().map(LoadLine::from),
    };
    match probe {
        Some(Probe::Behind(behind)) => {
            line.behind_ms = behind.millis;
            match behind.records {
                Records::Exactly(n) => line.behind_records = Some(n),
                Records::AtLeast(n) => line.behind_records_at_least = Some(n),
            }
        }
        Some(Probe::Refused(error)) => {
            line.checkpoint_refused = Some(ErrorChain(error).to_string());
        }
        Some(Probe::Failed(error)) => line.lag_error = Some(ErrorChain(error).to_string()),
        Some(Probe::NotAsked) | None => {}
    }
    line
}

pub(crate) fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

pub(crate) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(NOTHING).set_header(header.to_vec());
    table
}

fn behind_text(line: &LeaseLine) -> String {
    let time = line
        .behind_ms
        .map(|ms| format!("{:.1} s", ms as f64 / 1000.0));
    let records = match (line.behind_records, line.behind_records_at_least) {
        (Some(1), _) => Some("1 record".to_owned()),
        (Some(n), _) => Some(format!("{n} records")),
        (None, Some(n)) if n > 0 => Some(format!("{n}+ records")),
        _ => None,
    };
    if line.checkpoint_refused.is_some() {
        return "stuck: checkpoint refused (see stderr)".to_owned();
    }
    match (time, records, &line.lag_error) {
        (_, _, Some(_)) => "? (see stderr)".to_owned(),
        (Some(t), Some(r), _) => format!("{t}, {r}"),
        (Some(t), None, _) => t,
        (None, Some(r), _) => r,
        (None, None, _) => "-".to_owned(),
    }
}

/// The aligned table of `leases`, one row per shard in the order given.
pub fn leases_table(lines: &[LeaseLine]) -> String {
    let mut t = table(&[
        "SHARD",
        "OWNER",
        "STATE",
        "CHECKPOINT",
        "COUNTER",
        "PARENTS",
        "BEHIND",
        "LOAD",
    ]);
    for line in lines {
        let checkpoint = match (&line.checkpoint, line.subsequence) {
            (Some(cp), Some(sub)) => format!("{cp}/{sub}"),
            (cp, _) => or_dash(cp.as_deref()),
        };
        let owner = match &line.wanted_by {
            Some(asker) => format!("{} (wanted by {asker})", or_dash(line.owner.as_deref())),
            None => or_dash(line.owner.as_deref()),
        };
        let parents = if line.parents.is_empty() {
            "-".to_owned()
        } else {
            line.parents.join(",")
        };
        let state = if line.state == "handed_over" {
            "handed over"
        } else {
            line.state
        };
        t.add_row(vec![
            line.shard.clone(),
            owner,
            state.to_owned(),
            checkpoint,
            line.counter.to_string(),
            parents,
            behind_text(line),
            load_text(line.load.as_ref()),
        ]);
    }
    if let Some(col) = t.column_mut(4) {
        col.set_cell_alignment(CellAlignment::Right);
    }
    t.to_string()
}

/// One member, as `members` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberLine {
    /// The owner id.
    pub owner: String,
    /// True when its member row is present and was renewed while watched.
    pub alive: bool,
    /// `present`, `left`, `buried` or `no_member_row` (rows held by an owner without one:
    /// taken before the roster existed).
    pub presence: &'static str,
    /// How liveness was judged.
    pub judged: String,
    /// The member row's counter at the last look (`null`: no member row).
    pub counter: Option<u64>,
    /// The shards it holds (owner and token), sorted.
    pub shards: Vec<String>,
    /// The load it carries (the sum of its shards') and its capacity, as its member row
    /// published them at the last look; `null` when it published none.
    pub load: Option<LoadLine>,
}

/// The lines of `members`: every verdict with the shards its owner holds, then owners that
/// hold shards without a member row.
pub fn member_lines(
    verdicts: &[Verdict],
    holdings: &std::collections::BTreeMap<String, Vec<String>>,
) -> Vec<MemberLine> {
    let mut lines: Vec<MemberLine> = verdicts
        .iter()
        .map(|v| MemberLine {
            owner: v.owner.clone(),
            alive: v.alive,
            presence: v.presence,
            judged: v.judged.clone(),
            counter: v.counters.map(|(_, last)| last),
            shards: holdings.get(&v.owner).cloned().unwrap_or_default(),
            load: v.load.as_ref().map(LoadLine::from),
        })
        .collect();
    for (owner, shards) in holdings {
        if !verdicts.iter().any(|v| &v.owner == owner) {
            lines.push(MemberLine {
                owner: owner.clone(),
                alive: false,
                presence: "no_member_row",
                judged: "holds rows but has no member row (taken before the roster?)".into(),
                counter: None,
                shards: shards.clone(),
                load: None,
            });
        }
    }
    lines
}

/// The aligned table of `members`.
pub fn members_table(lines: &[MemberLine]) -> String {
    let mut t = table(&[
        "OWNER", "ALIVE", "SHARDS", "LOAD", "CAPACITY", "HELD", "JUDGED",
    ]);
    for line in lines {
        let capacity = line
            .load
            .as_ref()
            .map(|l| l.capacity_milli.unwrap_or(Load::DEFAULT_CAPACITY_MILLI))
            .map_or("-".to_owned(), |c| format!("{:.2}", c as f64 / 1_000.0));
        t.add_row(vec![
            line.owner.clone(),
            if line.alive { "yes" } else { "no" }.to_owned(),
            line.shards.len().to_string(),
            load_text(line.load.as_ref()),
            capacity,
            if line.shards.is_empty() {
                "-".to_owned()
            } else {
                line.shards.join(",")
            },
            line.judged.clone(),
        ]);
    }
    t.to_string()
}

/// What `migrate-index` did to one index (the stream's, or its roster's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationLine {
    /// The stream (or the roster's pseudo-stream, `stream@members`) whose index it was.
    pub index: String,
    /// True when it was already paged: nothing moved.
    pub already_paged: bool,
    /// Shard (or owner) ids moved from the single index row into pages.
    pub moved: usize,
}

/// `migrate-index`'s lines as an aligned table.
pub fn migration_table(lines: &[MigrationLine]) -> String {
    let mut t = table(&["INDEX", "RESULT", "MOVED"]);
    for line in lines {
        let result = if line.already_paged {
            "already paged"
        } else {
            "paged"
        };
        t.add_row(vec![
            line.index.clone(),
            result.to_owned(),
            line.moved.to_string(),
        ]);
    }
    t.to_string()
}

/// What a write command did to one row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangeLine {
    /// The shard id.
    pub shard: String,
    /// `released`, `reset`, `already_free` or `skipped`.
    pub result: &'static str,
    /// Who held the row before (`null`: nobody).
    pub owner_before: Option<String>,
    /// The stored checkpoint before.
    pub checkpoint_before: Option<String>,
    /// The stored checkpoint now.
    pub checkpoint: Option<String>,
    /// The counter read (the write was fenced on it).
    pub counter_before: u64,
    /// The counter now.
    pub counter: u64,
    /// What it means, for people.
    pub note: String,
}

/// The aligned table of `release` and `reset`.
pub fn changes_table(lines: &[ChangeLine]) -> String {
    let mut t = table(&[
        "SHARD",
        "RESULT",
        "OWNER BEFORE",
        "CHECKPOINT",
        "COUNTER",
        "NOTE",
    ]);
    for line in lines {
        let checkpoint = if line.checkpoint_before == line.checkpoint {
            or_dash(line.checkpoint.as_deref())
        } else {
            format!(
                "{} -> {}",
                or_dash(line.checkpoint_before.as_deref()),
                or_dash(line.checkpoint.as_deref())
            )
        };
        t.add_row(vec![
            line.shard.clone(),
            line.result.replace('_', " "),
            or_dash(line.owner_before.as_deref()),
            checkpoint,
            format!("{} -> {}", line.counter_before, line.counter),
            line.note.clone(),
        ]);
    }
    t.to_string()
}

/// `value` as pretty JSON.
pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("\"unprintable: {e}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lag::Behind;
    use kinesis_lease_core::{Checkpoint, LeaseKey, SequenceNumber};
    use kinesis_stream_core::ReaderError;

    fn row(shard: &str, owner: Option<&str>, cp: Option<Checkpoint>) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s", shard).unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = owner.map(|_| "r1.t".to_owned());
        row.checkpoint = cp;
        row.counter = 7;
        row
    }

    #[test]
    fn json_lines_carry_the_stored_checkpoint_and_a_null_owner_when_free() {
        let seq = SequenceNumber::new("4959", Some(2)).unwrap();
        let held = row("shardId-1", Some("a"), Some(Checkpoint::Sequence(seq)));
        let probe = Probe::Behind(Behind {
            millis: Some(1_500),
            records: Records::AtLeast(100),
        });
        let free = row("shardId-2", None, Some(Checkpoint::TrimHorizon));
        let lines = vec![lease_line(&held, Some(&probe)), lease_line(&free, None)];
        let value: serde_json::Value = serde_json::from_str(&json(&lines)).unwrap();
        assert_eq!(value[0]["shard"], "shardId-1");
        assert_eq!(value[0]["owner"], "a");
        assert_eq!(value[0]["state"], "held");
        assert_eq!(value[0]["checkpoint"], "4959");
        assert_eq!(value[0]["subsequence"], 2);
        assert_eq!(value[0]["behind_ms"], 1_500);
        assert_eq!(value[0]["behind_records"], serde_json::Value::Null);
        assert_eq!(value[0]["behind_records_at_least"], 100);
        assert_eq!(value[1]["owner"], serde_json::Value::Null);
        assert_eq!(value[1]["checkpoint"], "TRIM_HORIZON");
        assert_eq!(value[1]["state"], "free");
    }

    /// A quiet idle row (`quiet_idle_shards()`) is written only when its checkpoint moves, so
    /// its expiry passes while its holder reads it: held is judged by owner and token, never by
    /// the expiry.
    #[test]
    fn a_quiet_row_past_its_expiry_is_shown_held() {
        let mut idle = row("shardId-1", Some("a"), Some(Checkpoint::TrimHorizon));
        idle.expiry_ms = 1;
        let line = lease_line(&idle, None);
        assert_eq!(line.state, "held");
        let value: serde_json::Value = serde_json::from_str(&json(&[line])).unwrap();
        assert_eq!(value[0]["state"], "held");
        assert_eq!(value[0]["owner"], "a");
    }

    #[test]
    fn the_table_is_aligned_with_one_line_per_shard() {
        let failed = Probe::Failed(ReaderError::Throttled {
            operation: "GetRecords",
            resource: "s/shardId-3".into(),
        });
        let exact = Probe::Behind(Behind {
            millis: Some(0),
            records: Records::Exactly(3),
        });
        let lines = vec![
            lease_line(
                &row("shardId-1", Some("owner-long-name"), None),
                Some(&exact),
            ),
            lease_line(&row("shardId-2", None, Some(Checkpoint::ShardEnd)), None),
            lease_line(
                &row("shardId-3", None, Some(Checkpoint::TrimHorizon)),
                Some(&failed),
            ),
        ];
        assert!(lines[2].lag_error.as_deref().unwrap().contains("throttled"));
        let text = leases_table(&lines);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(rows[0].contains("SHARD") && rows[0].contains("BEHIND"));
        let state_at = rows[0].find("STATE").unwrap();
        for (line, state) in rows[1..].iter().zip(["held", "finished", "free"]) {
            assert_eq!(line.find(state), Some(state_at), "aligned: {text}");
        }
        assert!(rows[1].contains("0.0 s, 3 records"));
        assert!(rows[3].contains("? (see stderr)"));
    }

    #[test]
    fn members_without_a_member_row_are_listed_after_the_roster() {
        let verdicts = vec![Verdict {
            owner: "a".into(),
            alive: true,
            presence: "present",
            judged: "counter 1 -> 2 within 0.5 s".into(),
            counters: Some((1, 2)),
            load: None,
        }];
        let holdings = [
            ("a".to_owned(), vec!["shardId-1".to_owned()]),
            ("old".to_owned(), vec!["shardId-2".to_owned()]),
        ]
        .into();
        let lines = member_lines(&verdicts, &holdings);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].alive, lines[0].counter), (true, Some(2)));
        assert_eq!(lines[1].presence, "no_member_row");
        let text = members_table(&lines);
        assert!(text.lines().nth(1).unwrap().contains("yes"));
    }

    #[test]
    fn loads_show_per_shard_and_per_member_with_the_capacity() {
        let mut hot = row("shardId-1", Some("a"), None);
        hot.load = Some(Load::new(750, 378_000, 27_000));
        let lines = [hot.clone(), row("shardId-2", Some("a"), None)]
            .iter()
            .map(|r| lease_line(r, None))
            .collect::<Vec<_>>();
        let text = leases_table(&lines);
        assert!(text.lines().next().unwrap().contains("LOAD"), "{text}");
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .contains("12.5 rec/s, 6.3 KB/s, busy 45 %"),
            "{text}"
        );
        assert!(
            text.lines().nth(2).unwrap().trim_end().ends_with('-'),
            "{text}"
        );
        let json = serde_json::to_value(&lines[0]).unwrap();
        assert_eq!(json["load"]["busy_ms_per_min"], 27_000);
        assert_eq!(json["load"]["capacity_milli"], serde_json::Value::Null);
        assert_eq!(
            serde_json::to_value(&lines[1]).unwrap()["load"],
            serde_json::Value::Null
        );

        let member = |owner: &str, load: Option<Load>| Verdict {
            owner: owner.into(),
            alive: true,
            presence: "present",
            judged: "counter 1 -> 2 within 0.5 s".into(),
            counters: Some((1, 2)),
            load,
        };
        let verdicts = vec![
            member("a", hot.load.map(|l| l.with_capacity(2_000))),
            member("b", None),
        ];
        let holdings = [("a".to_owned(), vec!["shardId-1".to_owned()])].into();
        let lines = member_lines(&verdicts, &holdings);
        let text = members_table(&lines);
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("LOAD") && header.contains("CAPACITY"),
            "{text}"
        );
        let a = text.lines().nth(1).unwrap();
        assert!(a.contains("busy 45 %") && a.contains("2.00"), "{text}");
        let json = serde_json::to_value(&lines[0]).unwrap();
        assert_eq!(json["load"]["capacity_milli"], 2_000);
        assert_eq!(
            serde_json::to_value(&lines[1]).unwrap()["load"],
            serde_json::Value::Null
        );
    }
}
