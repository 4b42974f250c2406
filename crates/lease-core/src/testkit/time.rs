//! Checks of the time rule: the store's clock only stamps expiries and never decides a take,
//! moved forwards or backwards.

use super::{holder, lost_to, written, Harness, TTL};

/// No clock decides a take: far past the expiry a take on a stale counter is refused (and the
/// holder may still renew); with the clock moved back before the expiry, a take on the
/// current counter lands.
pub async fn clock_never_decides_a_take(h: &Harness) {
    let (a, b) = (holder("a", "a-1"), holder("b", "b-1"));
    let key = h.key("clock", "shardId-000000000000");
    let start = h.now_ms();
    let taken = written(h.take(&key, &a).await, "take by a");
    let seen = taken.counter;
    h.clock.set(start + 1_000 * 3_600 * 1_000);
    assert!(taken.expiry_ms < h.now_ms());
    let renewed = written(
        h.renew(&key, &a, None).await,
        "renew by the holder of an expired row",
    );
    assert_eq!(
        renewed.expiry_ms,
        h.now_ms() + 10_000,
        "the clock stamps the expiry"
    );
    h.clock.advance(TTL * 1_000);
    lost_to(
        h.take_fenced(&key, &b, seen).await,
        "take on a stale counter far past the expiry",
        Some("a"),
        renewed.counter,
    );
    h.clock.set(start - 3_600 * 1_000);
    assert!(renewed.expiry_ms > h.now_ms() + crate::duration_ms(TTL));
    let took = written(
        h.take_fenced(&key, &b, renewed.counter).await,
        "take on the current counter of a live row, the clock moved back",
    );
    assert_eq!(
        (took.owner.as_deref(), took.token.as_deref()),
        (Some("b"), Some("b-1"))
    );
    assert_eq!(
        took.expiry_ms,
        h.now_ms() + 10_000,
        "the clock stamps the expiry"
    );
    lost_to(
        h.renew(&key, &a, None).await,
        "renew by a after the take",
        Some("b"),
        took.counter,
    );
    h.clock.set(start);
}
