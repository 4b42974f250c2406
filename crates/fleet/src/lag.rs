//! `processing_lag`: how far behind a shard's handling is (the age of its oldest record read
//! and not settled), one definition for `stats()` and the metrics.

use kinesis_dispatch::ShardSettlement;

/// The processing lag of a shard at `now_ms`: 0 with nothing unsettled, else the age of its
/// oldest unsettled record (`None` without an arrival time).
pub(crate) fn processing_lag(
    settlement: &ShardSettlement,
    unsettled: u64,
    now_ms: u64,
) -> Option<u64> {
    if unsettled == 0 {
        return Some(0);
    }
    let arrival = settlement.oldest_unsettled_arrival()?;
    let arrival_ms = arrival
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Some(now_ms.saturating_sub(arrival_ms))
}
