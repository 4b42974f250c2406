//! `LoadMeter`: one held shard's load, averaged over the last minute, from the running totals
//! of its settlement (records and bytes settled, handler time spent).
//!
//! Pure: the keeper reads the totals and the time at each renewal and publishes what this
//! returns on the row it writes anyway. The average over a window of [`WINDOW`] (the totals
//! now less the totals at the last reading a window ago): a shard that turns hot shows all of
//! it a minute later, one busy second moves the figure by a sixtieth of itself, and records
//! that settle in lumps (a batch flushing, producers shipping once a minute) read as their mean
//! whenever the window holds whole periods of them. The first minute of a new holding counts
//! what the shard cost its last holder (the load its row carried) for the part of the window
//! before the take, so a move does not make a hot shard look idle for a minute.
//!
//! Why a window and not an exponential average: with a time constant of a minute, the average
//! showed 63 % of a step after a minute and 78 % after 90 s, so a fleet could not see a shard
//! turning hot in time to place it within 90 s (the load simulation: 402 of 600 fleets within
//! 1.15x of the offline placement 90 s after the turn, most of the rest 10 to 20 % over it for
//! want of the step's last fifth). A window of a minute shows the whole step at a minute, and
//! reads three producers shipping once a minute as their mean at every reading, where the
//! exponential average swung by a fifth either side.

use std::collections::VecDeque;
use std::time::Duration;

use kinesis_lease_core::Load;

/// The window of the average: a step in a shard's load shows in proportion to the part of the
/// window since it (half after 30 s), all of it after this long.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// How far back [`LoadMeter::rising`] looks for a rise: two spans of this long, one after the
/// other.
pub(crate) const RECENT: Duration = Duration::from_secs(15);

/// How far above the window's average each of the two last [`RECENT`] spans must stand, in
/// handler time, for [`LoadMeter::rising`] to read a rise on the spans alone. Half, not a
/// quarter: records that settle in lumps every `p` seconds put at most one lump more in a span
/// of 15 s than its share, and two spans each half above their share would take four lumps in
/// 30 s, which lumps 10 s apart or more cannot make and lumps closer than that are too many to
/// lift a span by half (at a quarter, a batch flushing every 20 s read as a rise at half the
/// readings: a review's trace).
pub(crate) const RISE: f64 = 0.5;

/// How far above the window's average each of the two last [`RECENT`] spans must stand, in
/// handler time, for [`LoadMeter::rising`] to read a rise while the window's average of
/// records climbs (rises at every reading of the last [`RECENT`]). A shard
/// doubling (10 records a second to 20) never stands half again above its window, and one
/// turning from 1 to 20 does only until 36 s after the step, while the first still stands a
/// fifth above it 39 s after the step and the second 48 s after: exchanges decided 38 and 50 s
/// after such steps, on the window's figure, kept the giver at 1.15x the offline placement for
/// three minutes (load simulation seeds 1599 and 1648). Records that
/// settle in lumps may lift both spans this much (batches flushing every 17 to 25 s, three
/// shippers a minute: at a fifth to a half of the readings), but the window's average of
/// lumps moves only at the readings where a lump enters or leaves it, not at every one (that
/// it only never fell was not enough: lumps every 25 s, two or three in the window, then read
/// as a rise as one entered).
pub(crate) const CLIMB_RISE: f64 = 0.15;

/// How many standard deviations of chance (a Poisson count at the window's rate) each span's
/// records must stand above the window's for a rise.
pub(crate) const RISE_NOISE: f64 = 3.0;

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
    /// `(self + other * seconds) / over`, field by field: counts of a span plus `other`'s
    /// rates for `seconds` more, as rates over `over` seconds.
    fn with(self, other: Rates, seconds: f64, over: f64) -> Rates {
        Rates {
            records: (self.records + other.records * seconds) / over,
            bytes: (self.bytes + other.bytes * seconds) / over,
            busy: (self.busy + other.busy * seconds) / over,
        }
    }
}

