//! The import plan's rules, one test per rule.

use kinesis_lease_core::SequenceNumber;

use super::*;
use crate::KclRow;

const STREAM: &str = "orders";

fn shard(id: &str, parents: &[&str]) -> Shard {
    let mut shard = Shard::new(id, (0, u128::MAX));
    shard.parent = parents.first().map(|p| (*p).to_owned());
    shard.adjacent_parent = parents.get(1).map(|p| (*p).to_owned());
    shard
}

fn kcl(id: &str, checkpoint: &str, sub: u64) -> KclLease {
    KclLease {
        shard: id.to_owned(),
        row: KclRow {
            checkpoint: Some(checkpoint.to_owned()),
            checkpoint_subsequence: sub,
            owner: Some("kcl-worker".into()),
            ..KclRow::lease(id, 9)
        },
    }
}

fn ours(id: &str, checkpoint: Option<Checkpoint>, holder: Option<&str>) -> Lease {
    let mut row =
        Lease::new(LeaseKey::new(STREAM, id).unwrap(), Vec::new()).starting_at(checkpoint);
    row.counter = 4;
    if let Some(holder) = holder {
        row.owner = Some(holder.to_owned());
        row.token = Some("t1".to_owned());
    }
    row
}

fn at(n: &str, sub: Option<u64>) -> Checkpoint {
    Checkpoint::Sequence(SequenceNumber::new(n, sub).unwrap())
}

fn only(steps: Vec<Step>, id: &str) -> Step {
    steps
        .into_iter()
        .find(|s| s.shard == id)
        .expect("a step of the shard")
}

