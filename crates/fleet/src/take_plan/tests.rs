//! The take planner's rules on plain rows.

use super::*;
use kinesis_lease_core::{Checkpoint, LeaseKey};

const LEASE: Duration = Duration::from_secs(10);
const LIST: Duration = Duration::from_secs(2);

fn row(shard: &str, owner: Option<&str>, token: Option<&str>) -> Lease {
    let mut row = Lease::new(LeaseKey::new("s", shard).unwrap(), Vec::new());
    row.owner = owner.map(str::to_owned);
    row.token = token.map(str::to_owned);
    row
}

fn shards(n: usize, owner: impl Fn(usize) -> Option<&'static str>) -> Vec<Lease> {
    (0..n)
        .map(|i| {
            let owner = owner(i);
            row(&format!("shard-{i:02}"), owner, owner.map(|_| "t"))
        })
        .collect()
}

struct Fixture {
    still: BTreeMap<String, Duration>,
    held: BTreeSet<String>,
    pending: BTreeSet<String>,
    left: BTreeSet<String>,
    members: BTreeSet<String>,
    departed: BTreeSet<String>,
    stale: BTreeSet<String>,
    starting: bool,
}

impl Fixture {
    fn new(rows: &[Lease], still: Duration) -> Self {
        Self {
            still: rows
                .iter()
                .map(|r| (r.key.shard().to_owned(), still))
                .collect(),
            held: BTreeSet::new(),
            pending: BTreeSet::new(),
            left: BTreeSet::new(),
            members: BTreeSet::new(),
            departed: BTreeSet::new(),
            stale: BTreeSet::new(),
            starting: false,
        }
    }

    fn view<'a>(&'a self, me: &'a str) -> View<'a> {
        View {
            me,
            still: &self.still,
            held: &self.held,
            pending: &self.pending,
            lease: LEASE,
            first_round: false,
            left: &self.left,
            members: &self.members,
            departed: &self.departed,
            stale: &self.stale,
            list_interval: LIST,
            starting: self.starting,
        }
    }
}

fn names(plan: &Plan<'_>) -> Vec<(Rank, String)> {
    let mut names: Vec<(Rank, String)> = plan
        .candidates
        .iter()
        .map(|(rank, r)| (*rank, r.key.shard().to_owned()))
        .collect();
    names.sort();
    names
}

#[test]
fn a_lone_instance_may_take_every_free_row() {
    let rows = shards(4, |_| None);
    let fixture = Fixture::new(&rows, Duration::ZERO);
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!((plan.target, plan.room), (4, 4));
    assert_eq!(plan.candidates.len(), 4);
    assert!(plan.candidates.iter().all(|(rank, _)| *rank == Rank::Free));
    assert_eq!(plan.next_expiry, None);
}

#[test]
fn the_fair_share_counts_live_owners_and_rounds_up() {
    // 16 rows: b holds 10, c holds 6, both renewing; a holds none.
    let rows = shards(16, |i| Some(if i < 10 { "b" } else { "c" }));
    let fixture = Fixture::new(&rows, Duration::from_secs(1));
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(plan.target, 6, "16 over 3, rounded up");
    assert!(plan.candidates.is_empty(), "live rows are not taken");
    assert_eq!(plan.next_expiry, Some(Duration::from_secs(9)));
    let ask = ask(&plan.readable, &plan.live, "a", 0, plan.target).expect("ask b");
    assert_eq!((ask.owner, ask.holds, ask.open.len()), ("b", 10, 10));
}

#[test]
fn a_member_seen_standing_still_for_a_lease_does_not_count_in_the_share() {
    // Six rows over members a (this instance, 2 held) and b (2 rows, its member row still
    // for a lease, not buried yet); 2 rows free (left by a third that shut down).
    let rows: Vec<Lease> = (0..6)
        .map(|i| {
            let owner = [Some("a"), Some("a"), Some("b"), Some("b"), None, None][i];
            let token = owner.map(|_| "r1.t");
            row(&format!("shard-{i:02}"), owner, token)
        })
        .collect();
    let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
    fixture.held = ["shard-00", "shard-01"].map(String::from).into();
    fixture.members = ["a", "b"].map(String::from).into();
    let counted = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!((counted.target, counted.room), (3, 1), "b counted");
    fixture.stale = ["b"].map(String::from).into();
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!((plan.target, plan.room), (6, 4), "b not counted");
    assert_eq!(
        names(&plan),
        [
            (Rank::Free, "shard-04".into()),
            (Rank::Free, "shard-05".into())
        ],
        "the free rows, never b's: it is still a member"
    );
    // Holding nothing, a would ask b for a row while b counts, and not once it stood still.
    assert_eq!(
        ask(&counted.readable, &counted.live, "a", 0, counted.target).map(|a| a.owner),
        Some("b")
    );
    assert!(
        ask(&plan.readable, &plan.live, "a", 0, plan.target).is_none(),
        "a member standing still is not asked for a row"
    );
}

