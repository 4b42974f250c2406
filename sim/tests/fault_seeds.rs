//! Fault seeds that campaigns failed, kept once what failed them is fixed: each must pass
//! every invariant. A failure prints the seed's replay command and history.

/// Seed 78028: an operator released a shard whose final hook (`ShardEnd`) was running, and the
/// hook's own keeper renewed twice while it ran (its writes delayed by a store fault): the
/// checker counted writes (at most one renewal and the move) and reported the hook as having
/// outlived its holding. It now asks whether the row stands as the operator's move from under
/// the hook's owner left it.
#[test]
fn a_final_hook_whose_row_an_operator_moved_while_its_keeper_renewed_twice_passes() {
    let report = kinesis_sim::run(78_028);
    assert!(report.passed(), "{}", report.failure(150));
}
