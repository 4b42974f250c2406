//! `Refusal`: the position Kinesis refuses to read a shard at, kept where `stats()` and the
//! metrics see it.
//!
//! A stored position can be wrong: an operator's `reset` to a sequence number of another
//! shard, an import from another stream's KCL table, a bug. Kinesis then refuses every
//! GetShardIterator (or subscription) there, and the reader retries it after a pause for as
//! long as it holds the shard: the lease is renewed, so no other instance takes the shard, and
//! nothing is read. Such a shard must never stall silently: while Kinesis refuses, the reader
//! keeps the refusal here (the position and Kinesis' reason) and logs it at `error` once, and
//! the first read that succeeds clears it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use kinesis_stream_core::StartAt;

/// The refusal of one held shard's position, if Kinesis refuses it now.
#[derive(Debug, Default)]
pub struct Refusal {
    /// Set while a refusal is kept: the read path checks this flag alone.
    refused: AtomicBool,
    /// The position being opened, and the refusal's text.
    state: Mutex<(Option<String>, Option<String>)>,
}

impl Refusal {
    /// The reader opens (or subscribes) at `position` next.
    pub(crate) fn opening(&self, position: &StartAt) {
        self.lock().0 = Some(position_text(position));
    }

    /// Kinesis refused the reader's call for good: keeps `reason`, with the position being
    /// opened when the call was one that opens the shard there (`at_position`; a refused
    /// GetRecords, say for a KMS key or an IAM policy, is not about the position). True the
    /// first time (the caller logs it then).
    pub(crate) fn refused(&self, reason: String, at_position: bool) -> bool {
        let mut state = self.lock();
        let text = match &state.0 {
            Some(position) if at_position => format!("at {position}: {reason}"),
            _ => reason,
        };
        let first = state.1.is_none();
        state.1 = Some(text);
        self.refused.store(true, Ordering::Release);
        first
    }

    /// A read succeeded: the position is readable.
    pub(crate) fn cleared(&self) {
        if self.refused.swap(false, Ordering::AcqRel) {
            self.lock().1 = None;
        }
    }

    /// True while Kinesis refuses the shard's position.
    pub fn is_refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// The refusal, while Kinesis refuses: the position and Kinesis' reason.
    pub fn text(&self) -> Option<String> {
        if !self.is_refused() {
            return None;
        }
        self.lock().1.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<String>, Option<String>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A start position as Kinesis names it (`AFTER_SEQUENCE_NUMBER 4959...`).
fn position_text(position: &StartAt) -> String {
    match position {
        StartAt::TrimHorizon => "TRIM_HORIZON".to_owned(),
        StartAt::Latest => "LATEST".to_owned(),
        StartAt::AtTimestamp(time) => {
            format!("AT_TIMESTAMP {} ms", kinesis_stream_core::millis_of(time))
        }
        StartAt::AtSequence(seq) => format!("AT_SEQUENCE_NUMBER {}", seq.number()),
        StartAt::AfterSequence(seq) => format!("AFTER_SEQUENCE_NUMBER {}", seq.number()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinesis_lease_core::SequenceNumber;

    #[test]
    fn a_refusal_is_kept_with_its_position_until_a_read_succeeds() {
        let refusal = Refusal::default();
        assert_eq!(refusal.text(), None);
        let seq = SequenceNumber::new("42", None).unwrap();
        refusal.opening(&StartAt::AfterSequence(seq));
        assert!(
            refusal.refused("Kinesis refused GetShardIterator".into(), true),
            "first"
        );
        assert!(
            !refusal.refused("Kinesis refused GetShardIterator".into(), true),
            "logged once"
        );
        assert_eq!(
            refusal.text().as_deref(),
            Some("at AFTER_SEQUENCE_NUMBER 42: Kinesis refused GetShardIterator")
        );
        refusal.cleared();
        assert_eq!(refusal.text(), None);
        assert!(!refusal.is_refused());
        assert!(
            refusal.refused("AccessDenied".into(), false),
            "a new refusal is logged again"
        );
        assert_eq!(
            refusal.text().as_deref(),
            Some("AccessDenied"),
            "not about the position"
        );
    }
}