/// One holding's averaged load.
#[derive(Debug)]
pub(crate) struct LoadMeter {
    /// The readings of the last window (when, since the holding began, and the totals then),
    /// the oldest first: the first is the last reading at least a window old, or the holding's
    /// start (zero totals at zero) while it is younger than a window. About twenty at a reading
    /// every renew interval.
    readings: VecDeque<(Duration, Totals)>,
    /// The load the row carried when it was taken, as rates: what counts for the part of the
    /// window before the holding began.
    prior: Option<Rates>,
    /// The rates at the last reading; `None` before the first when the row carried no load.
    rates: Option<Rates>,
    /// The window's average of records a second at each reading of the last [`RECENT`], and
    /// at the last reading before that: whether the average climbs ([`LoadMeter::rising`]).
    /// Records, not handler time: every record is counted, while handler time may be sampled
    /// (one call in 8), which would make a climbing average jitter.
    averages: VecDeque<(Duration, f64)>,
}

impl LoadMeter {
    /// A meter for a holding that began with its totals at zero, starting from `prior`, the
    /// load the row carried when it was taken, if any.
    pub(crate) fn new(prior: Option<&Load>) -> Self {
        let prior = prior.map(|load| Rates {
            records: load.records_per_min as f64 / 60.0,
            bytes: load.bytes_per_min as f64 / 60.0,
            busy: load.busy_ms_per_min as f64 / 60_000.0,
        });
        Self {
            readings: VecDeque::from([(Duration::ZERO, Totals::default())]),
            prior,
            rates: prior,
            averages: VecDeque::new(),
        }
    }

    /// Takes the totals read `at` (since the holding began) into the average; returns the
    /// load as it now stands. A reading no later than the last changes nothing.
    pub(crate) fn observe(&mut self, at: Duration, totals: Totals) -> Load {
        let last = self
            .readings
            .back()
            .map_or(Duration::ZERO, |(then, _)| *then);
        if at <= last {
            return self.load();
        }
        self.readings.push_back((at, totals));
        // Keep one reading at least a window old as the base, none older.
        keep_since(&mut self.readings, at, WINDOW);
        let (then, base) = self.readings[0];
        let span = (at - then).as_secs_f64();
        let counted = Rates {
            records: totals.records.saturating_sub(base.records) as f64,
            bytes: totals.bytes.saturating_sub(base.bytes) as f64,
            busy: totals.busy.saturating_sub(base.busy).as_secs_f64(),
        };
        let window = WINDOW.as_secs_f64();
        let rates = match self.prior {
            // Younger than a window: the rest of it at what the last holder measured.
            Some(prior) if span < window => counted.with(prior, window - span, window),
            _ => counted.with(Rates::default(), 0.0, span),
        };
        self.rates = Some(rates);
        self.averages.push_back((at, rates.records));
        keep_since(&mut self.averages, at, RECENT);
        self.load()
    }

