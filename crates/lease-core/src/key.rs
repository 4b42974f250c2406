//! `LeaseKey`: which row of the lease table belongs to which shard.
//!
//! One lease table may serve many streams, so a row is keyed by the stream *and* the shard,
//! written `stream:shard`. Kinesis stream names may not contain `:`, so the first `:` splits the
//! key without ambiguity; shard ids (`shardId-000000000001`) never contain one either.

use std::fmt;
use std::str::FromStr;

use crate::LeaseError;

/// The key of one lease row: a stream name and a shard id, shown and stored as `stream:shard`.
///
/// # Examples
///
/// ```
/// use kinesis_lease_core::LeaseKey;
///
/// let key = LeaseKey::new("orders", "shardId-000000000001")?;
/// assert_eq!(key.to_string(), "orders:shardId-000000000001");
/// assert_eq!("orders:shardId-000000000001".parse::<LeaseKey>()?, key);
/// # Ok::<(), kinesis_lease_core::LeaseError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    stream: String,
    shard: String,
}

impl LeaseKey {
    /// Builds a key from a stream name and a shard id.
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidKey`] when either part is empty or the stream name contains `:`.
    pub fn new(stream: impl Into<String>, shard: impl Into<String>) -> Result<Self, LeaseError> {
        let (stream, shard) = (stream.into(), shard.into());
        let invalid = |reason| LeaseError::InvalidKey {
            input: format!("{stream}:{shard}"),
            reason,
        };
        if stream.is_empty() {
            return Err(invalid("the stream name is empty"));
        }
        if shard.is_empty() {
            return Err(invalid("the shard id is empty"));
        }
        if stream.contains(':') {
            return Err(invalid("the stream name contains `:`"));
        }
        Ok(Self { stream, shard })
    }

    /// The stream name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The shard id.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// The key of `owner`'s member row for `stream` (see [`LeaseKey::members_stream`]): the row
    /// an instance renews to say it is alive, and the row an operator's evict and a hand-over
    /// request poke (see [`LeaseStore::poke`](crate::LeaseStore::poke)).
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidKey`] when the stream name or the owner id is empty, or the stream
    /// name contains `:`.
    pub fn member(stream: &str, owner: &str) -> Result<Self, LeaseError> {
        Self::new(Self::members_stream(stream), owner)
    }

    /// The pseudo-stream holding `stream`'s member rows, `<stream>@members`. `@` is never part
    /// of a stream name, so it cannot collide with a stream.
    pub fn members_stream(stream: &str) -> String {
        format!("{stream}{MEMBERS}")
    }

    /// The stream whose member rows `members_stream` holds, when it is such a pseudo-stream
    /// (the inverse of [`LeaseKey::members_stream`]).
    pub fn roster_of(members_stream: &str) -> Option<&str> {
        members_stream
            .strip_suffix(MEMBERS)
            .filter(|stream| !stream.is_empty())
    }
}

/// The suffix of a stream's member rows' pseudo-stream.
const MEMBERS: &str = "@members";

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.stream, self.shard)
    }
}

impl FromStr for LeaseKey {
    type Err = LeaseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((stream, shard)) => LeaseKey::new(stream, shard),
            None => Err(LeaseError::InvalidKey {
                input: s.to_owned(),
                reason: "expected `stream:shard`",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_rejects_empty_parts() {
        for bad in ["", ":", "orders:", ":shardId-1", "orders"] {
            let err = bad.parse::<LeaseKey>().unwrap_err();
            assert!(matches!(err, LeaseError::InvalidKey { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn shard_part_keeps_everything_after_the_first_colon() {
        let key: LeaseKey = "s:a:b".parse().unwrap();
        assert_eq!((key.stream(), key.shard()), ("s", "a:b"));
    }

    #[test]
    fn a_members_stream_names_its_stream() {
        let members = LeaseKey::members_stream("orders");
        assert_eq!(LeaseKey::roster_of(&members), Some("orders"));
        assert_eq!(LeaseKey::roster_of("orders"), None);
        assert_eq!(LeaseKey::roster_of("@members"), None);
    }

    #[test]
    fn display_round_trips() {
        let key = LeaseKey::new("a", "b").unwrap();
        assert_eq!(key.to_string().parse::<LeaseKey>().unwrap(), key);
    }
}
