//! Where `reset` moves checkpoints (`--to`), and which rows it may move: pure, no I/O.
//!
//! A reset writes the new checkpoint and frees the row in one write fenced on the counter read
//! ([`LeaseStore::evict`](kinesis_lease_core::LeaseStore::evict)), so the next taker opens its
//! iterator there: `TRIM_HORIZON`, `AT_TIMESTAMP:<ms>` and a sequence number are read as they
//! are stored (after the sequence number); `LATEST` is pinned by the next take to its wall
//! clock less 30 s, as for a fresh row.

use std::collections::HashSet;
use std::fmt;

use kinesis_lease_core::{rules, Checkpoint, Lease, SequenceNumber};

use crate::view::{state_of, State};

/// A reset's target position, as given to `--to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetTo {
    /// `trim-horizon`: the oldest record still in the shard.
    TrimHorizon,
    /// `latest`: only records put from the next take on (less 30 s of slack).
    Latest,
    /// `at-timestamp=RFC3339`: the first record that arrived at or after this time, in ms
    /// since the Unix epoch.
    AtTimestamp(u64),
    /// `after-sequence=N`: just after this record.
    AfterSequence(SequenceNumber),
}

impl ResetTo {
    /// Parses `trim-horizon`, `latest`, `at-timestamp=2026-12-01T10:00:00Z` or
    /// `after-sequence=4959...`.
    ///
    /// # Errors
    ///
    /// A message naming the input and the accepted forms.
    pub fn parse(input: &str) -> Result<Self, String> {
        let forms = "trim-horizon, latest, at-timestamp=RFC3339 or after-sequence=N";
        match input.split_once('=') {
            None if input == "trim-horizon" => Ok(ResetTo::TrimHorizon),
            None if input == "latest" => Ok(ResetTo::Latest),
            Some(("at-timestamp", time)) => parse_rfc3339(time)
                .map(ResetTo::AtTimestamp)
                .map_err(|reason| format!("`{time}` is not an RFC 3339 time: {reason}")),
            Some(("after-sequence", number)) => SequenceNumber::new(number, None)
                .map(ResetTo::AfterSequence)
                .map_err(|e| e.to_string()),
            _ => Err(format!("`{input}` is not one of {forms}")),
        }
    }

    /// The checkpoint a reset stores.
    pub fn checkpoint(&self) -> Checkpoint {
        match self {
            ResetTo::TrimHorizon => Checkpoint::TrimHorizon,
            ResetTo::Latest => Checkpoint::Latest,
            ResetTo::AtTimestamp(ms) => Checkpoint::AtTimestamp(*ms),
            ResetTo::AfterSequence(seq) => Checkpoint::Sequence(seq.clone()),
        }
    }
}

impl fmt::Display for ResetTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.checkpoint().stored())
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 time: `YYYY-MM-DDTHH:MM:SS`, optional
/// fraction (kept to the millisecond), then `Z` or `+HH:MM` / `-HH:MM`. A space may replace
/// the `T`; times before 1970 are refused.
///
/// # Errors
///
/// What is wrong, in a few words.
pub fn parse_rfc3339(input: &str) -> Result<u64, &'static str> {
    let b = input.as_bytes();
    let digits = |from: usize, len: usize| -> Result<i64, &'static str> {
        let part = b.get(from..from + len).ok_or("too short")?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err("expected digits");
        }
        Ok(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, what: &[u8]| -> Result<(), &'static str> {
        match b.get(at) {
            Some(c) if what.contains(c) => Ok(()),
            _ => Err("expected YYYY-MM-DDTHH:MM:SS"),
        }
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    expect(4, b"-")?;
    expect(7, b"-")?;
    expect(10, b"Tt ")?;
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    expect(13, b":")?;
    expect(16, b":")?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err("no such date");
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err("no such time of day");
    }
    let mut at = 19;
    let mut millis = 0;
    if b.get(at) == Some(&b'.') {
        let start = at + 1;
        at = start;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return Err("expected digits after `.`");
        }
        let kept = (at - start).min(3);
        millis = digits(start, kept)? * 10i64.pow(3 - kept as u32);
    }
    let offset_minutes = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == b.len() => {
            expect(at + 3, b":")?;
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            if h > 23 || m > 59 {
                return Err("no such offset");
            }
            let minutes = h * 60 + m;
            if *sign == b'-' {
                -minutes
            } else {
                minutes
            }
        }
        _ => return Err("expected `Z` or an offset such as +01:00 at the end"),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59) - offset_minutes * 60;
    let ms = seconds * 1_000 + millis;
    u64::try_from(ms).map_err(|_| "before 1970")
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What a reset does with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write the new checkpoint, freeing the row, fenced on the counter read.
    Move,
    /// Leave it: a finished row under `--all` without `--force`.
    Skip {
        /// Why.
        reason: String,
    },
    /// Refuse the whole reset: the row is held by a live member (or finished, when named
    /// alone), and `--force` was not given.
    Refuse {
        /// Why.
        reason: String,
    },
}

/// Decides, per row, what a reset does: `alive` holds the owner ids judged alive, `named`
/// is true when the row was named by `--shard` (a finished row named alone is refused, under
/// `--all` skipped).
pub fn plan_step(row: &Lease, alive: &HashSet<String>, named: bool, force: bool) -> Step {
    let state = state_of(row);
    if force {
        return Step::Move;
    }
    match state {
        State::Finished if named => Step::Refuse {
            reason: "the shard is finished (SHARD_END): its children are read after it; \
                     add --force to read it again"
                .into(),
        },
        State::Finished => Step::Skip {
            reason: "finished (SHARD_END)".into(),
        },
        State::Held => match &row.owner {
            Some(owner) if alive.contains(owner) => Step::Refuse {
                reason: format!(
                    "held by `{owner}`, a live member; add --force to move it anyway (`{owner}` \
                     stops reading it at its next renewal)"
                ),
            },
            _ => Step::Move,
        },
        State::Free | State::HandedOver | State::Evicted => Step::Move,
    }
}

