//! The load simulation (`kinesis_sim::load`) replays a seed exactly: its moves, and so its
//! verdicts, follow from the seed alone.

#[test]
fn a_load_seed_replays_exactly() {
    let (first, second) = (
        kinesis_sim::load::run_load(1),
        kinesis_sim::load::run_load(1),
    );
    assert!(first.moves > 0, "nothing moved: {:?}", first.plan);
    assert_eq!(first.history, second.history);
    assert_eq!(first.digest, second.digest);
}

#[test]
fn a_bursty_load_seed_replays_exactly() {
    let bursty = || {
        kinesis_sim::load::run_plan(kinesis_sim::load::LoadPlan {
            bursty: true,
            ..kinesis_sim::load::LoadPlan::of(2)
        })
    };
    let (first, second) = (bursty(), bursty());
    let steady = kinesis_sim::load::run_load(2);
    assert!(first.moves > 0, "nothing moved: {:?}", first.plan);
    assert_eq!(first.history, second.history);
    assert_eq!(first.digest, second.digest);
    assert_ne!(
        first.puts, steady.puts,
        "bursty puts are drawn, not the rates"
    );
}

/// Steady seeds whose fleets settled within 1.15x of the offline placement only after 104 to
/// 245 s (2026-12-06): a giver chose its taker on a reading of it from before it took a hot
/// shard, or an exchange took back shards past the point where the pair would weigh alike; the
/// shards given then stayed where they went for three minutes (`load_plan::dwell`). Each must
/// now be within 1.15x from 90 s after the start and after the turn. Seeds 306 and 386
/// (2026-12-07): a giver gave its other shards to the one member where its hot shard alone fit,
/// a few seconds before the hot shard could go, which followed them (`load_plan::waits_for`).
/// Seed 319: an exchange took back two cold shards beside a warm one, best for the pair alone,
/// and the giver kept them three minutes (`load_plan::swap` now weighs where each side may
/// settle). Seed 280 (until 2026-12-07, settled after 232 s): the heaviest member exchanged
/// its shard of 10 a second with the one member whose shards the listing showed measured, and
/// kept the two warm ones it took back three minutes at 1.25x the offline placement; the
/// lighter members' shards, listed before they were measured, weighed nothing to an exchange
/// (`load_plan::with_unmeasured_shared`). Seed 721 (until 2026-12-07, settled after 232 s): a
/// member of twice the capacity holding the hot shard exchanged its shard of 10 a second with
/// a member whose warm shards it took back and kept three minutes at 1.20x the offline
/// placement, where an exchange with another member took back one cold shard
/// (`load_plan::takers` now draws among the exchanges whose pair settles lowest). Seed 772
/// (until 2026-12-07, 1.20x the offline placement from 999 s): 30 s after a shard of its own
/// turned hot (1 record a second to 20), a member exchanged shards of 5 and 4 a second for
/// cold ones, on a figure still climbing, and kept what it took back three minutes; it now
/// makes no exchange that keeps a shard turning hot (`LoadMeter::rising`).
///
/// Steady seeds 922, 1788, 2068 and 2202 (until 2026-12-07, 1.15x to 1.25x the offline
/// placement from 99 s, and from 999 s for 2202): a member of twice the capacity holding the
/// hot shard gave its second shard in an exchange and kept what it took back three minutes,
/// while lighter members had room for it. What an exchange takes back now goes on to such a
/// member (`load_plan::onward`).
///
/// Steady seeds 1599 and 1648 (until 2026-12-07, 1.15x the offline placement from 999 s): a
/// member exchanged 38 and 50 s after a shard of its own doubled (10 records a second to 20)
/// or turned hot (1 to 20), when the rise no longer showed at half again the window's average
/// (or never did). `LoadMeter::rising` now reads a rise at 15 % above it while the window's
/// average climbs at every reading.
#[test]
fn fleets_that_balanced_late_balance_within_90_s() {
    for seed in [
        20, 54, 116, 119, 239, 269, 306, 386, 319, 280, 721, 772, 922, 1599, 1648, 1788, 2068, 2202,
    ] {
        let report = kinesis_sim::load::run_load(seed);
        assert!(
            report.passed()
                && report
                    .settled
                    .iter()
                    .all(|s| *s <= kinesis_sim::load::CONVERGE),
            "load seed {seed}: settled after {:?} s, {:?}\n{}",
            report.settled,
            report.violations,
            report.history.join("\n")
        );
    }
}

/// Steady seeds where an exchange took back, or sent on to a third member, shards its taker had
/// been handed a minute before (until 2026-12-07, 2 to 3 such moves each: seed 23's shards 19
/// and 20, given at 947 s, taken back at 974 s by the member that gave them). A taker's keeper
/// hands over any row marked wanted, so the giver must leave out what was handed within the
/// dwell: a hand-over's token now carries its time (`roster::new_token_handed`), and such a
/// row stays.
#[test]
fn a_shard_handed_a_moment_ago_is_not_moved_again_within_the_dwell() {
    for seed in [23, 35, 158, 171] {
        let report = kinesis_sim::load::run_load(seed);
        assert!(
            report.passed() && report.moved_again == 0,
            "load seed {seed}: {} moves within {} s of the shard's last, {:?}\n{}",
            report.moved_again,
            kinesis_sim::load::DWELL,
            report.violations,
            report.history.join("\n")
        );
    }
}

/// Steady seeds where a member giving beside a heavier one (`load_plan::beside_heavier`), in
/// a first version that left the heavier one only the lightest member, gave its cold shards to
/// the member of twice the capacity where the heavier one's hot shard fitted best: they stayed
/// there three minutes, 1.20x the offline placement from 90 s (seed 26; 330, 366, 524 and 565
/// failed with that version too, 4 on balance and 1 on churn). It now leaves each heavier member the taker of its own best move, and the members
/// with the most room (`load_plan::left_to_heavier`).
#[test]
fn a_member_giving_beside_a_heavier_one_leaves_it_the_place_its_hot_shard_needs() {
    for seed in [26, 330, 366, 524, 565] {
        let report = kinesis_sim::load::run_load(seed);
        assert!(
            report.passed(),
            "load seed {seed}: settled after {:?} s, {:?}\n{}",
            report.settled,
            report.violations,
            report.history.join("\n")
        );
    }
}

/// A bursty seed (each second's puts a Poisson count) whose members traded shards in steady
/// state on chance alone: two shards of 20 records a second measured 5 % apart over a minute,
/// exchanged, then one of 4 for one of 3 (2026-12-07). An exchange must now clear three
/// standard deviations of the noise of the shards it trades (`load_plan::EXCHANGE_NOISE`).
#[test]
fn a_bursty_fleet_trades_no_shards_on_chance() {
    let report = kinesis_sim::load::run_plan(kinesis_sim::load::LoadPlan {
        bursty: true,
        ..kinesis_sim::load::LoadPlan::of(16)
    });
    assert!(
        report.passed(),
        "bursty load seed 16: {:?}\n{}",
        report.violations,
        report.history.join("\n")
    );
}