#[test]
fn an_operators_hold_is_neither_asked_for_a_row_nor_counted_as_an_owner() {
    // Five rows: three in the operator's hold (an evict, standing still for less than a
    // lease), two held by b; a holds none. Asking the hold marks its row wanted, a write
    // that restarts the hold, and nobody ever hands it over (seen in the simulation,
    // seed 50: a shard unread for 19 s).
    use kinesis_lease_core::rules::{EVICTED_OWNER, EVICTED_TOKEN};
    let rows: Vec<Lease> = (0..5)
        .map(|i| {
            let (owner, token) = if i < 3 {
                (EVICTED_OWNER, EVICTED_TOKEN)
            } else {
                ("b", "r1.t")
            };
            row(&format!("shard-{i:02}"), Some(owner), Some(token))
        })
        .collect();
    let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
    fixture.members = ["a", "b"].map(String::from).into();
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(plan.target, 3, "5 rows over a and b: the hold is no owner");
    assert!(plan.candidates.is_empty(), "the hold is not over yet");
    let asked = ask(&plan.readable, &plan.live, "a", 0, plan.target).map(|a| a.owner);
    assert_eq!(asked, Some("b"), "b is asked, never the operator's hold");
}

#[test]
fn a_row_expires_only_after_its_counter_stood_still_for_a_whole_lease() {
    let rows = shards(2, |_| Some("b"));
    let mut fixture = Fixture::new(&rows, LEASE - Duration::from_millis(1));
    let just_before = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(just_before.candidates.is_empty());
    assert_eq!(just_before.next_expiry, Some(Duration::from_millis(1)));
    fixture.still.insert("shard-00".into(), LEASE);
    let at = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(names(&at), vec![(Rank::Expired, "shard-00".to_owned())]);
    // A row never observed before is not expired: nothing is known of its counter.
    fixture.still.clear();
    let unseen = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(unseen.candidates.len(), 2);
    assert!(unseen.live.is_empty());
}

#[test]
fn rows_handed_to_me_come_first_and_past_the_fair_share() {
    let mut rows = shards(3, |_| None);
    rows.push(row("shard-03", Some("a"), None)); // handed over to a
    rows.push(row("shard-04", Some("b"), None)); // handed over to b, not taken yet
    let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
    fixture.held = ["shard-09".to_owned(), "shard-08".into(), "shard-07".into()]
        .into_iter()
        .collect();
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    // Five readable rows and no member but a: a's share is 5, and it holds 3 elsewhere.
    assert_eq!((plan.target, plan.room), (5, 2));
    assert_eq!(names(&plan)[0], (Rank::HandedToMe, "shard-03".to_owned()));
    assert!(
        !names(&plan).iter().any(|(_, s)| s == "shard-04"),
        "handed to b, which never had a member row (an earlier release): b's to take"
    );
    fixture.still.insert("shard-04".into(), LIST);
    let later = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(
        names(&later).contains(&(Rank::Expired, "shard-04".to_owned())),
        "not taken by b within a list interval: anyone's"
    );
    fixture.still.insert("shard-04".into(), Duration::ZERO);
    fixture.departed.insert("b".into());
    let left = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(
        names(&left).contains(&(Rank::Expired, "shard-04".to_owned())),
        "handed to b, which left the roster: taken at once"
    );
    fixture.members.insert("b".into());
    let member = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(
        !names(&member).iter().any(|(_, s)| s == "shard-04"),
        "handed to b, a member: b's to take"
    );
    fixture.stale.insert("b".into());
    let stale = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(
        names(&stale).contains(&(Rank::Expired, "shard-04".to_owned())),
        "handed to b, a member seen standing still for a lease: anyone's, though not buried"
    );
}

fn roster_rows(n: usize, owner: impl Fn(usize) -> Option<&'static str>) -> Vec<Lease> {
    let mut rows = shards(n, owner);
    for row in rows.iter_mut().filter(|r| r.token.is_some()) {
        row.token = Some(crate::roster::new_token());
    }
    rows
}

