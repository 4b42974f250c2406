//! `ReadMeter`: what DynamoDB would bill for the reads that went through a [`FaultProxy`],
//! counted from the responses themselves (items and their sizes), as the service bills them:
//! a `GetItem` costs its item's size in 4 KB units (at least one, found or not); a
//! `BatchGetItem` costs each returned item's size in 4 KB units, each rounded up; a
//! consistent read costs twice an eventually consistent one. Counting calls would hide the
//! cost: one `BatchGetItem` carries up to 100 keys.
//!
//! [`FaultProxy`]: crate::FaultProxy

use std::sync::Mutex;

use serde_json::Value;

/// Read items and read units so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reads {
    /// Read requests (`GetItem`, `BatchGetItem`).
    pub requests: u64,
    /// Items returned.
    pub items: u64,
    /// Read capacity units, as billed.
    pub units: f64,
}

/// A tally shared by the proxy's connections.
#[derive(Debug, Default)]
pub(crate) struct ReadMeter {
    reads: Mutex<Reads>,
}

impl ReadMeter {
    /// Bills one answered read call: `target` is its `X-Amz-Target`, `request` and `response`
    /// its JSON bodies.
    pub(crate) fn bill(&self, target: &str, request: &[u8], response: &[u8]) {
        let Ok(body) = serde_json::from_slice::<Value>(response) else {
            return;
        };
        let request: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
        let mut reads = self.reads.lock().expect("reads");
        if target.ends_with(".GetItem") {
            let factor = consistency(&request["ConsistentRead"]);
            let size = body.get("Item").map_or(0, item_size);
            reads.requests += 1;
            reads.items += u64::from(body.get("Item").is_some());
            reads.units += factor * units(size);
        } else if target.ends_with(".BatchGetItem") {
            reads.requests += 1;
            let Some(tables) = body.get("Responses").and_then(Value::as_object) else {
                return;
            };
            for (table, items) in tables {
                let factor = consistency(&request["RequestItems"][table]["ConsistentRead"]);
                for item in items.as_array().into_iter().flatten() {
                    reads.items += 1;
                    reads.units += factor * units(item_size(item));
                }
            }
        }
    }

    /// The tally so far.
    pub(crate) fn reads(&self) -> Reads {
        *self.reads.lock().expect("reads")
    }
}

/// 1 for a consistent read, 0.5 for an eventually consistent one.
fn consistency(flag: &Value) -> f64 {
    if flag.as_bool() == Some(true) {
        1.0
    } else {
        0.5
    }
}

/// Read units of an item of `size` bytes: 4 KB each, rounded up, at least one.
fn units(size: usize) -> f64 {
    size.div_ceil(4_096).max(1) as f64
}

/// An item's size as DynamoDB computes it: each attribute's name plus its value.
fn item_size(item: &Value) -> usize {
    item.as_object().map_or(0, |attributes| {
        attributes
            .iter()
            .map(|(name, value)| name.len() + value_size(value))
            .sum()
    })
}

/// The size of one typed attribute value (`{"S": ..}`, `{"N": ..}`, sets, maps, lists).
fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => inner.as_str().map_or(0, number_size),
        "B" => inner.as_str().map_or(0, |b| b.len() * 3 / 4),
        "SS" => strings(inner).map(str::len).sum(),
        "NS" => strings(inner).map(number_size).sum(),
        "BS" => strings(inner).map(|b| b.len() * 3 / 4).sum(),
        "BOOL" | "NULL" => 1,
        "L" => {
            3 + inner
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| 1 + value_size(v))
                .sum::<usize>()
        }
        "M" => 3 + item_size(inner) + inner.as_object().map_or(0, serde_json::Map::len),
        _ => 0,
    }
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// A number's size: about one byte per two significant digits, plus one.
fn number_size(text: &str) -> usize {
    let digits = text
        .trim_start_matches('-')
        .chars()
        .filter(char::is_ascii_digit)
        .collect::<String>();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_billed_per_item_in_four_kilobyte_units() {
        let meter = ReadMeter::default();
        let consistent = br#"{"ConsistentRead":true}"#;
        meter.bill(
            "DynamoDB_20120810.GetItem",
            consistent,
            br#"{"Item":{"k":{"S":"abc"}}}"#,
        );
        meter.bill("DynamoDB_20120810.GetItem", consistent, br#"{}"#);
        let big = "x".repeat(5_000);
        let batch =
            format!(r#"{{"Responses":{{"t":[{{"k":{{"S":"a"}}}},{{"k":{{"S":"{big}"}}}}]}}}}"#);
        meter.bill(
            "DynamoDB_20120810.BatchGetItem",
            br#"{"RequestItems":{"t":{"ConsistentRead":true}}}"#,
            batch.as_bytes(),
        );
        let reads = meter.reads();
        assert_eq!((reads.requests, reads.items), (3, 3));
        // 1 (small item) + 1 (not found) + 1 + 2 (5 KB).
        assert_eq!(reads.units, 5.0);
        meter.bill(
            "DynamoDB_20120810.GetItem",
            b"{}",
            br#"{"Item":{"k":{"S":"a"}}}"#,
        );
        assert_eq!(meter.reads().units, 5.5, "eventually consistent: half");
    }
}
