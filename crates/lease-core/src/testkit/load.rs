//! Checks of published loads: a renewal with a load stores it in the same write (a shard
//! row's load, or a member row's total with its capacity), and every other write keeps it, so
//! a new holder starts from what the shard cost the last one.

use super::{holder, lost_to, seq, written, Harness, TTL};
use crate::{Load, Take};

fn load(records: u64, capacity_milli: Option<u64>) -> Load {
    let mut load = Load::new(records, records * 512, records * 3);
    if let Some(capacity) = capacity_milli {
        // A member row's: its capacity and its count of shards.
        load = load.with_capacity(capacity);
        load.shards = Some(records / 100);
    }
    load
}

/// `renew_with_load` stores the load (and a capacity when given) in one write, only while the
/// writer holds the row; renewals without one, checkpoints, hand-overs, releases and takes
/// keep the last load written.
pub async fn loads_round_trip(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("load", "shardId-000000000000");
    let taken = written(h.take(&key, &a).await, "take");
    assert_eq!(taken.load, None, "a new row carries no load");
    let first = load(600, None);
    let renewed = written(
        h.renew_with_load(&key, &a, Some(&seq("7")), &first).await,
        "renew with a load",
    );
    assert_eq!(renewed.load, Some(first), "the written row");
    assert_eq!(renewed.counter, taken.counter + 1, "one write");
    assert_eq!(renewed.checkpoint, Some(seq("7")), "with its checkpoint");
    assert_eq!(h.read(&key).await.load, Some(first), "read back");
    let member = load(1_200, Some(2_000));
    written(
        h.renew_with_load(&key, &a, None, &member).await,
        "renew with a load and a capacity",
    );
    assert_eq!(h.read(&key).await.load, Some(member), "the capacity too");
    written(
        h.renew_with_load(&key, &a, None, &first).await,
        "renew with a load and no capacity",
    );
    assert_eq!(
        h.read(&key).await.load,
        Some(first),
        "a load without a capacity replaces the whole load, the capacity too"
    );
    written(
        h.renew_with_load(&key, &a, None, &member).await,
        "renew with the capacity again",
    );
    let stands = h.read(&key).await;
    lost_to(
        h.renew_with_load(&key, &b, None, &first).await,
        "renew with a load by a non-holder",
        Some("a"),
        stands.counter,
    );
    assert_eq!(
        h.read(&key).await,
        stands,
        "a refused renewal stores nothing"
    );
    written(h.renew(&key, &a, None).await, "renew");
    written(h.checkpoint(&key, &a, &seq("8")).await, "checkpoint");
    assert_eq!(
        h.read(&key).await.load,
        Some(member),
        "renew, checkpoint keep it"
    );
    written(h.request(&key, "b", "a").await, "request");
    written(
        h.hand_over(&key, &a, "b", Some(&seq("9"))).await,
        "hand over",
    );
    assert_eq!(
        h.read(&key).await.load,
        Some(member),
        "a hand-over keeps it"
    );
    let counter = h.read(&key).await.counter;
    written(
        h.take_with(&key, &b, &Take::fenced(TTL, counter)).await,
        "take of the handed row",
    );
    assert_eq!(h.read(&key).await.load, Some(member), "a take keeps it");
    written(h.release(&key, &b, None).await, "release");
    assert_eq!(h.read(&key).await.load, Some(member), "a release keeps it");
}
