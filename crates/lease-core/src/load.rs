//! [`Load`]: what reading a shard costs, or what an instance carries, as its row publishes it.
//!
//! A fair share by count puts two hot shards on one instance as readily as two idle ones. To
//! compare instances by what they carry, each keeper publishes its shard's smoothed load on
//! the writes its row already gets (a renewal, or a checkpoint's write when idle rows are
//! written only then), and each instance publishes its total and its capacity on its member
//! row's renewal: nothing is written or read for it that was not written or read anyway.
//!
//! Whole numbers per minute, not floating-point rates per second: a row is compared for
//! equality, and a shard at one record every ten seconds still reads 6, not 0.

/// A smoothed load: per minute, records and payload bytes handled, and handler time spent.
///
/// On a shard's row it is that shard's; on a member row, the sum over the shards the instance
/// holds, with its [`capacity`](Self::capacity_milli).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Load {
    /// Records handled (settled) per minute.
    pub records_per_min: u64,
    /// Payload bytes handled per minute.
    pub bytes_per_min: u64,
    /// Milliseconds per minute that handlers spent on the records: 60,000 is one handler
    /// busy all the time. Of the three, the better proxy for what handling costs the service.
    pub busy_ms_per_min: u64,
    /// On a member row, the instance's capacity in thousandths of the default: 1,000 for an
    /// instance like the others, 2,000 for one that takes twice the load. `None` on a shard's
    /// row (and on a member row written by a release before loads).
    pub capacity_milli: Option<u64>,
    /// On a member row, how many shards the instance holds; `None` on a shard's row.
    pub shards: Option<u64>,
    /// On a member row, how many of the row's pokes ([`Lease::pokes`](crate::Lease::pokes))
    /// its instance had acted on when it wrote this load: a row poked more often than that
    /// has a hand-over on its way in that the load does not show yet, and a member balancing
    /// by load does not give it another meanwhile. `None` on a shard's row, and on a member
    /// row written by a release before it.
    pub pokes_seen: Option<u64>,
}

impl Load {
    /// The capacity of an instance that sets none: 1,000 thousandths.
    pub const DEFAULT_CAPACITY_MILLI: u64 = 1_000;

    /// A shard's load: records, payload bytes and handler milliseconds per minute, no
    /// capacity.
    pub fn new(records_per_min: u64, bytes_per_min: u64, busy_ms_per_min: u64) -> Load {
        Load {
            records_per_min,
            bytes_per_min,
            busy_ms_per_min,
            capacity_milli: None,
            shards: None,
            pokes_seen: None,
        }
    }

    /// The same load as a shard's: without a capacity or a count of shards.
    pub fn without_capacity(mut self) -> Load {
        self.capacity_milli = None;
        self.shards = None;
        self.pokes_seen = None;
        self
    }

    /// The sum of `loads` (records, bytes and handler time), with no capacity, and the count
    /// of loads summed as its count of shards.
    pub fn sum<'a>(loads: impl IntoIterator<Item = &'a Load>) -> Load {
        loads.into_iter().fold(
            Load {
                shards: Some(0),
                ..Load::default()
            },
            |total, load| Load {
                records_per_min: total.records_per_min.saturating_add(load.records_per_min),
                bytes_per_min: total.bytes_per_min.saturating_add(load.bytes_per_min),
                busy_ms_per_min: total.busy_ms_per_min.saturating_add(load.busy_ms_per_min),
                capacity_milli: None,
                shards: total.shards.map(|n| n + 1),
                pokes_seen: None,
            },
        )
    }

    /// The same load with `capacity_milli` as its capacity.
    pub fn with_capacity(mut self, capacity_milli: u64) -> Load {
        self.capacity_milli = Some(capacity_milli);
        self
    }

    /// Handler time as a share of one handler busy all the time (0.5: half a handler).
    pub fn busy_share(&self) -> f64 {
        self.busy_ms_per_min as f64 / 60_000.0
    }

    /// Records handled per second.
    pub fn records_per_sec(&self) -> f64 {
        self.records_per_min as f64 / 60.0
    }

    /// Payload bytes handled per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes_per_min as f64 / 60.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_adds_each_measure_and_carries_no_capacity() {
        let a = Load::new(600, 60_000, 30_000);
        let b = Load::new(6, 600, 300).with_capacity(2_000);
        let total = Load::sum([&a, &b]);
        assert_eq!(
            (
                total.records_per_min,
                total.bytes_per_min,
                total.busy_ms_per_min
            ),
            (606, 60_600, 30_300)
        );
        assert_eq!((total.capacity_milli, total.shards), (None, Some(2)));
        assert_eq!(Load::sum([]).shards, Some(0), "an instance holding nothing");
        assert_eq!(total.without_capacity().shards, None);
        assert_eq!(total.with_capacity(1_500).capacity_milli, Some(1_500));
        assert!((a.busy_share() - 0.5).abs() < 1e-9);
        assert!((a.records_per_sec() - 10.0).abs() < 1e-9);
        assert!((a.bytes_per_sec() - 1_000.0).abs() < 1e-9);
    }
}