#[test]
fn missing_rows_are_created_at_the_mapped_checkpoint_with_parents() {
    let listed = [
        shard("s-0", &[]),
        shard("s-1", &["s-0"]),
        shard("s-2", &[]),
        shard("s-3", &[]),
    ];
    let mut child = kcl("s-1", "120", 4);
    child.row.parents = vec!["s-0".into()];
    let leases = [
        kcl("s-0", "SHARD_END", 0),
        child,
        kcl("s-2", "TRIM_HORIZON", 0),
        kcl("s-3", "LATEST", 0),
    ];
    let steps = plan(STREAM, &leases, &listed, &[], None, false).unwrap();
    let created: Vec<(String, Option<Checkpoint>, Vec<String>)> = steps
        .iter()
        .map(|s| match &s.action {
            Action::Create(row) => (
                row.key.shard().to_owned(),
                row.checkpoint.clone(),
                row.parents.clone(),
            ),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        created,
        [
            ("s-0".into(), Some(Checkpoint::ShardEnd), vec![]),
            (
                "s-1".into(),
                Some(at("120", Some(4))),
                vec!["s-0".to_owned()]
            ),
            ("s-2".into(), Some(Checkpoint::TrimHorizon), vec![]),
            ("s-3".into(), Some(Checkpoint::Latest), vec![]),
        ]
    );
    assert_eq!(steps[1].kcl.as_deref(), Some("120/4"));
    assert_eq!(steps[1].after.as_deref(), Some("120/4"));
    assert!(steps.iter().all(|s| s.before.is_none()));
}

#[test]
fn parents_come_from_the_listing_when_the_kcl_stored_none() {
    let listed = [shard("s-0", &[]), shard("s-5", &["s-0", "s-1"])];
    let steps = plan(
        STREAM,
        &[kcl("s-0", "SHARD_END", 0), kcl("s-5", "7", 0)],
        &listed,
        &[],
        None,
        false,
    )
    .unwrap();
    match &only(steps, "s-5").action {
        Action::Create(row) => assert_eq!(row.parents, ["s-0", "s-1"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rows_at_or_past_the_kcl_checkpoint_never_move_back() {
    let listed = [
        shard("s-0", &[]),
        shard("s-1", &[]),
        shard("s-2", &[]),
        shard("s-3", &[]),
    ];
    let leases = [
        kcl("s-0", "100", 3),
        kcl("s-1", "100", 3),
        kcl("s-2", "100", 3),
        kcl("s-3", "SHARD_END", 0),
    ];
    let rows = [
        ours("s-0", Some(at("100", Some(3))), None), // the import's own result: idempotent
        ours("s-1", Some(at("100", None)), Some("me")), // the whole record, held: past
        ours("s-2", Some(at("250", None)), None),
        ours("s-3", Some(Checkpoint::ShardEnd), None),
    ];
    let steps = plan(STREAM, &leases, &listed, &rows, None, false).unwrap();
    for step in &steps {
        assert_eq!(step.action, Action::Leave, "{step:?}");
        assert_eq!(step.before, step.after);
    }
}

#[test]
fn rows_behind_move_forward_fenced_and_held_ones_are_refused_unless_forced() {
    let listed = [shard("s-0", &[]), shard("s-1", &[]), shard("s-2", &[])];
    let leases = [
        kcl("s-0", "100", 3),
        kcl("s-1", "100", 3),
        kcl("s-2", "SHARD_END", 0),
    ];
    let rows = [
        ours("s-0", Some(at("100", Some(2))), None),
        ours("s-1", Some(Checkpoint::TrimHorizon), Some("broker-a")),
        ours("s-2", Some(at("5", None)), None),
    ];
    let steps = plan(STREAM, &leases, &listed, &rows, None, false).unwrap();
    assert_eq!(
        steps[0].action,
        Action::Advance {
            fence: 4,
            checkpoint: at("100", Some(3)),
            holder: None,
        }
    );
    assert_eq!(steps[1].action, Action::Refuse);
    assert!(steps[1].note.contains("broker-a"));
    assert_eq!(
        steps[2].action,
        Action::Advance {
            fence: 4,
            checkpoint: Checkpoint::ShardEnd,
            holder: None,
        }
    );
    let forced = plan(STREAM, &leases, &listed, &rows, None, true).unwrap();
    assert_eq!(
        forced[1].action,
        Action::Advance {
            fence: 4,
            checkpoint: at("100", Some(3)),
            holder: Some("broker-a".to_owned()),
        }
    );
}

#[test]
fn a_kcl_start_position_leaves_an_existing_row_alone() {
    let listed = [shard("s-0", &[]), shard("s-1", &[])];
    let leases = [kcl("s-0", "TRIM_HORIZON", 0), kcl("s-1", "LATEST", 0)];
    let rows = [
        ours("s-0", Some(Checkpoint::AtTimestamp(5)), None),
        ours("s-1", None, None),
    ];
    let steps = plan(STREAM, &leases, &listed, &rows, None, false).unwrap();
    assert!(steps.iter().all(|s| s.action == Action::Leave), "{steps:?}");
}

#[test]
fn pending_checkpoints_are_ignored_and_said_so() {
    let listed = [shard("s-0", &[])];
    let mut lease = kcl("s-0", "100", 0);
    lease.row.pending_checkpoint = Some("900".into());
    let steps = plan(STREAM, &[lease], &listed, &[], None, false).unwrap();
    match &steps[0].action {
        Action::Create(row) => assert_eq!(row.checkpoint, Some(at("100", Some(0)))),
        other => panic!("{other:?}"),
    }
    assert!(
        steps[0].note.contains("pending checkpoint 900/0 ignored"),
        "{}",
        steps[0].note
    );
}

#[test]
fn at_timestamp_needs_the_applications_time() {
    let listed = [shard("s-0", &[]), shard("s-1", &[])];
    let leases = [kcl("s-0", "1", 0), kcl("s-1", "AT_TIMESTAMP", 0)];
    let refused = plan(STREAM, &leases, &listed, &[], None, false).unwrap_err();
    assert_eq!(refused.shard, "s-1");
    let steps = plan(STREAM, &leases, &listed, &[], Some(1_700), false).unwrap();
    match &steps[1].action {
        Action::Create(row) => assert_eq!(row.checkpoint, Some(Checkpoint::AtTimestamp(1_700))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn trimmed_shards_are_skipped_and_unleased_ancestors_are_created_finished() {
    // g -> p -> c (leased); p2 is c's other parent, trimmed; n is a new child of c; o is
    // unrelated and unleased.
    let listed = [
        shard("g", &[]),
        shard("p", &["g"]),
        shard("c", &["p", "p2"]),
        shard("n", &["c"]),
        shard("o", &[]),
    ];
    let leases = [kcl("c", "77", 0), kcl("gone", "SHARD_END", 0)];
    let steps = plan(
        STREAM,
        &leases,
        &listed,
        &[ours("o", Some(Checkpoint::TrimHorizon), None)],
        None,
        false,
    )
    .unwrap();
    let by = |id: &str| only(steps.clone(), id);
    assert_eq!(by("gone").action, Action::Skip);
    for ancestor in ["g", "p"] {
        match &by(ancestor).action {
            Action::Create(row) => {
                assert_eq!(row.checkpoint, Some(Checkpoint::ShardEnd), "{ancestor}")
            }
            other => panic!("{ancestor}: {other:?}"),
        }
    }
    match &by("p").action {
        Action::Create(row) => assert_eq!(row.parents, ["g"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        by("n").action,
        Action::Leave,
        "a descendant is the brokers' to create"
    );
    assert_eq!(by("o").action, Action::Leave);
    assert!(by("n").after.is_none(), "no row is written for it");
}

#[test]
fn a_second_plan_over_the_first_ones_result_writes_nothing() {
    let listed = [shard("g", &[]), shard("c", &["g"])];
    let leases = [kcl("c", "77", 2)];
    let first = plan(STREAM, &leases, &listed, &[], None, false).unwrap();
    let written: Vec<Lease> = first
        .iter()
        .filter_map(|s| match &s.action {
            Action::Create(row) => Some(row.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(written.len(), 2);
    let second = plan(STREAM, &leases, &listed, &written, None, false).unwrap();
    assert!(second.iter().all(|s| !s.action.writes()), "{second:?}");
}

#[test]
fn verbs_read_as_plan_or_report() {
    let create = Action::Create(ours("s", None, None));
    assert_eq!(
        (create.verb(true), create.verb(false)),
        ("create", "created")
    );
    assert!(create.writes() && !Action::Leave.writes() && !Action::Refuse.writes());
}

/// A row an operator released or reset (`kinesis-broker release`, `reset`, or an earlier
/// import moving it forward) is in the operator's hold, which reads nothing: it moves forward
/// without --force, where a row an instance holds is refused.
#[test]
fn a_row_in_the_operators_hold_moves_forward_without_force() {
    let listed = [shard("s-0", &[])];
    let leases = [kcl("s-0", "100", 3)];
    let mut row = ours("s-0", Some(Checkpoint::TrimHorizon), Some("broker-a"));
    kinesis_lease_core::rules::evicted(&mut row, None);
    let steps = plan(STREAM, &leases, &listed, &[row], None, false).unwrap();
    assert_eq!(
        steps[0].action,
        Action::Advance {
            fence: 4,
            checkpoint: at("100", Some(3)),
            holder: None,
        }
    );
    assert!(!steps[0].note.contains("forced"), "{}", steps[0].note);
}

#[test]
fn children_of_a_trimmed_lease_the_kcl_was_reading_start_at_their_first_record() {
    // The KCL stopped inside 0 and 1; 0 split into 2 and 3 and then aged out of the stream.
    let listed = [
        shard("1", &[]),
        shard("2", &["0"]),
        shard("3", &["0"]),
        shard("5", &["4"]),
    ];
    // 4 aged out too, but the KCL had finished it: its child 5 has a lease of its own or is
    // the brokers' to create as any new shard.
    let leases = [
        kcl("0", "50", 0),
        kcl("1", "60", 0),
        kcl("4", "SHARD_END", 0),
    ];
    let steps = plan(STREAM, &leases, &listed, &[], None, false).unwrap();
    let by = |id: &str| only(steps.clone(), id);
    assert_eq!(by("0").action, Action::Skip, "trimmed");
    for child in ["2", "3"] {
        match &by(child).action {
            Action::Create(row) => {
                assert_eq!(row.checkpoint, Some(Checkpoint::TrimHorizon), "{child}");
                assert_eq!(row.parents, ["0"]);
            }
            other => panic!("{child}: {other:?}"),
        }
    }
    assert_eq!(by("5").action, Action::Leave);
    // A second plan over the result writes nothing.
    let rows: Vec<Lease> = steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Create(row) => Some(row.clone()),
            _ => None,
        })
        .collect();
    let again = plan(STREAM, &leases, &listed, &rows, None, false).unwrap();
    assert!(again.iter().all(|s| !s.action.writes()), "{again:?}");
}
