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