/// Whether a reset whose write lost to a write since (`judged` was read, `fresh` is the row
/// now) may try again on `fresh`: only while it is the holding that was judged (or the row
/// was evicted meanwhile), or with `--force`. A row taken since by a holder nobody judged (a
/// survivor that took a dead holder's row, the asker of a hand-over, a restart with a new
/// token) is refused.
pub fn may_retry(judged: &Lease, fresh: &Lease, force: bool) -> bool {
    force
        || rules::is_evicted(fresh)
        || (fresh.owner == judged.owner && fresh.token == judged.token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::LeaseKey;

    #[test]
    fn a_reset_tries_again_only_on_the_holding_it_judged() {
        let mut judged = Lease::new(LeaseKey::new("s", "a").unwrap(), Vec::new());
        judged.owner = Some("dead".into());
        judged.token = Some("r1.dead".into());
        let mut renewed = judged.clone();
        renewed.counter += 1;
        assert!(
            may_retry(&judged, &renewed, false),
            "the same holding, written"
        );
        let mut taken = renewed.clone();
        taken.owner = Some("survivor".into());
        taken.token = Some("r1.survivor".into());
        assert!(
            !may_retry(&judged, &taken, false),
            "taken by a holder nobody judged"
        );
        assert!(may_retry(&judged, &taken, true), "unless forced");
        let mut restarted = renewed.clone();
        restarted.token = Some("r1.dead-2".into());
        assert!(
            !may_retry(&judged, &restarted, false),
            "a restart with a new token"
        );
        let mut handed = judged.clone();
        handed.token = None;
        handed.owner = Some("asker".into());
        assert!(!may_retry(&judged, &handed, false), "handed over since");
        let mut evicted = renewed;
        rules::evicted(&mut evicted, None);
        assert!(may_retry(&judged, &evicted, false), "released meanwhile");
    }

    #[test]
    fn every_form_of_to_parses() {
        assert_eq!(ResetTo::parse("trim-horizon"), Ok(ResetTo::TrimHorizon));
        assert_eq!(ResetTo::parse("latest"), Ok(ResetTo::Latest));
        assert_eq!(
            ResetTo::parse("at-timestamp=2026-12-01T10:00:00Z"),
            Ok(ResetTo::AtTimestamp(1_796_119_200_000))
        );
        let seq = SequenceNumber::new("4959", None).unwrap();
        assert_eq!(
            ResetTo::parse("after-sequence=4959"),
            Ok(ResetTo::AfterSequence(seq.clone()))
        );
        assert_eq!(
            ResetTo::AfterSequence(seq).checkpoint().stored(),
            "4959",
            "stored as the sequence number itself: readers open after it"
        );
        assert_eq!(
            ResetTo::AtTimestamp(5).checkpoint().stored(),
            "AT_TIMESTAMP:5"
        );
        for bad in [
            "",
            "earliest",
            "TRIM_HORIZON",
            "after-sequence=",
            "after-sequence=12x",
            "at-timestamp=yesterday",
            "latest=1",
        ] {
            assert!(ResetTo::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_times_convert_to_epoch_milliseconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Ok(1_500));
        assert_eq!(parse_rfc3339("1970-01-01t00:00:00.123456z"), Ok(123));
        assert_eq!(parse_rfc3339("2000-02-29T12:00:00Z"), Ok(951_825_600_000));
        assert_eq!(
            parse_rfc3339("2026-12-01T11:00:00+01:00"),
            parse_rfc3339("2026-12-01T10:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-12-01 09:30:00-00:30"),
            parse_rfc3339("2026-12-01T10:00:00Z")
        );
        for bad in [
            "2026-12-01T10:00:00",
            "2026-13-01T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T10:00Z",
            "2026-12-01T10:00:00+0100",
            "2026-12-01T10:00:00.Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
    }

    fn row(owner: Option<&str>, token: Option<&str>, cp: Option<Checkpoint>) -> Lease {
        let mut row = Lease::new(LeaseKey::new("s", "shardId-1").unwrap(), Vec::new());
        row.owner = owner.map(str::to_owned);
        row.token = token.map(str::to_owned);
        row.checkpoint = cp;
        row
    }

    #[test]
    fn a_reset_refuses_live_holders_and_finished_rows_unless_forced() {
        let alive: HashSet<String> = ["a".to_owned()].into();
        let live = row(Some("a"), Some("r1.t"), None);
        let dead = row(Some("b"), Some("r1.t"), None);
        let free = row(None, None, Some(Checkpoint::TrimHorizon));
        let handed = row(Some("c"), None, None);
        let finished = row(None, None, Some(Checkpoint::ShardEnd));
        assert!(
            matches!(plan_step(&live, &alive, true, false), Step::Refuse { reason } if reason.contains("`a`"))
        );
        assert_eq!(plan_step(&live, &alive, true, true), Step::Move);
        assert_eq!(plan_step(&dead, &alive, false, false), Step::Move);
        assert_eq!(plan_step(&free, &alive, false, false), Step::Move);
        assert_eq!(plan_step(&handed, &alive, false, false), Step::Move);
        assert!(matches!(
            plan_step(&finished, &alive, true, false),
            Step::Refuse { .. }
        ));
        assert!(matches!(
            plan_step(&finished, &alive, false, false),
            Step::Skip { .. }
        ));
        assert_eq!(plan_step(&finished, &alive, false, true), Step::Move);
    }
}