    /// The load at the rate of the last [`RECENT`], when it and the span before it each stand
    /// well above the window's average, [`RISE_NOISE`] deviations of chance in records and in
    /// handler time either [`RISE`] above it or [`CLIMB_RISE`] while the window's average of
    /// records climbs (it rose at every reading of the last [`RECENT`]): a shard
    /// turning hot, which the window shows in part until a minute after the step (half of it
    /// after 30 s). A step from 1 record a second to 21 reads as a rise from about 24 s after
    /// it to about 48 s, one from 10 to 20 from 27 s to 39 s (past that, a Poisson count at the
    /// window's rate could reach what the spans hold); with each second's records a Poisson
    /// count and handler time timed one call in 8, most such steps read as a rise at some
    /// reading. Records settling in lumps of one period (a batch flushing, producers shipping
    /// once a minute) do not read as a rise: they lift no span by half, and where they lift
    /// both by less, the window's average moves only as a lump enters or leaves it
    /// (`lumps_of_settlement_do_not_read_as_a_rise`); a step under lumps still reads as one
    /// on the first test (`a_step_under_lumps_reads_as_a_rise`). Lumps at random times may,
    /// now and then, for a reading or two. `None` otherwise, and before two spans of readings.
    /// Only the instance's own planner reads it, and only to hold back exchanges that would
    /// keep such a shard (`Shared::rising_shards`): an exchange decided on a figure still
    /// climbing took back shards the giver then kept three minutes above the bound (load
    /// simulation seeds 772, 1599 and 1648). The row carries the window's average.
    pub(crate) fn rising(&self) -> Option<Load> {
        let window = self.rates?;
        let rise = match self.climbing() {
            true => CLIMB_RISE,
            false => RISE,
        };
        let (last, totals) = *self.readings.back()?;
        let at_or_before = |t: Duration| {
            self.readings
                .iter()
                .rev()
                .find(|(then, _)| *then <= t)
                .copied()
        };
        let middle = at_or_before(last.checked_sub(RECENT)?)?;
        let first = at_or_before(middle.0.checked_sub(RECENT)?)?;
        let span = |(from, a): (Duration, Totals), (to, b): (Duration, Totals)| {
            let secs = (to - from).as_secs_f64();
            (secs > 0.0).then(|| Rates {
                records: b.records.saturating_sub(a.records) as f64 / secs,
                bytes: b.bytes.saturating_sub(a.bytes) as f64 / secs,
                busy: b.busy.saturating_sub(a.busy).as_secs_f64() / secs,
            })
        };
        let older = span(first, middle)?;
        let recent = span(middle, (last, totals))?;
        let risen = |rates: Rates, secs: f64| {
            let expected = window.records * secs;
            rates.busy > window.busy * (1.0 + rise)
                && rates.records * secs - expected > RISE_NOISE * expected.max(1.0).sqrt()
        };
        let secs = |(a, _): (Duration, Totals), (b, _): (Duration, Totals)| (b - a).as_secs_f64();
        (risen(older, secs(first, middle)) && risen(recent, secs(middle, (last, totals)))).then(
            || {
                Load::new(
                    (recent.records * 60.0).round() as u64,
                    (recent.bytes * 60.0).round() as u64,
                    (recent.busy * 60_000.0).round() as u64,
                )
            },
        )
    }

    /// Whether the window's average of records rose at every reading of the last [`RECENT`]
    /// (readings spanning at least that long).
    fn climbing(&self) -> bool {
        let span = match (self.averages.front(), self.averages.back()) {
            (Some((first, _)), Some((last, _))) => last.saturating_sub(*first),
            _ => return false,
        };
        span >= RECENT
            && self
                .averages
                .iter()
                .zip(self.averages.iter().skip(1))
                .all(|((_, before), (_, after))| after > before)
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

/// Drops the oldest of `timed` (each `(when, what)`, the oldest first) while the one after it
/// is at least `span` before `at`: the last entry at least `span` old stays, none older.
fn keep_since<T>(timed: &mut VecDeque<(Duration, T)>, at: Duration, span: Duration) {
    while timed
        .get(1)
        .is_some_and(|(then, _)| at.saturating_sub(*then) >= span)
    {
        timed.pop_front();
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
    fn a_shard_turning_hot_shows_half_of_it_in_half_a_minute_and_all_of_it_in_one() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 1, 10);
        // From 60 to 1,260 records a minute.
        let half = run(&mut meter, &mut at, 30, 21, 10);
        assert_eq!(half.records_per_min, 660, "after 30 s: {half:?}");
        let minute = run(&mut meter, &mut at, 30, 21, 10);
        assert_eq!(minute.records_per_min, 1_260, "after a minute: {minute:?}");
    }

    /// Five minutes of `before` records a second, then 75 s of `after`, each costing
    /// `busy_ms`: the seconds after the step at which a reading reads a rise, and the rise's
    /// records a minute.
    fn rises_after_step(before: u64, after: u64, busy_ms: u64) -> Vec<(u64, u64)> {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, before, busy_ms);
        assert_eq!(meter.rising(), None, "steady");
        (3..=75)
            .step_by(3)
            .filter_map(|since| {
                run(&mut meter, &mut at, 3, after, busy_ms);
                meter.rising().map(|rise| (since, rise.records_per_min))
            })
            .collect()
    }