#[test]
fn under_the_roster_a_members_rows_never_expire_and_an_absent_owners_go_at_once() {
    let rows = roster_rows(4, |i| Some(if i < 2 { "b" } else { "c" }));
    // Standing still for ages says nothing: b and c are members.
    let mut fixture = Fixture::new(&rows, LEASE * 10);
    fixture.members = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(plan.candidates.is_empty());
    assert_eq!(plan.live.len(), 4);
    assert_eq!(plan.next_expiry, None, "no roster row expires by time");
    // c left the roster (its member row was taken or released): its rows go at once,
    // even seen for the first time.
    fixture.members.remove("c");
    fixture.still.clear();
    let plan = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(
        names(&plan),
        vec![
            (Rank::Expired, "shard-02".to_owned()),
            (Rank::Expired, "shard-03".to_owned())
        ]
    );
    assert_eq!(plan.target, 2, "4 rows over the members a and b");
}

#[test]
fn members_holding_nothing_count_in_the_fair_share() {
    let rows = roster_rows(12, |_| None);
    let mut fixture = Fixture::new(&rows, Duration::ZERO);
    fixture.members = ["a", "b", "c", "d"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let plan = plan(readable(&rows, |_| false), &fixture.view("b"));
    assert_eq!((plan.target, plan.room), (3, 3));
}

#[test]
fn rows_of_this_owner_id_not_read_here_are_taken_at_once_under_the_roster_only() {
    let mut rows = roster_rows(2, |_| Some("a"));
    let mut fixture = Fixture::new(&rows, Duration::ZERO);
    fixture.members = ["a".to_owned()].into_iter().collect();
    fixture.held.insert("shard-00".into());
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(names(&plan), vec![(Rank::Orphan, "shard-01".to_owned())]);
    assert!(Rank::Orphan.past_share(), "nobody else would take it");
    // Written before the roster (by a process that ignores it): only by standing still.
    rows[1].token = Some("0123".into());
    let legacy = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(legacy.candidates.is_empty());
    fixture.still.insert("shard-01".into(), LEASE);
    let later = super::plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(names(&later), vec![(Rank::Expired, "shard-01".to_owned())]);
}

#[test]
fn held_and_pending_rows_are_not_candidates() {
    let rows = shards(3, |_| None);
    let mut fixture = Fixture::new(&rows, Duration::ZERO);
    fixture.held.insert("shard-00".into());
    fixture.pending.insert("shard-01".into());
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(names(&plan), vec![(Rank::Free, "shard-02".to_owned())]);
}

#[test]
fn children_wait_for_their_parents() {
    let mut parent = row("p", Some("b"), Some("t"));
    let mut child = Lease::new(LeaseKey::new("s", "c").unwrap(), vec!["p".into()]);
    child.checkpoint = Some(Checkpoint::TrimHorizon);
    let rows = vec![parent.clone(), child.clone()];
    let open: Vec<&str> = readable(&rows, |_| true)
        .iter()
        .map(|r| r.key.shard())
        .collect();
    assert_eq!(open, vec!["p"]);
    parent.checkpoint = Some(Checkpoint::ShardEnd);
    let rows = vec![parent, child.clone()];
    let open: Vec<&str> = readable(&rows, |_| true)
        .iter()
        .map(|r| r.key.shard())
        .collect();
    assert_eq!(open, vec!["c"], "the finished parent is not readable");
    // A parent whose row is gone: readable once the stream no longer lists it.
    let rows = vec![child];
    assert!(readable(&rows, |_| true).is_empty());
    assert_eq!(readable(&rows, |_| false).len(), 1);
}

#[test]
fn owners_one_apart_do_not_move() {
    // a holds 5, b holds 6: no ask (16 over 3 settles at 6 + 5 + 5).
    let rows = shards(11, |i| Some(if i < 6 { "b" } else { "a" }));
    let fixture = Fixture::new(&rows, Duration::from_secs(1));
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert!(ask(&plan.readable, &plan.live, "a", 5, 6).is_none());
    assert!(ask(&plan.readable, &plan.live, "a", 4, 6).is_some());
    // Rows already wanted by someone are not offered.
    let mut wanted = rows.clone();
    for r in wanted.iter_mut().filter(|r| r.is_held_by("b")) {
        r.wanted_by = Some("c".into());
    }
    let plan = super::plan(readable(&wanted, |_| false), &fixture.view("a"));
    assert!(ask(&plan.readable, &plan.live, "a", 0, 6).is_none());
}

#[test]
fn a_first_round_alone_takes_one_row_then_the_share() {
    let rows = shards(16, |_| None);
    let fixture = Fixture::new(&rows, Duration::ZERO);
    let mut view = fixture.view("a");
    view.first_round = true;
    let first = plan(readable(&rows, |_| false), &view);
    assert_eq!(
        (first.target, first.room),
        (16, 1),
        "one row makes a visible"
    );
    view.first_round = false;
    let next = plan(readable(&rows, |_| false), &view);
    assert_eq!(
        next.room, 16,
        "a lone instance takes the rest a round later"
    );
}

#[test]
fn instances_started_together_take_their_share_at_their_second_round() {
    // Three instances each took one row in their first round; a is at its second round.
    let mut rows = shards(16, |_| None);
    rows[3] = row("shard-03", Some("a"), Some("t"));
    rows[7] = row("shard-07", Some("b"), Some("t"));
    rows[11] = row("shard-11", Some("c"), Some("t"));
    let mut fixture = Fixture::new(&rows, Duration::from_millis(500));
    fixture.held.insert("shard-03".into());
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(
        (plan.target, plan.room),
        (6, 5),
        "a is first by id: the extra row is its"
    );
    let mut b = Fixture::new(&rows, Duration::from_millis(500));
    b.held = ["shard-07".to_owned()].into_iter().collect();
    let plan_b = super::plan(readable(&rows, |_| false), &b.view("b"));
    assert_eq!((plan_b.target, plan_b.room), (6, 4), "b's share is 5");
    // A first round takes one row even when it already sees some of the others: those
    // that start a moment later would not be counted yet.
    let mut fixture = Fixture::new(&rows, Duration::from_millis(500));
    fixture.held.clear();
    let mut view = fixture.view("d");
    view.first_round = true;
    let first = super::plan(readable(&rows, |_| false), &view);
    assert_eq!((first.target, first.room), (4, 1));
}

#[test]
fn owners_start_at_different_free_rows() {
    // Owners that see the same members walk disjoint stretches of the rows: each starts
    // where the shares of the owners before it by id end (64 over 6: 11, 11, 11, 11, 10, 10),
    // so none runs into another's stretch before it has taken its share.
    let rows = shards(64, |_| None);
    let mut fixture = Fixture::new(&rows, Duration::ZERO);
    let owners = ["a", "b", "c", "d", "e", "f"];
    fixture.members = owners.iter().map(|o| (*o).to_owned()).collect();
    let mut firsts: Vec<usize> = owners
        .iter()
        .map(|me| {
            let plan = plan(readable(&rows, |_| false), &fixture.view(me));
            plan.candidates[0].1.key.shard()["shard-".len()..]
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        firsts,
        [0, 11, 22, 33, 44, 54],
        "shares 11, 11, 11, 11, 10, 10"
    );
    firsts.push(64);
    assert!(
        firsts.windows(2).all(|w| w[1] - w[0] >= 64 / 6),
        "{firsts:?}"
    );
    // The stretches lie on the readable rows, not on those still free: an instance that
    // lists after another took some rows still starts where its stretch begins.
    let mut some_taken = shards(64, |i| (i < 13).then_some("a"));
    some_taken
        .iter_mut()
        .filter(|r| r.owner.is_some())
        .for_each(|r| r.token = Some("t".into()));
    let f = plan(readable(&some_taken, |_| false), &fixture.view("f"));
    assert_eq!(f.candidates[0].1.key.shard(), "shard-54");
    // Every free row is still a candidate, once.
    let plan = plan(readable(&rows, |_| false), &fixture.view("a"));
    assert_eq!(names(&plan).len(), 64);
}

#[test]
fn rows_left_free_for_a_round_are_taken_even_past_the_share() {
    // 16 rows: c holds 4, b holds 5, d (crashed, still counted as live) holds 4; 3 rows
    // are free. Owners b, c, d: c's own share is 5 (16 / 3, the extra row is b's).
    let mut rows = shards(16, |i| match i {
        0..=3 => Some("c"),
        4..=8 => Some("b"),
        9..=12 => Some("d"),
        _ => None,
    });
    rows.iter_mut().for_each(|r| {
        if r.owner.is_some() {
            r.token = Some("t".into());
        }
    });
    let mut fixture = Fixture::new(&rows, Duration::from_secs(1));
    fixture.held = (0..4).map(|i| format!("shard-{i:02}")).collect();
    let first = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!((first.target, first.room), (6, 1), "own share 5, held 4");
    // The two rows c left are still free a round later: up to the fair share (6).
    fixture.left = ["shard-14".to_owned(), "shard-15".to_owned()]
        .into_iter()
        .collect();
    let later = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!(later.room, 2);
    assert!(!later.held_back);
    // At its share already (6 held): the rows that waited a whole round are still taken.
    fixture.held = (0..6).map(|i| format!("shard-{i:02}")).collect();
    let full = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!(
        full.room, 2,
        "rows free for a whole round are taken past the share"
    );
    // Not while this instance is starting: the others that started with it may not have
    // begun their first full round. The round says so, to look again soon.
    fixture.starting = true;
    let soon = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!(
        (soon.room, soon.held_back),
        (0, true),
        "starting: held back"
    );
    fixture.starting = false;
    // An owner below its share took one of the rows left last round: it is still taking (a
    // long round), so the rest waits too. d (share 5) holds 4 after taking shard-13.
    fixture.left = ["shard-13", "shard-14", "shard-15"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut taken = rows.clone();
    (taken[12].owner, taken[12].token) = (None, None);
    (taken[13].owner, taken[13].token) = (Some("d".into()), Some("t".into()));
    fixture.still.insert("shard-13".into(), Duration::ZERO);
    let busy = plan(readable(&taken, |_| false), &fixture.view("c"));
    assert_eq!(
        (busy.room, busy.held_back),
        (0, true),
        "d still taking: {:?}",
        names(&busy)
    );
    // Taken by an owner that reached its share with it (b, share 6): nobody else is taking.
    let mut done = rows.clone();
    (done[13].owner, done[13].token) = (Some("b".into()), Some("t".into()));
    let settled = plan(readable(&done, |_| false), &fixture.view("c"));
    assert_eq!(settled.room, 2, "b at its share: {:?}", names(&settled));
    let idle = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!(idle.room, 3, "nobody took any: all three");
    // The rows that waited come first, before a row freed since (shard-12, d's, freed now).
    let mut freed = rows.clone();
    (freed[12].owner, freed[12].token) = (None, None);
    fixture.left = ["shard-14".to_owned()].into_iter().collect();
    let first = plan(readable(&freed, |_| false), &fixture.view("c"));
    assert_eq!(first.candidates[0].1.key.shard(), "shard-14");
    // Rows nobody left yet are not: a row freed since the last round waits its turn.
    fixture.left = BTreeSet::new();
    let fresh = plan(readable(&rows, |_| false), &fixture.view("c"));
    assert_eq!(fresh.room, 0);
}

/// Half the default lease: how long a row must have been held to be asked for.
const HALF_LEASE: Duration = Duration::from_secs(5);

/// Rows `s0`.. held by member `b`.
fn held_by_b(n: usize) -> Vec<Lease> {
    (0..n)
        .map(|i| row(&format!("s{i}"), Some("b"), Some("t")))
        .collect()
}

/// The shards of the rows [`longest_held`] names among `open`.
fn named<'a>(open: &[&'a Lease], held_for: impl Fn(&Lease) -> Option<Duration>) -> Vec<&'a str> {
    longest_held(open, held_for, HALF_LEASE)
        .iter()
        .map(|r| r.key.shard())
        .collect()
}

