//! Fault injection into a `MemoryStream`: throttle or fail the next calls of an operation,
//! answer an operation late (a latency model), expire every iterator, and count calls.

use std::time::Duration;

use kinesis_stream_core::ReaderError;

use crate::op::{op_name, Op};
use crate::state::State;
use crate::MemoryStream;

impl MemoryStream {
    /// Makes the next `n` calls of `op` fail with [`ReaderError::Throttled`].
    pub fn throttle_next(&self, op: Op, n: u32) {
        *self.state().throttle.entry(op).or_default() += n;
    }

    /// Makes the next `n` calls of `op` fail with [`ReaderError::Transient`] (a 500).
    pub fn fail_next(&self, op: Op, n: u32) {
        *self.state().fail.entry(op).or_default() += n;
    }

    /// Makes every later call of `op` take `latency` before Kinesis acts on it (tokio time: a
    /// paused clock runs through it at once), as a network round trip and the service's own
    /// work would; `Duration::ZERO` answers at once again. A call waits outside the stream's
    /// lock, so slow calls of one reader do not hold up another's.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use kinesis_stream_memory::{MemoryStream, Op};
    ///
    /// let kinesis = MemoryStream::new();
    /// kinesis.set_latency(Op::GetRecords, Duration::from_millis(30));
    /// assert_eq!(kinesis.latency(Op::GetRecords), Duration::from_millis(30));
    /// ```
    pub fn set_latency(&self, op: Op, latency: Duration) {
        let mut state = self.state();
        if latency.is_zero() {
            state.latency.remove(&op);
        } else {
            state.latency.insert(op, latency);
        }
    }

    /// The latency [`set_latency`](Self::set_latency) gave `op` (zero by default).
    pub fn latency(&self, op: Op) -> Duration {
        self.state().latency.get(&op).copied().unwrap_or_default()
    }

    /// Waits out `op`'s latency, if it has one.
    pub(crate) async fn answer_late(&self, op: Op) {
        let latency = self.latency(op);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// Drops every pending injected fault (throttles and failures not yet consumed; latencies
    /// stay).
    pub fn clear_faults(&self) {
        let mut state = self.state();
        state.throttle.clear();
        state.fail.clear();
    }

    /// Expires every iterator handed out so far.
    pub fn expire_iterators(&self) {
        self.state().iterator_generation += 1;
    }

    /// How many calls of `op` were made (faulted ones included).
    pub fn calls(&self, op: Op) -> u64 {
        self.state().calls.get(&op).copied().unwrap_or(0)
    }

    /// Counts the call and applies an injected fault, if any is pending.
    pub(crate) fn enter(
        &self,
        state: &mut State,
        op: Op,
        resource: &str,
    ) -> Result<(), ReaderError> {
        *state.calls.entry(op).or_default() += 1;
        let name = op_name(op);
        if let Some(n) = state.throttle.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReaderError::Throttled {
                operation: name,
                resource: resource.to_owned(),
            });
        }
        if let Some(n) = state.fail.get_mut(&op).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReaderError::Transient {
                operation: name,
                resource: resource.to_owned(),
                source: "injected failure (HTTP 500)".into(),
            });
        }
        Ok(())
    }
}