    #[test]
    fn a_shard_turning_hot_reads_as_rising_until_its_average_shows_most_of_the_step() {
        // From 60 to 1,260 records a minute: one span of 15 s after the step is not two; from
        // 24 s, the rate of the last 15 s; past 48 s the average shows enough of the step.
        let seen = rises_after_step(1, 21, 10);
        let seconds: Vec<u64> = seen.iter().map(|(since, _)| *since).collect();
        assert_eq!(seconds, (24..=48).step_by(3).collect::<Vec<_>>());
        assert!(
            seen.iter().all(|(_, records)| *records == 1_260),
            "{seen:?}"
        );
    }

    #[test]
    fn a_shard_doubling_reads_as_rising_while_its_average_lags_the_step() {
        // Load simulation seed 1599: a shard from 10 records a second to 20; an exchange 38 s
        // after the step, on the window's figure (18 % below), kept the giver at 1.15x the
        // offline placement.
        let seconds: Vec<u64> = rises_after_step(10, 20, 17)
            .iter()
            .map(|(since, _)| *since)
            .collect();
        assert_eq!(seconds, (27..=39).step_by(3).collect::<Vec<_>>());
    }

    #[test]
    fn a_step_under_lumps_reads_as_a_rise() {
        // From 1 record a second to 21, settled in lumps every `period` seconds: the window's
        // average stands still between lumps, so the step reads as a rise on the spans alone
        // (half again above), between 18 and 48 s after it.
        for period in [4.0, 5.0, 7.0, 10.0] {
            for phase in [0.3, 1.1, 2.2] {
                let rate = |t: f64| if t < 300.0 { 1.0 } else { 21.0 };
                let events: Vec<(f64, u64, f64)> = (0..)
                    .map(|n| phase + n as f64 * period)
                    .take_while(|t| *t < 400.0)
                    .map(|t| {
                        let records = (rate(t) * period) as u64;
                        (t, records, 0.01 * records as f64)
                    })
                    .collect();
                let mut seen = Vec::new();
                feed_each(&mut LoadMeter::new(None), &events, 400, |at, _, meter| {
                    if at > 120 && meter.rising().is_some() {
                        seen.push(at);
                    }
                });
                assert!(
                    !seen.is_empty() && seen.iter().all(|at| (318..=348).contains(at)),
                    "every {period} s at {phase}: read as a rise at {seen:?}"
                );
            }
        }
    }

    #[test]
    fn a_doubling_of_chance_arrivals_timed_one_call_in_eight_reads_as_a_rise() {
        // Each second's records a Poisson count, 10 a second and then 20, each record 17 ms of
        // handler time but only one call in 8 timed (8 times its time), as dispatch samples a
        // handler: in 83 of 100 runs some reading between 24 and 51 s after the step reads a rise,
        // and none before the step.
        let mut rng = StdRng::seed_from_u64(7);
        let mut runs_seen = 0;
        for _ in 0..100 {
            let mut meter = LoadMeter::new(None);
            let mut totals = Totals::default();
            let mut seen = false;
            for second in 1..=360u64 {
                let rate = if second <= 300 { 10.0 } else { 20.0 };
                let records = Poisson::new(rate)
                    .expect("a positive rate")
                    .sample(&mut rng) as u64;
                totals.records += records;
                for _ in 0..records {
                    if rng.random_range(0..8) == 0 {
                        totals.busy += Duration::from_millis(8 * 17);
                    }
                }
                if second % RENEW.as_secs() == 0 {
                    meter.observe(Duration::from_secs(second), totals);
                    let rising = meter.rising().is_some();
                    assert!(
                        !rising || second > 300,
                        "a rise before the step, at {second} s"
                    );
                    seen |= rising && (324..=351).contains(&second);
                }
            }
            runs_seen += usize::from(seen);
        }
        assert!(
            runs_seen >= 75,
            "{runs_seen} of 100 runs read the doubling as a rise"
        );
    }

