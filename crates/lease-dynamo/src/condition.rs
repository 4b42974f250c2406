//! The lease rules as DynamoDB condition expressions: one constructor per rule of
//! `kinesis_lease_core::rules`, each a small expression tree that renders to DynamoDB's syntax
//! and carries its values.
//!
//! The tree exists so the conditions can be checked: the tests evaluate each one, as DynamoDB
//! would, over every combination of row fields and compare the verdict with lease-core's rule.
//! A condition that drifted from its rule would let a write land that the rules refuse (two
//! owners) or refuse one they allow (a stall).

use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_lease_core::{rules, Holder, Take};

use crate::item::{n, s, COUNTER, KEY, OWNER, TOKEN, WANTED_BY};

/// A value bound to a placeholder (`:owner`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A string.
    Str(String),
    /// A number.
    Num(u64),
}

impl Value {
    fn attribute(&self) -> AttributeValue {
        match self {
            Value::Str(v) => s(v.as_str()),
            Value::Num(v) => n(*v),
        }
    }
}

/// A condition expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cond {
    /// `attribute_not_exists(attr)`.
    Missing(&'static str),
    /// `attr = :name`.
    Eq(&'static str, &'static str, Value),
    /// `attr <> :name`.
    Ne(&'static str, &'static str, Value),
    /// Every one of them.
    All(Vec<Cond>),
}

impl Cond {
    /// The expression in DynamoDB's syntax.
    pub(crate) fn render(&self) -> String {
        match self {
            Cond::Missing(attr) => format!("attribute_not_exists({attr})"),
            Cond::Eq(attr, name, _) => format!("{attr} = {name}"),
            Cond::Ne(attr, name, _) => format!("{attr} <> {name}"),
            Cond::All(parts) => parts
                .iter()
                .map(|p| format!("({})", p.render()))
                .collect::<Vec<_>>()
                .join(" AND "),
        }
    }

    /// The placeholders' values.
    pub(crate) fn values(&self) -> Vec<(&'static str, AttributeValue)> {
        match self {
            Cond::Missing(_) => Vec::new(),
            Cond::Eq(_, name, value) | Cond::Ne(_, name, value) => {
                vec![(*name, value.attribute())]
            }
            Cond::All(parts) => parts.iter().flat_map(Cond::values).collect(),
        }
    }
}

/// A take lands when the row's counter still equals the fence (0: the row does not exist).
pub(crate) fn take(take: &Take) -> Cond {
    match take.fence {
        0 => Cond::Missing(KEY),
        fence => Cond::Eq(COUNTER, ":fence", Value::Num(fence)),
    }
}

/// Renew, checkpoint and release land while `holder` holds the row: its owner and token.
pub(crate) fn held(holder: &Holder) -> Cond {
    Cond::All(vec![
        Cond::Eq(OWNER, ":owner", Value::Str(holder.owner.clone())),
        Cond::Eq(TOKEN, ":token", Value::Str(holder.token.clone())),
    ])
}

/// A request lands on a row still held by `holder`, the owner the asker chose (not the asker
/// itself, nor the operator's hold), that nobody asked for yet.
pub(crate) fn request(asker: &str, holder: &str) -> Cond {
    Cond::All(vec![
        Cond::Eq(OWNER, ":holder", Value::Str(holder.to_owned())),
        Cond::Ne(OWNER, ":asker", Value::Str(asker.to_owned())),
        Cond::Ne(
            OWNER,
            ":evicted",
            Value::Str(rules::EVICTED_OWNER.to_owned()),
        ),
        Cond::Missing(WANTED_BY),
    ])
}

/// An operator's evict lands on a row that still has the counter the operator observed,
/// whoever holds it (a missing attribute compares false, so a missing row is refused).
pub(crate) fn evict(observed: u64) -> Cond {
    Cond::Eq(COUNTER, ":observed", Value::Num(observed))
}

