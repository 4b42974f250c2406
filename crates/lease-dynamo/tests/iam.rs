//! The IAM policy in the docs against the calls the store's code makes: every DynamoDB call
//! found in `src/` needs its action in docs/operations.md's policy and in docs/leases.md (a
//! transaction needs the actions of its parts), so a new call cannot ship with a policy that
//! refuses it.

/// The store's sources, as compiled.
const SOURCES: &[(&str, &str)] = &[
    ("store.rs", include_str!("../src/store.rs")),
    ("index.rs", include_str!("../src/index.rs")),
    ("table.rs", include_str!("../src/table.rs")),
    ("billing.rs", include_str!("../src/billing.rs")),
    ("retry.rs", include_str!("../src/retry.rs")),
    ("item.rs", include_str!("../src/item.rs")),
    ("update.rs", include_str!("../src/update.rs")),
    ("condition.rs", include_str!("../src/condition.rs")),
    ("error.rs", include_str!("../src/error.rs")),
    ("lib.rs", include_str!("../src/lib.rs")),
];

const OPERATIONS: &str = include_str!("../../../docs/operations.md");
const LEASES: &str = include_str!("../../../docs/leases.md");

/// The client calls in `source`: each `client` followed (across whitespace) by `.name(`.
fn calls(source: &str) -> Vec<String> {
    let flat: String = source.split_whitespace().collect();
    flat.match_indices("client.")
        .filter_map(|(at, found)| {
            let rest = &flat[at + found.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            rest[name.len()..].starts_with('(').then_some(name)
        })
        .filter(|name| name != "config")
        .collect()
}

/// The IAM actions a call needs.
fn actions(call: &str, source: &str) -> Vec<&'static str> {
    match call {
        "get_item" => vec!["GetItem"],
        "batch_get_item" => vec!["BatchGetItem"],
        "put_item" => vec!["PutItem"],
        "update_item" => vec!["UpdateItem"],
        "describe_table" => vec!["DescribeTable"],
        "create_table" => vec!["CreateTable"],
        "transact_write_items" => {
            let mut parts = Vec::new();
            if source.contains("Delete::builder") {
                parts.push("DeleteItem");
            }
            if source.contains("Update::builder") {
                parts.push("UpdateItem");
            }
            if source.contains("Put::builder") {
                parts.push("PutItem");
            }
            assert!(!parts.is_empty(), "a transaction of unknown parts");
            parts
        }
        other => panic!("the store calls DynamoDB `{other}`, which this test does not know: add its IAM action here and to the docs"),
    }
}

#[test]
fn the_iam_policy_covers_every_call() {
    let mut needed = std::collections::BTreeSet::new();
    for (file, source) in SOURCES {
        for call in calls(source) {
            for action in actions(&call, source) {
                needed.insert((action, *file, call.clone()));
            }
        }
    }
    assert!(needed.len() >= 7, "the scan found the calls: {needed:?}");
    for (action, file, call) in &needed {
        let name = format!("dynamodb:{action}");
        assert!(
            OPERATIONS.contains(&name),
            "docs/operations.md lacks `{name}` ({file} calls `{call}`)"
        );
        assert!(
            LEASES.contains(&name),
            "docs/leases.md lacks `{name}` ({file} calls `{call}`)"
        );
    }
    let policy = OPERATIONS
        .split("DynamoDB, on the lease table's ARN:")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("the DynamoDB policy block");
    for (action, _, _) in &needed {
        if *action != "CreateTable" {
            assert!(
                policy.contains(&format!("\"dynamodb:{action}\"")),
                "the policy block lacks dynamodb:{action}:\n{policy}"
            );
        }
    }
}
