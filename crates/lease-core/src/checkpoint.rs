//! `Checkpoint`: how far a shard has been processed, and where a fresh shard starts.
//!
//! A checkpoint is either a real position (a Kinesis sequence number, with a subsequence for
//! records de-aggregated from one KPL record) or a sentinel: `SHARD_END` once a closed shard
//! has been read and settled to its end, or a start position (`TRIM_HORIZON`, `LATEST`,
//! `AT_TIMESTAMP`) for a row that has never been checkpointed. The stored form is one string
//! (plus the subsequence, which stores keep beside it).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::digits::Digits;
use crate::LeaseError;

/// A Kinesis sequence number, optionally with the subsequence of a de-aggregated KPL record.
///
/// Sequence numbers are decimal strings of up to 128 bits; they order numerically, which this
/// type's [`Ord`] does (leading zeros ignored), then by subsequence (none sorts first).
///
/// Cloning is cheap and allocates nothing for numbers of up to 62 digits (Kinesis's are 56):
/// readers and settlement copy sequence numbers on every record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SequenceNumber {
    number: Digits,
    subsequence: Option<u64>,
}

impl SequenceNumber {
    /// Builds a sequence number from its decimal digits.
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidCheckpoint`] when `number` is empty or not all ASCII digits.
    pub fn new(number: impl AsRef<str>, subsequence: Option<u64>) -> Result<Self, LeaseError> {
        let number = number.as_ref();
        match Digits::parse(number) {
            Some(number) => Ok(Self {
                number,
                subsequence,
            }),
            None => Err(LeaseError::InvalidCheckpoint {
                input: number.to_owned(),
                reason: "a sequence number is a non-empty string of decimal digits",
            }),
        }
    }

    /// The decimal digits, as Kinesis returned them.
    pub fn number(&self) -> &str {
        self.number.as_str()
    }

    /// The subsequence within an aggregated record, if any.
    pub fn subsequence(&self) -> Option<u64> {
        self.subsequence
    }

    /// The same sequence number with `subsequence` (a sub-record of this KPL aggregate).
    pub fn with_subsequence(&self, subsequence: Option<u64>) -> Self {
        Self {
            number: self.number.clone(),
            subsequence,
        }
    }

    fn significant(&self) -> &str {
        let trimmed = self.number().trim_start_matches('0');
        if trimmed.is_empty() {
            "0"
        } else {
            trimmed
        }
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.significant(), other.significant());
        a.len()
            .cmp(&b.len())
            .then_with(|| a.cmp(b))
            .then_with(|| self.subsequence.cmp(&other.subsequence))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.subsequence {
            Some(sub) => write!(f, "{}/{}", self.number(), sub),
            None => f.write_str(self.number()),
        }
    }
}

/// How far a shard has been processed (or where a never-processed shard starts).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Every record up to and including this one has settled.
    Sequence(SequenceNumber),
    /// A closed shard was read and settled to its end; its children may start.
    ShardEnd,
    /// Start at the oldest record still in the stream.
    TrimHorizon,
    /// Start at the tip: only records put after the reader opens its iterator.
    Latest,
    /// Start at the first record that arrived at or after this time (ms since the epoch).
    AtTimestamp(u64),
}

impl Checkpoint {
    /// The sentinel stored for [`Checkpoint::ShardEnd`].
    pub const SHARD_END: &'static str = "SHARD_END";
    /// The sentinel stored for [`Checkpoint::TrimHorizon`].
    pub const TRIM_HORIZON: &'static str = "TRIM_HORIZON";
    /// The sentinel stored for [`Checkpoint::Latest`].
    pub const LATEST: &'static str = "LATEST";
    /// The prefix stored for [`Checkpoint::AtTimestamp`], followed by the milliseconds.
    pub const AT_TIMESTAMP: &'static str = "AT_TIMESTAMP";

    /// A checkpoint at a sequence number without subsequence.
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidCheckpoint`] when `number` is not a decimal sequence number.
    pub fn sequence(number: impl AsRef<str>) -> Result<Self, LeaseError> {
        SequenceNumber::new(number, None).map(Checkpoint::Sequence)
    }

    /// The string stores keep (the subsequence is stored beside it, see
    /// [`Checkpoint::subsequence`]).
    pub fn stored(&self) -> String {
        match self {
            Checkpoint::Sequence(seq) => seq.number().to_owned(),
            Checkpoint::ShardEnd => Self::SHARD_END.to_owned(),
            Checkpoint::TrimHorizon => Self::TRIM_HORIZON.to_owned(),
            Checkpoint::Latest => Self::LATEST.to_owned(),
            Checkpoint::AtTimestamp(ms) => format!("{}:{ms}", Self::AT_TIMESTAMP),
        }
    }

    /// The subsequence a store keeps beside [`Checkpoint::stored`], if any.
    pub fn subsequence(&self) -> Option<u64> {
        match self {
            Checkpoint::Sequence(seq) => seq.subsequence(),
            _ => None,
        }
    }

    /// Rebuilds a checkpoint from its stored string and subsequence.
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidCheckpoint`] naming the input when it is neither a sentinel nor a
    /// sequence number.
    pub fn from_stored(stored: &str, subsequence: Option<u64>) -> Result<Self, LeaseError> {
        match stored {
            Self::SHARD_END => Ok(Checkpoint::ShardEnd),
            Self::TRIM_HORIZON => Ok(Checkpoint::TrimHorizon),
            Self::LATEST => Ok(Checkpoint::Latest),
            _ => {
                if let Some(ms) = stored
                    .strip_prefix(Self::AT_TIMESTAMP)
                    .and_then(|rest| rest.strip_prefix(':'))
                {
                    return ms.parse().map(Checkpoint::AtTimestamp).map_err(|_| {
                        LeaseError::InvalidCheckpoint {
                            input: stored.to_owned(),
                            reason: "AT_TIMESTAMP needs milliseconds since the epoch",
                        }
                    });
                }
                SequenceNumber::new(stored, subsequence).map(Checkpoint::Sequence)
            }
        }
    }

    /// True for the sentinels that only say where a fresh shard starts.
    pub fn is_start_position(&self) -> bool {
        matches!(
            self,
            Checkpoint::TrimHorizon | Checkpoint::Latest | Checkpoint::AtTimestamp(_)
        )
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::Sequence(seq) => seq.fmt(f),
            other => f.write_str(&other.stored()),
        }
    }
}

impl FromStr for Checkpoint {
    type Err = LeaseError;

    /// Parses the [`Display`](fmt::Display) form: a sentinel, or `number[/subsequence]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((number, sub)) => {
                let sub = sub.parse().map_err(|_| LeaseError::InvalidCheckpoint {
                    input: s.to_owned(),
                    reason: "the subsequence after `/` is not a number",
                })?;
                SequenceNumber::new(number, Some(sub)).map(Checkpoint::Sequence)
            }
            None => Checkpoint::from_stored(s, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: &str, sub: Option<u64>) -> SequenceNumber {
        SequenceNumber::new(n, sub).unwrap()
    }

    #[test]
    fn sequence_numbers_order_numerically() {
        assert!(seq("9", None) < seq("10", None));
        assert_eq!(seq("0010", None).cmp(&seq("10", None)), Ordering::Equal);
        assert!(seq("10", None) < seq("10", Some(0)));
        assert!(seq("10", Some(1)) < seq("10", Some(2)));
        assert!(
            seq(
                "49590338271490256608559692538361571095921575989136588898",
                None
            ) > seq(
                "4959033827149025660855969253836157109592157598913658889",
                None
            )
        );
    }

    #[test]
    fn stored_form_round_trips() {
        for cp in [
            Checkpoint::ShardEnd,
            Checkpoint::TrimHorizon,
            Checkpoint::Latest,
            Checkpoint::AtTimestamp(1_700_000_000_000),
            Checkpoint::Sequence(seq("123", Some(4))),
            Checkpoint::Sequence(seq("123", None)),
        ] {
            assert_eq!(
                Checkpoint::from_stored(&cp.stored(), cp.subsequence()).unwrap(),
                cp
            );
            assert_eq!(cp.to_string().parse::<Checkpoint>().unwrap(), cp);
        }
    }

    #[test]
    fn garbage_is_a_typed_error() {
        for bad in ["", "12a", "AT_TIMESTAMP:x", "1/x", "SHARD_ENDS"] {
            assert!(matches!(
                bad.parse::<Checkpoint>(),
                Err(LeaseError::InvalidCheckpoint { .. })
            ));
        }
    }
}