#[test]
fn an_ask_names_a_row_its_holder_has_held_longest() {
    let rows = held_by_b(4);
    let open: Vec<&Lease> = rows.iter().collect();
    // s0 and s1 first seen at one listing 20 s ago, s2 at the next listing (a second later:
    // taken since), s3 taken 5 s ago.
    let held = |r: &Lease| {
        Some(match r.key.shard() {
            "s0" | "s1" => Duration::from_secs(20),
            "s2" => Duration::from_secs(19),
            _ => Duration::from_secs(5),
        })
    };
    assert_eq!(named(&open, held), ["s0", "s1"], "not a row taken since");
    // A row never listed before counts as held long (nothing says it was just taken).
    let unknown = named(&open, |r| held(r).filter(|_| r.key.shard() != "s3"));
    assert_eq!(unknown, ["s3"]);
    let one = longest_held(&open[3..], held, HALF_LEASE);
    assert_eq!(one.len(), 1, "the only row open is named, held 5 s");
}

#[test]
fn an_ask_waits_while_every_row_open_was_only_just_taken() {
    // Its holder took s0 1.5 s ago, s1 and s2 a second later (a joiner saw the rows free, or
    // held by a member that died, before): none has been read for long, and one asked for now
    // is handed over before a record of it is handled (simulation seed 198673: a shard freed
    // by an operator's reset, taken, asked for 1.5 s later, handed over and taken again,
    // 18.8 s without progress against a bound of 18.5 s).
    let rows = held_by_b(3);
    let open: Vec<&Lease> = rows.iter().collect();
    let held = |r: &Lease| {
        Some(match r.key.shard() {
            "s0" => Duration::from_millis(1_500),
            _ => Duration::from_millis(500),
        })
    };
    assert!(longest_held(&open, held, HALF_LEASE).is_empty());
    // Held for half a lease, it is named.
    let settled = |r: &Lease| held(r).map(|d| d + Duration::from_secs(4));
    assert_eq!(named(&open, settled), ["s0"]);
}