/// A hand-over lands while `holder` holds the row and `to` asked for it.
pub(crate) fn hand_over(holder: &Holder, to: &str) -> Cond {
    Cond::All(vec![
        held(holder),
        Cond::Eq(WANTED_BY, ":to", Value::Str(to.to_owned())),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use kinesis_lease_core::{Lease, LeaseKey};

    /// The value of `attr` in the item DynamoDB holds for `row` (`None`: no such attribute).
    fn attribute(row: Option<&Lease>, attr: &str) -> Option<Value> {
        let row = row?;
        match attr {
            a if a == KEY => Some(Value::Str(row.key.to_string())),
            a if a == COUNTER => Some(Value::Num(row.counter)),
            a if a == OWNER => row.owner.clone().map(Value::Str),
            a if a == TOKEN => row.token.clone().map(Value::Str),
            a if a == WANTED_BY => row.wanted_by.clone().map(Value::Str),
            other => panic!("no attribute {other} in a lease item"),
        }
    }

    /// The condition evaluated as DynamoDB does: a comparison with a missing attribute is
    /// false, `<>` included.
    fn eval(cond: &Cond, row: Option<&Lease>) -> bool {
        match cond {
            Cond::Missing(attr) => attribute(row, attr).is_none(),
            Cond::Eq(attr, _, value) => attribute(row, attr).as_ref() == Some(value),
            Cond::Ne(attr, _, value) => attribute(row, attr).is_some_and(|v| v != *value),
            Cond::All(parts) => parts.iter().all(|p| eval(p, row)),
        }
    }

    const NAMES: [Option<&str>; 4] = [None, Some("a"), Some("b"), Some("*evicted")];
    const TOKENS: [Option<&str>; 3] = [None, Some("t1"), Some("t2")];

    /// Every row worth telling apart: missing, or counter 1..=3 with each owner, token and
    /// asker.
    fn rows() -> Vec<Option<Lease>> {
        let mut rows = vec![None];
        for counter in 1..=3 {
            for owner in NAMES {
                for token in TOKENS {
                    for wanted in NAMES {
                        let mut row = Lease::new(LeaseKey::new("s", "shard").unwrap(), Vec::new());
                        row.counter = counter;
                        row.owner = owner.map(str::to_owned);
                        row.token = token.map(str::to_owned);
                        row.wanted_by = wanted.map(str::to_owned);
                        rows.push(Some(row));
                    }
                }
            }
        }
        rows
    }

    fn holders() -> Vec<Holder> {
        let mut holders = Vec::new();
        for owner in ["a", "b"] {
            for token in ["t1", "t2"] {
                holders.push(Holder::new(owner, token));
            }
        }
        holders
    }

    #[test]
    fn take_matches_the_rule() {
        for row in rows() {
            for fence in 0..=4 {
                let t = Take::fenced(Duration::from_secs(10), fence);
                assert_eq!(
                    eval(&take(&t), row.as_ref()),
                    rules::may_take(row.as_ref(), &t),
                    "fence {fence}, {row:?}"
                );
            }
        }
    }

    #[test]
    fn held_matches_the_rule() {
        for row in rows() {
            for holder in holders() {
                assert_eq!(
                    eval(&held(&holder), row.as_ref()),
                    rules::holds(row.as_ref(), &holder),
                    "{holder:?}, {row:?}"
                );
            }
        }
    }

    #[test]
    fn request_matches_the_rule() {
        for row in rows() {
            for asker in ["a", "b", "c"] {
                for holder in ["a", "b", "c", "*evicted"] {
                    assert_eq!(
                        eval(&request(asker, holder), row.as_ref()),
                        rules::may_request(row.as_ref(), asker, holder),
                        "{asker} asking {holder}, {row:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_over_matches_the_rule() {
        for row in rows() {
            for holder in holders() {
                for to in ["a", "b", "c"] {
                    assert_eq!(
                        eval(&hand_over(&holder, to), row.as_ref()),
                        rules::may_hand_over(row.as_ref(), &holder, to),
                        "{holder:?} to {to}, {row:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn evict_matches_the_rule() {
        for row in rows() {
            for observed in 0..=4 {
                assert_eq!(
                    eval(&evict(observed), row.as_ref()),
                    rules::may_evict(row.as_ref(), observed),
                    "observed {observed}, {row:?}"
                );
            }
        }
    }

    #[test]
    fn conditions_render_with_their_placeholders() {
        let holder = Holder::new("a", "t1");
        let cond = hand_over(&holder, "b");
        assert_eq!(
            cond.render(),
            format!("(({OWNER} = :owner) AND ({TOKEN} = :token)) AND ({WANTED_BY} = :to)")
        );
        let names: Vec<&str> = cond.values().iter().map(|(name, _)| *name).collect();
        assert_eq!(names, [":owner", ":token", ":to"]);
        assert_eq!(
            take(&Take::fenced(Duration::ZERO, 0)).render(),
            format!("attribute_not_exists({KEY})")
        );
    }
}