    #[test]
    fn chance_in_arrivals_does_not_read_as_a_rise() {
        // Each second's records a Poisson count (independent producers), one a second to 40,
        // for an hour each, 10 ms a record: no reading sees a rise.
        let mut rng = StdRng::seed_from_u64(11);
        for rate in [1.0, 2.0, 5.0, 10.0, 40.0] {
            let poisson = Poisson::new(rate).expect("a positive rate");
            let mut meter = LoadMeter::new(None);
            let mut totals = Totals::default();
            let mut rises = 0;
            for second in 1..=3_600u64 {
                let records = poisson.sample(&mut rng) as u64;
                totals.records += records;
                totals.busy += Duration::from_millis(10 * records);
                if second % RENEW.as_secs() == 0 {
                    meter.observe(Duration::from_secs(second), totals);
                    rises += usize::from(second > 120 && meter.rising().is_some());
                }
            }
            assert_eq!(rises, 0, "{rate} a second");
        }
    }

    #[test]
    fn lumps_of_settlement_do_not_read_as_a_rise() {
        // Lumps of 20 records a second's worth every `period` seconds (a batch handler
        // flushing, a producer shipping now and then), at three phases, and three producers
        // shipping 400 records each once a minute, 8 s apart: no reading after the first two
        // minutes sees a rise.
        type Settled = Vec<(f64, u64, f64)>;
        let mut shapes: Vec<(String, Settled)> = Vec::new();
        for period in [
            2.0, 5.0, 7.0, 9.0, 10.0, 12.0, 14.0, 17.0, 20.0, 25.0, 30.0, 45.0, 60.0,
        ] {
            for phase in [0.3, 1.1, 2.2] {
                let events = (0..)
                    .map(|n| phase + n as f64 * period)
                    .take_while(|t| *t < 3_600.0)
                    .map(|t| (t, (20.0 * period) as u64, 0.2 * period))
                    .collect();
                shapes.push((format!("every {period} s at {phase}"), events));
            }
        }
        shapes.push((
            "three shippers a minute".to_owned(),
            (0..60)
                .flat_map(|minute| {
                    [0.5, 8.5, 16.5].map(|offset| (minute as f64 * 60.0 + offset, 400, 4.0))
                })
                .collect(),
        ));
        for (shape, events) in shapes {
            feed_each(&mut LoadMeter::new(None), &events, 3_600, |at, _, meter| {
                assert!(
                    at <= 120 || meter.rising().is_none(),
                    "{shape}: a rise at {at} s"
                );
            });
        }
    }

    #[test]
    fn one_busy_interval_does_not_make_a_shard_hot() {
        let mut meter = LoadMeter::new(None);
        let mut at = (Duration::ZERO, Totals::default());
        run(&mut meter, &mut at, 300, 1, 10);
        let spike = run(&mut meter, &mut at, 3, 100, 10);
        assert!(
            spike.records_per_min <= 60 + 99 * 3,
            "3 s at 100x moves a minute's average by a twentieth of the step: {spike:?}"
        );
    }

    /// Feeds `meter` one reading every renew interval up to `until` (seconds since the holding
    /// began) of the settlements `events` (when, records, handler seconds), sorted; returns each
    /// reading's handler milliseconds a minute.
    fn feed(meter: &mut LoadMeter, events: &[(f64, u64, f64)], until: u64) -> Vec<(u64, u64)> {
        let mut readings = Vec::new();
        feed_each(meter, events, until, |at, load, _| {
            readings.push((at, load.busy_ms_per_min))
        });
        readings
    }

