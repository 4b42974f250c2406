//! `LoadMeter`: one held shard's load, smoothed over two minutes (a rise to 1.75 times or more
//! shows in full within about 25 s), from the running totals of its settlement (records and
//! bytes settled, handler time spent).
//!
//! Pure: the keeper reads the totals and the time at each renewal and publishes what this
//! returns on the row it writes anyway. An exponentially weighted average with a time
//! constant of [`WINDOW`]: one busy second does not make a shard hot, and noise in a shard's
//! arrivals moves it little (members compared on noisy figures trade shards for nothing). The
//! first reading of a new holding starts from the load its row carried (what the shard cost
//! its last holder), so a move does not make a hot shard look idle; a holding whose row
//! carried none weighs its readings alike until they span the window.
//!
//! Such an average alone shows a shard that turns hot at 53 % after 90 s: too slow to place it
//! within 90 s. So the meter also looks for a **step up**: the last [`STEP_HOLD`] of readings,
//! cut in [`STEP_PARTS`] parts, each part's rate more than [`STEP_RATIO`] times the average as
//! it stood at their start (and by more than a floor), each part settling at least
//! [`STEP_RECORDS`] records. Then the figure jumps to the parts' median and averages on from
//! there. Every part must be high, not their sum: a shard whose records settle in lumps (a
//! batch handler flushing every minute, a call blocked for a while) has a part without its
//! lump, or lumps too far apart to fill three parts, whatever their period. A step **down**
//! is looked for the same way only within [`PROBATION`] of a step up, so that the backlog a
//! new holder catches up after a long takeover, found as a step up, does not linger; past
//! it a fall is averaged over the window (a shard between lumps looks idle for a while, which
//! is not a fall). The unit tests below pin each case; the simulation's figures for the
//! choice are in `docs/leases.md`, "Balancing by load".

use std::collections::VecDeque;
use std::time::Duration;

use kinesis_lease_core::Load;

/// The time constant of the smoothing: a change the meter finds no step in shows 63 % of
/// itself after this long, 95 % after three times it.
pub(crate) const WINDOW: Duration = Duration::from_secs(120);

/// How far back the readings looked at for a step reach.
pub(crate) const STEP_HOLD: Duration = Duration::from_secs(24);

/// How many consecutive parts of [`STEP_HOLD`] must each show the step.
pub(crate) const STEP_PARTS: u32 = 3;

/// How many times above (or below) the average each part's rate must stand to be a step.
pub(crate) const STEP_RATIO: f64 = 1.75;

/// The fewest records each part must settle for a step up: below that, the sampled handler
/// time (one call in 8 timed) is too coarse to tell a step from chance.
pub(crate) const STEP_RECORDS: u64 = 24;

/// How long after a step up a step down is looked for.
pub(crate) const PROBATION: Duration = Duration::from_secs(60);

/// A step in handler time must exceed this (handler seconds a second: 1 % of a handler).
const BUSY_FLOOR: f64 = 0.01;

/// A step in records (looked at when handler time is below [`BUSY_FLOOR`]) must exceed this,
/// a second.
const RECORDS_FLOOR: f64 = 1.0;

/// Readings closer together than this are kept once (the keeper may read twice in a tick).
const READING_GAP: Duration = Duration::from_secs(1);

/// What the settlement counted so far (running totals, never reset while the shard is held).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    /// Records settled.
    pub(crate) records: u64,
    /// Payload bytes settled.
    pub(crate) bytes: u64,
    /// Handler time spent on the shard's records.
    pub(crate) busy: Duration,
}

/// Per-second rates of records, bytes and handler seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Rates {
    records: f64,
    bytes: f64,
    busy: f64,
}

impl Rates {
    /// The rates from the totals `from` to those `to`, over `secs` (positive).
    fn between(from: &Totals, to: &Totals, secs: f64) -> Rates {
        Rates {
            records: to.records.saturating_sub(from.records) as f64 / secs,
            bytes: to.bytes.saturating_sub(from.bytes) as f64 / secs,
            busy: to.busy.saturating_sub(from.busy).as_secs_f64() / secs,
        }
    }

