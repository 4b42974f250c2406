//! Checks shown to fail on histories that break their rules (settlement, `SHARD_END`, the
//! order of checkpoint writes, parents first, loss) and to pass ones that keep them, and the
//! report's window: a checker is only as good as the bugs it catches.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::checks::{Checks, Violation};
use crate::events::{Event, Kind};
use crate::fired::Fired;
use crate::window::window;
use crate::writer::Put;

const PARENT: &str = "shardId-000000000000";
const CHILD: &str = "shardId-000000000008";
const S1: &str = "49680771137534649747445830373881049489836951356531802114";
const S2: &str = "49680771137534649747445830373881049489836951356531802130";

fn event(kind: Kind, shard: &str, sequence: &str, sub: Option<u64>, began: u128) -> Event {
    Event {
        process: "p0.1".to_owned(),
        kind,
        shard: shard.to_owned(),
        sequence: sequence.to_owned(),
        subsequence: sub,
        key: "k1".to_owned(),
        began,
        ended: began + 10,
    }
}

fn put(shard: &str, sequence: &str, sub: Option<u64>) -> Put {
    Put {
        shard: shard.to_owned(),
        sequence: sequence.to_owned(),
        subsequence: sub,
        key: "k1".to_owned(),
        at: 1_000,
    }
}

/// Runs every check over a history: the violations' texts.
fn check(
    events: &[Event],
    puts: &[Put],
    checkpoints: &[(u128, BTreeMap<String, String>)],
) -> Vec<String> {
    let parents = HashMap::from([(CHILD.to_owned(), vec![PARENT.to_owned()])]);
    let ordered: HashSet<String> = HashSet::from(["p0.1".to_owned()]);
    Checks {
        events,
        puts,
        fired: &[],
        ordered: &ordered,
        checkpoints,
        parents: &parents,
        start: 0,
    }
    .run()
    .into_iter()
    .map(|v| v.text)
    .collect()
}

#[test]
fn a_child_record_before_its_parents_last_breaks_parents_first() {
    let puts = [put(PARENT, S1, None), put(CHILD, S2, None)];
    let early = [
        event(Kind::Handled, CHILD, S2, None, 2_000),
        event(Kind::Handled, PARENT, S1, None, 2_500),
    ];
    let found = check(&early, &puts, &[]);
    assert!(
        found.iter().any(|v| v.starts_with("parents first")),
        "{found:?}"
    );
    let in_order = [
        event(Kind::Handled, PARENT, S1, None, 2_000),
        event(Kind::Handled, CHILD, S2, None, 2_500),
    ];
    assert_eq!(check(&in_order, &puts, &[]), Vec::<String>::new());
}

#[test]
fn a_failed_attempt_on_a_child_counts_as_a_handler_begun() {
    let puts = [put(PARENT, S1, None), put(CHILD, S2, None)];
    let events = [
        event(Kind::Failed, CHILD, S2, None, 1_500),
        event(Kind::Handled, PARENT, S1, None, 2_000),
        event(Kind::Handled, CHILD, S2, None, 2_500),
    ];
    let found = check(&events, &puts, &[]);
    assert!(
        found.iter().any(|v| v.starts_with("parents first")),
        "{found:?}"
    );
}

#[test]
fn a_sub_record_never_handled_is_lost() {
    let puts = [put(PARENT, S1, Some(0)), put(PARENT, S1, Some(1))];
    let events = [event(Kind::Handled, PARENT, S1, Some(0), 2_000)];
    let found = check(&events, &puts, &[]);
    assert!(
        found.iter().any(|v| v.starts_with("lost: 1 of 2")),
        "{found:?}"
    );
}

#[test]
fn a_checkpoint_past_a_sub_record_not_handled_is_before_settlement() {
    let puts = [put(PARENT, S1, Some(0)), put(PARENT, S1, Some(1))];
    let handled = event(Kind::Handled, PARENT, S1, Some(0), 2_000);
    let mut written = event(Kind::Checkpoint, PARENT, S1, Some(1), 2_100);
    written.key = "-".to_owned();
    let found = check(&[handled.clone(), written], &puts, &[]);
    assert!(
        found
            .iter()
            .any(|v| v.starts_with("checkpoint before settlement")),
        "{found:?}"
    );
    // Up to the handled sub-record only: settled.
    let mut written = event(Kind::Checkpoint, PARENT, S1, Some(0), 2_100);
    written.key = "-".to_owned();
    let found = check(&[handled, written], &puts, &[]);
    assert!(
        !found
            .iter()
            .any(|v| v.starts_with("checkpoint before settlement")),
        "{found:?}"
    );
}

#[test]
fn shard_end_before_every_record_was_handled_is_before_settlement() {
    let puts = [put(PARENT, S1, None), put(PARENT, S2, None)];
    let events = [
        event(Kind::Handled, PARENT, S1, None, 2_000),
        event(Kind::Checkpoint, PARENT, "SHARD_END", None, 2_100),
        event(Kind::Handled, PARENT, S2, None, 2_200),
    ];
    let found = check(&events, &puts, &[]);
    assert!(
        found
            .iter()
            .any(|v| v.starts_with("checkpoint before settlement")),
        "{found:?}"
    );
}

#[test]
fn a_checkpoint_after_shard_end_moved_back() {
    let snapshots = [
        (1_000, BTreeMap::from([(PARENT.to_owned(), S1.to_owned())])),
        (
            2_000,
            BTreeMap::from([(PARENT.to_owned(), "SHARD_END".to_owned())]),
        ),
        (3_000, BTreeMap::from([(PARENT.to_owned(), S2.to_owned())])),
    ];
    let found = check(&[], &[], &snapshots);
    assert!(
        found.iter().any(|v| v.starts_with("checkpoint moved back")),
        "{found:?}"
    );
}

#[test]
fn checkpoint_writes_are_checked_in_the_order_they_were_sent() {
    // Within one aggregate: `S1/1` then `S1/0` moved back; `S1/1` then `S1` (all of it) did not.
    let back = [
        event(Kind::Checkpoint, PARENT, S1, Some(1), 1_000),
        event(Kind::Checkpoint, PARENT, S1, Some(0), 1_100),
    ];
    let found = check(&back, &[], &[]);
    assert!(
        found.iter().any(|v| v.starts_with("checkpoint moved back")),
        "{found:?}"
    );
    let forward = [
        event(Kind::Checkpoint, PARENT, S1, Some(1), 1_000),
        event(Kind::Checkpoint, PARENT, S1, None, 1_100),
    ];
    assert_eq!(check(&forward, &[], &[]), Vec::<String>::new());
}

#[test]
fn the_window_shows_the_faults_before_and_the_shards_events_around() {
    let events = [
        event(Kind::Take, PARENT, "", None, 9_000),
        event(Kind::Handled, PARENT, S1, None, 10_000),
        event(Kind::Handled, CHILD, S2, None, 10_000),
        event(Kind::Handled, PARENT, S2, None, 30_000),
    ];
    let fired = [Fired::Killed {
        process: "p1.1".to_owned(),
        at: 1_000,
    }];
    let v = Violation {
        text: String::new(),
        shard: Some(PARENT.to_owned()),
        at: 10_000,
    };
    let lines = window(&v, &events, &fired, 0);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].contains("SIGKILL p1.1"), "{lines:?}");
    assert!(lines[1].contains("took"), "{lines:?}");
    assert!(
        lines[2].contains("handled") && lines[2].contains(PARENT),
        "{lines:?}"
    );
}