    /// As [`feed`], calling `each` with every reading's time, load and meter.
    fn feed_each(
        meter: &mut LoadMeter,
        events: &[(f64, u64, f64)],
        until: u64,
        mut each: impl FnMut(u64, Load, &LoadMeter),
    ) {
        let mut totals = Totals::default();
        let mut next = events.iter().peekable();
        for at in (RENEW.as_secs()..=until).step_by(RENEW.as_secs() as usize) {
            while let Some((_, records, busy)) = next.next_if(|(t, _, _)| *t <= at as f64) {
                totals.records += records;
                totals.bytes += records * 500;
                totals.busy += Duration::from_secs_f64(*busy);
            }
            let load = meter.observe(Duration::from_secs(at), totals);
            each(at, load, meter);
        }
    }

    /// The least and the most a fresh meter fed an hour of `events` reads from 600 s on, over
    /// `truth` (handler milliseconds a minute).
    fn spread(events: &[(f64, u64, f64)], truth: f64) -> (f64, f64) {
        feed(&mut LoadMeter::new(None), events, 3_600)
            .iter()
            .filter(|(at, _)| *at >= 600)
            .map(|(_, busy)| *busy as f64 / truth)
            .fold((f64::MAX, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    }

    #[test]
    fn lumps_of_settlement_move_the_figure_by_less_than_their_size() {
        // A shard at 20 % of a handler (12,000 ms a minute) whose records settle in lumps
        // every `period` seconds (a batch handler flushing, a producer shipping once a while):
        // the average reads within 0.75 to 1.5 times the truth up to lumps a minute apart (a
        // window holds one or two lumps 45 s apart). (A step detector on 24 s of readings,
        // tried for issue 32, read the three shippers below from 0 to 2.2 times the truth, the
        // exponential average before the window from 0.67 to 1.36: docs/leases.md.)
        for period in [2.0, 5.0, 9.0, 12.0, 17.0, 25.0, 30.0, 45.0, 60.0] {
            for phase in [0.3, 1.1, 2.2] {
                let events: Vec<(f64, u64, f64)> = (0..)
                    .map(|n| phase + n as f64 * period)
                    .take_while(|t| *t < 3_600.0)
                    .map(|t| (t, (20.0 * period) as u64, 0.2 * period))
                    .collect();
                let (lo, hi) = spread(&events, 12_000.0);
                assert!(
                    lo >= 0.74 && hi <= 1.51,
                    "every {period} s: {lo:.2} to {hi:.2} times the truth"
                );
            }
        }
        // Three producers shipping 400 records each once a minute, 8 s apart: their mean at
        // every reading.
        let events: Vec<(f64, u64, f64)> = (0..60)
            .flat_map(|minute| {
                [0.5, 8.5, 16.5].map(|offset| (minute as f64 * 60.0 + offset, 400, 4.0))
            })
            .collect();
        let (lo, hi) = spread(&events, 12_000.0);
        assert!(
            lo >= 0.97 && hi <= 1.03,
            "three shippers a minute: {lo:.2} to {hi:.2} times the truth"
        );
    }

    #[test]
    fn noise_in_arrivals_keeps_the_figure_near_the_mean() {
        // Each second's records a Poisson count (independent producers), from one record in
        // ten seconds to 40 a second, for an hour each, 10 ms a record: within a quarter of the
        // mean (and 300 ms a minute) from the fifth minute on.
        let mut rng = StdRng::seed_from_u64(7);
        for rate in [0.1, 0.3, 1.0, 2.0, 3.0, 5.0, 10.0, 40.0] {
            let poisson = Poisson::new(rate).expect("a positive rate");
            let events: Vec<(f64, u64, f64)> = (1..=3_600u64)
                .map(|second| {
                    let records = poisson.sample(&mut rng) as u64;
                    (second as f64, records, records as f64 * 0.01)
                })
                .collect();
            let mean = rate * 600.0;
            for (at, busy) in feed(&mut LoadMeter::new(None), &events, 3_600) {
                assert!(
                    at < 300 || (busy as f64 - mean).abs() <= mean * 0.25 + 300.0,
                    "{rate} a second: {busy} handler ms a minute at {at} s"
                );
            }
        }
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