    /// These rates moved toward `now` by `weight` (0 stays, 1 becomes `now`).
    fn toward(self, now: Rates, weight: f64) -> Rates {
        Rates {
            records: self.records + weight * (now.records - self.records),
            bytes: self.bytes + weight * (now.bytes - self.bytes),
            busy: self.busy + weight * (now.busy - self.busy),
        }
    }
}

/// One reading kept for finding steps: when, the totals then and the average after it.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Duration,
    totals: Totals,
    rates: Rates,
}

/// One holding's smoothed load.
#[derive(Debug)]
pub(crate) struct LoadMeter {
    /// The last reading: when (since the holding began) and the totals then.
    last: (Duration, Totals),
    /// The smoothed rates; `None` before the first reading when the row carried no load.
    rates: Option<Rates>,
    /// Whether the row carried no load when the holding began and no step was found since:
    /// the average is of this holding's readings only.
    measured_only: bool,
    /// The readings of the last [`STEP_HOLD`] and the one before them, at least
    /// [`READING_GAP`] apart: at most a few dozen.
    recent: VecDeque<Reading>,
    /// When the last step up was found, while a step down is looked for ([`PROBATION`]).
    stepped_up: Option<Duration>,
}

impl LoadMeter {
    /// A meter for a holding that began with its totals at zero, starting from `prior`, the
    /// load the row carried when it was taken, if any.
    pub(crate) fn new(prior: Option<&Load>) -> Self {
        let rates = prior.map(|load| Rates {
            records: load.records_per_min as f64 / 60.0,
            bytes: load.bytes_per_min as f64 / 60.0,
            busy: load.busy_ms_per_min as f64 / 60_000.0,
        });
        Self {
            last: (Duration::ZERO, Totals::default()),
            rates,
            measured_only: prior.is_none(),
            recent: rates
                .map(|rates| Reading {
                    at: Duration::ZERO,
                    totals: Totals::default(),
                    rates,
                })
                .into_iter()
                .collect(),
            stepped_up: None,
        }
    }

    /// Takes the totals read `at` (since the holding began) into the average; returns the
    /// load as it now stands. A reading no later than the last changes nothing.
    pub(crate) fn observe(&mut self, at: Duration, totals: Totals) -> Load {
        let (then, before) = self.last;
        if let Some(dt) = at.checked_sub(then).filter(|dt| !dt.is_zero()) {
            let secs = dt.as_secs_f64();
            let now = Rates::between(&before, &totals, secs);
            // A holding whose row carried no load averages all its readings alike until they
            // span the window (each new one weighs at least its share of the time so far): its
            // first seconds are not a noisy first reading that fades over minutes.
            let mut weight = 1.0 - (-secs / WINDOW.as_secs_f64()).exp();
            if self.measured_only {
                weight = weight.max(secs / at.as_secs_f64());
            }
            let rates = self.rates.map_or(now, |old| old.toward(now, weight));
            self.rates = Some(rates);
            self.last = (at, totals);
            if self
                .recent
                .back()
                .is_none_or(|last| at >= last.at + READING_GAP)
            {
                self.recent.push_back(Reading { at, totals, rates });
            }
            while self
                .recent
                .get(1)
                .is_some_and(|second| second.at + STEP_HOLD <= at)
            {
                self.recent.pop_front();
            }
            if let Some(stepped) = self.step(at, &totals) {
                self.rates = Some(stepped);
                self.measured_only = false;
                self.recent.clear();
                self.recent.push_back(Reading {
                    at,
                    totals,
                    rates: stepped,
                });
            }
        }
        self.load()
    }

    /// The rates to jump to when the readings kept show a step (the median of the parts'),
    /// noting a step up.
    fn step(&mut self, at: Duration, totals: &Totals) -> Option<Rates> {
        let first = *self.recent.front()?;
        let start = at
            .checked_sub(STEP_HOLD)
            .filter(|start| first.at <= *start)?;
        // The parts' bounds: the first reading, the last reading at or before each cut, now.
        let mut bounds = vec![(first.at, first.totals)];
        for part in 1..STEP_PARTS {
            let cut = start + STEP_HOLD * part / STEP_PARTS;
            let reading = self.recent.iter().rev().find(|r| r.at <= cut)?;
            bounds.push((reading.at, reading.totals));
        }
        bounds.push((at, *totals));
        let mut parts = Vec::with_capacity(STEP_PARTS as usize);
        for pair in bounds.windows(2) {
            let ((from_at, from), (to_at, to)) = (pair[0], pair[1]);
            // A reading spanning a cut (a frozen process) leaves a part empty: no step.
            let secs = to_at.checked_sub(from_at).filter(|d| !d.is_zero())?;
            let records = to.records.saturating_sub(from.records);
            parts.push((Rates::between(&from, &to, secs.as_secs_f64()), records));
        }
        let slow = first.rates;
        let by_busy = parts
            .iter()
            .map(|(rates, _)| rates.busy)
            .fold(slow.busy, f64::max)
            > BUSY_FLOOR;
        let (of, floor): (fn(&Rates) -> f64, f64) = if by_busy {
            (|r| r.busy, BUSY_FLOOR)
        } else {
            (|r| r.records, RECORDS_FLOOR)
        };
        let up = parts.iter().all(|(rates, records)| {
            of(rates) - of(&slow) > floor
                && of(rates) > STEP_RATIO * of(&slow)
                && *records >= STEP_RECORDS
        });
        let down = self.stepped_up.is_some_and(|up| at <= up + PROBATION)
            && parts.iter().all(|(rates, _)| {
                of(&slow) - of(rates) > floor && of(rates) * STEP_RATIO < of(&slow)
            });
        if !up && !down {
            return None;
        }
        self.stepped_up = up.then_some(at);
        let median = |field: fn(&Rates) -> f64| {
            let mut values: Vec<f64> = parts.iter().map(|(rates, _)| field(rates)).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        Some(Rates {
            records: median(|r| r.records),
            bytes: median(|r| r.bytes),
            busy: median(|r| r.busy),
        })
    }

    /// The load as it stands (zero before any reading, when the row carried none).
    pub(crate) fn load(&self) -> Load {
        let rates = self.rates.unwrap_or_default();
        Load::new(
            (rates.records * 60.0).round() as u64,
            (rates.bytes * 60.0).round() as u64,
            (rates.busy * 60_000.0).round() as u64,
        )
    }
}

/// True when `now` differs from the load the row shows (`written`) by enough that a row written
/// only when its checkpoint moves (quiet idle shards) should be written for it: handler time or
/// records by more than a quarter of the larger figure and more than a floor (600 ms or 60
/// records a minute: 1 % of a handler, one record a second). A shard that turns idle is so
/// written a few times as its average falls (about ten from a busy handler to nothing), then
/// no more.
pub(crate) fn drifted(written: Option<&Load>, now: &Load) -> bool {
    let written = written.copied().unwrap_or_default();
    let apart = |a: u64, b: u64, floor: u64| {
        let gap = a.abs_diff(b);
        gap > floor && gap * 4 > a.max(b)
    };
    apart(written.busy_ms_per_min, now.busy_ms_per_min, 600)
        || apart(written.records_per_min, now.records_per_min, 60)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Poisson};

    use super::*;

    const RENEW: Duration = Duration::from_secs(3);

    /// Readings every renew interval of a shard settling `records` a second of 500 bytes,
    /// each costing `busy_ms` of handler time, for `secs` seconds from `start`.
    fn run(
        meter: &mut LoadMeter,
        start: &mut (Duration, Totals),
        secs: u64,
        records: u64,
        busy_ms: u64,
    ) -> Load {
        let mut load = meter.load();
        for _ in 0..secs / RENEW.as_secs() {
            start.0 += RENEW;
            start.1.records += records * RENEW.as_secs();
            start.1.bytes += records * RENEW.as_secs() * 500;
            start.1.busy += Duration::from_millis(busy_ms * records * RENEW.as_secs());
            load = meter.observe(start.0, start.1);
        }
        load
    }

    /// A fresh meter's load after `steady.0` seconds at `steady.1` records a second, then
    /// `then.0` seconds at `then.1`, each record costing `busy_ms`.
    fn changed(steady: (u64, u64), then: (u64, u64), busy_ms: u64) -> Load {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, steady.0, steady.1, busy_ms);
        run(&mut meter, &mut at, then.0, then.1, busy_ms)
    }

    #[test]
    fn a_steady_shard_reads_its_rates_from_the_first_reading() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        let load = run(&mut meter, &mut at, 3, 10, 20);
        assert_eq!(
            (
                load.records_per_min,
                load.bytes_per_min,
                load.busy_ms_per_min
            ),
            (600, 300_000, 12_000),
            "10 records a second of 500 bytes and 20 ms each"
        );
        let load = run(&mut meter, &mut at, 300, 10, 20);
        assert_eq!(load.records_per_min, 600, "steady stays");
        assert_eq!(load.capacity_milli, None);
    }

    #[test]
    fn a_shard_turning_hot_shows_all_of_it_within_25_s() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 1, 10);
        // From 60 to 1,260 records a minute (600 to 12,600 handler ms).
        let early = run(&mut meter, &mut at, 15, 21, 10);
        assert!(
            early.records_per_min < 400,
            "no step before 24 s of it: {early:?}"
        );
        let found = run(&mut meter, &mut at, 12, 21, 10);
        assert!(
            (1_250..=1_270).contains(&found.records_per_min),
            "after 27 s, all of it: {found:?}"
        );
        let later = run(&mut meter, &mut at, 300, 21, 10);
        assert!(
            (1_250..=1_270).contains(&later.records_per_min),
            "and it stays: {later:?}"
        );
    }

    #[test]
    fn a_doubling_shows_within_25_s_and_less_is_averaged_over_the_window() {
        let doubled = changed((600, 10), (27, 20), 10);
        assert!(
            (1_190..=1_210).contains(&doubled.records_per_min),
            "from 600 to 1,200 records a minute, after 27 s: {doubled:?}"
        );
        let window = changed((600, 10), (WINDOW.as_secs(), 16), 10);
        // From 600 to 960 records a minute (1.6x): 63 % of the step after one window.
        assert!(
            (810..=850).contains(&window.records_per_min),
            "after a window: {window:?}"
        );
    }

    #[test]
    fn a_shard_turning_idle_is_averaged_over_the_window() {
        let window = changed((300, 20), (WINDOW.as_secs(), 1), 10);
        // From 12,000 to 600 handler ms a minute: 63 % of the fall after one window.
        assert!(
            (4_300..=4_900).contains(&window.busy_ms_per_min),
            "after a window: {window:?}"
        );
    }

    #[test]
    fn one_busy_interval_does_not_make_a_shard_hot() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 1, 10);
        let spike = run(&mut meter, &mut at, 3, 100, 10);
        assert!(
            spike.records_per_min < 60 * 4,
            "3 s at 100x moves the average by a fortieth of the step: {spike:?}"
        );
        let mut highest = spike.records_per_min;
        for _ in 0..20 {
            highest = highest.max(run(&mut meter, &mut at, 3, 1, 10).records_per_min);
        }
        assert_eq!(highest, spike.records_per_min, "no step after it");
    }

    /// An hour of Poisson arrivals at `rate` a second (independent producers), each record
    /// costing `cost` seconds, every call timed or (`sampled`) one in 8 counting 8 times over,
    /// as dispatch times handlers that never wait.
    fn poisson(rng: &mut StdRng, rate: f64, cost: f64, sampled: bool) -> Vec<(f64, u64, f64)> {
        let poisson = Poisson::new(rate).expect("a positive rate");
        (1..=3_600u64)
            .map(|second| {
                let records = poisson.sample(rng) as u64;
                let timed = if sampled {
                    (0..records).filter(|_| rng.random_ratio(1, 8)).count() as u64 * 8
                } else {
                    records
                };
                (second as f64, records, timed as f64 * cost)
            })
            .collect()
    }

    /// Feeds `meter` one reading every renew interval up to `until` (seconds since the holding
    /// began) of the settlements `events` (when, records, handler seconds), sorted; returns the
    /// steps up found and each reading's handler milliseconds a minute.
    fn feed(
        meter: &mut LoadMeter,
        events: &[(f64, u64, f64)],
        until: u64,
    ) -> (usize, Vec<(u64, u64)>) {
        let mut steps = 0;
        let mut stepped = None;
        let mut readings = Vec::new();
        let mut totals = Totals::default();
        let mut next = events.iter().peekable();
        for at in (RENEW.as_secs()..=until).step_by(RENEW.as_secs() as usize) {
            while let Some((_, records, busy)) = next.next_if(|(t, _, _)| *t <= at as f64) {
                totals.records += records;
                totals.bytes += records * 500;
                totals.busy += Duration::from_secs_f64(*busy);
            }
            let load = meter.observe(Duration::from_secs(at), totals);
            readings.push((at, load.busy_ms_per_min));
            if meter.stepped_up != stepped {
                steps += usize::from(meter.stepped_up.is_some());
                stepped = meter.stepped_up;
            }
        }
        (steps, readings)
    }

    #[test]
    fn noise_in_arrivals_never_makes_a_step() {
        // From one record in ten seconds to 40 a second, every call timed: never a step, and
        // the figure within a quarter of the mean (the average of a Poisson count of 60 a
        // minute has a standard deviation of 6.5 %).
        let mut rng = StdRng::seed_from_u64(7);
        for rate in [0.1, 0.3, 1.0, 2.0, 3.0, 5.0, 10.0, 40.0] {
            let events = poisson(&mut rng, rate, 0.01, false);
            let (steps, readings) = feed(&mut LoadMeter::new(None), &events, 3_600);
            assert_eq!(steps, 0, "{rate} a second");
            let mean = rate * 600.0;
            for (at, busy) in readings.into_iter().filter(|(at, _)| *at >= 300) {
                assert!(
                    (busy as f64 - mean).abs() <= mean * 0.25 + 300.0,
                    "{rate} a second: {busy} handler ms a minute at {at} s"
                );
            }
        }
        // Calls of 20 ms, one in 8 timed: a timed call counts 160 ms, so a shard of a record a
        // second reads from 0 to several times its mean in a few seconds. A step needs
        // STEP_RECORDS in each part: at most 2 steps up in these 8 hours (5 without).
        let mut steps = 0;
        for rate in [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0] {
            let events = poisson(&mut rng, rate, 0.02, true);
            steps += feed(&mut LoadMeter::new(None), &events, 3_600).0;
        }
        assert!(steps <= 2, "{steps} steps up in 8 hours of sampled noise");
    }

    #[test]
    fn lumps_of_settlement_never_make_a_step_whatever_their_period() {
        // A shard at 20 % of a handler whose records settle in lumps every `period` seconds (a
        // batch handler flushing, a call blocked and then done): never a step, and the figure
        // nearer the truth than the period's lump.
        for period in [2.0, 5.0, 9.0, 12.0, 17.0, 25.0, 30.0, 45.0, 60.0, 90.0] {
            for phase in [0.3, 1.1, 2.2] {
                let events: Vec<(f64, u64, f64)> = (0..)
                    .map(|n| phase + n as f64 * period)
                    .take_while(|t| *t < 3_600.0)
                    .map(|t| (t, (20.0 * period) as u64, 0.2 * period))
                    .collect();
                let mut meter = LoadMeter::new(None);
                let (_, readings) = feed(&mut meter, &events, 3_600);
                assert_eq!(meter.stepped_up, None, "every {period} s");
                assert!(meter.measured_only, "every {period} s: no step");
                for (at, busy) in readings.into_iter().filter(|(at, _)| *at >= 600) {
                    let off = busy as f64 / 12_000.0;
                    assert!(
                        (0.6..=1.5).contains(&off),
                        "every {period} s: {busy} handler ms a minute at {at} s"
                    );
                }
            }
        }
    }

    #[test]
    fn a_backlog_caught_up_after_a_take_is_undone_when_it_ends() {
        // The row carried 10 records a second at 30 ms each (18,000 handler ms a minute). A
        // backlog of 15 s (a crash's takeover) is caught up in 6 s: no step. One of 60 s takes
        // 26 s at full speed: a step up to it, then a step back down within the probation.
        for (backlog, steps) in [(15u64, false), (60, true)] {
            let prior = Load::new(600, 300_000, 18_000);
            let mut meter = LoadMeter::new(Some(&prior));
            let mut events = Vec::new();
            let mut pending = backlog * 10;
            for tenth in 1..=3_000u64 {
                pending += 1;
                let handled = pending.min(3);
                pending -= handled;
                events.push((tenth as f64 / 10.0, handled, handled as f64 * 0.03));
            }
            let (_, readings) = feed(&mut meter, &events, 300);
            let peak = readings.iter().map(|(_, busy)| *busy).max().unwrap_or(0);
            assert_eq!(
                peak > 40_000,
                steps,
                "backlog of {backlog} s: peak {peak} handler ms a minute"
            );
            let (_, at_two_minutes) = readings[39];
            assert!(
                (16_000..=21_000).contains(&at_two_minutes),
                "backlog of {backlog} s: {at_two_minutes} handler ms a minute at 120 s"
            );
        }
    }

    #[test]
    fn a_frozen_reading_makes_no_step() {
        // A process frozen for 15 s reads once over it: a part of the step's span holds no
        // reading of its own.
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 10, 30);
        at.0 += Duration::from_secs(15);
        at.1.records += 10 * 15 * 4;
        at.1.busy += Duration::from_millis(30 * 10 * 15 * 4);
        meter.observe(at.0, at.1);
        run(&mut meter, &mut at, 30, 10, 30);
        assert_eq!(meter.stepped_up, None);
    }

    #[test]
    fn a_new_holding_starts_from_the_load_its_row_carried() {
        let prior = Load::new(1_200, 600_000, 30_000);
        let mut meter = LoadMeter::new(Some(&prior));
        assert_eq!(meter.load(), prior, "before any reading");
        // The new holder's first seconds are slow (a cold start): the average barely moves.
        let mut at = (Duration::ZERO, Totals::default());
        let load = run(&mut meter, &mut at, 3, 0, 0);
        assert!(load.records_per_min > 1_100, "{load:?}");
    }

    #[test]
    fn a_quiet_row_is_written_for_its_load_a_few_times_as_it_turns_idle_then_never() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 10, 20);
        let mut written = Some(meter.load());
        assert!(!drifted(written.as_ref(), &meter.load()), "steady");
        let mut writes = 0;
        for _ in 0..200 {
            let now = run(&mut meter, &mut at, 3, 0, 0);
            if drifted(written.as_ref(), &now) {
                writes += 1;
                written = Some(now);
            }
        }
        assert!(
            (5..=15).contains(&writes),
            "{writes} writes from busy to idle"
        );
        assert!(written.unwrap().busy_ms_per_min <= 600, "{written:?}");
        let idle = meter.load();
        assert!(!drifted(written.as_ref(), &idle), "idle stays unwritten");
        assert!(
            !drifted(None, &Load::default()),
            "an idle row that never carried a load"
        );
        assert!(
            drifted(None, &Load::new(120, 0, 0)),
            "a load the row never showed"
        );
    }

    #[test]
    fn a_reading_no_later_than_the_last_changes_nothing() {
        let mut meter = LoadMeter::new(None);
        let totals = Totals {
            records: 30,
            bytes: 300,
            busy: Duration::from_millis(300),
        };
        let first = meter.observe(RENEW, totals);
        let again = meter.observe(
            RENEW,
            Totals {
                records: 90,
                ..totals
            },
        );
        assert_eq!(first, again);
        let earlier = meter.observe(Duration::from_secs(1), totals);
        assert_eq!(first, earlier);
    }
}
