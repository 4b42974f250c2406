//! `KclRow`: one row of a Java KCL lease table, read as the KCL's `DynamoDBLeaseSerializer`
//! (and `DynamoDBMultiStreamLeaseSerializer`) write it.
//!
//! The attribute names and meanings were checked against the KCL's source (v3.5.1, and the
//! 2.x line): the hash key `leaseKey`; `leaseOwner`, `leaseCounter` (every write of the KCL
//! bumps it: renewals, takes, checkpoints), `checkpoint` with `checkpointSubSequenceNumber`
//! (its `ExtendedSequenceNumber`: a sequence number or a sentinel `TRIM_HORIZON`, `LATEST`,
//! `AT_TIMESTAMP`, `SHARD_END`; the subsequence is 0 for a record that was not aggregated),
//! `pendingCheckpoint` with `pendingCheckpointSubSequenceNumber` (a two-phase checkpoint not
//! committed), `parentShardId` (a string set), `childShardIds`, and since 3.x
//! `checkpointOwner` (a graceful hand-off in progress) and `entityType`. Multi-stream rows also
//! carry `streamName` (the serialized stream identifier `account:stream:creationEpoch`) and
//! `shardId`.
//!
//! # Not every row is a lease
//!
//! KCL 3.5 can keep its worker metrics and coordinator state (leader lock, migration state) in
//! the lease table, each tagged by `entityType`. The KCL reads a row as a lease when
//! `entityType` is `LEASE` or absent (rows written before 3.x have none); so does
//! [`KclRow::is_lease`].

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// The KCL's attribute names.
pub(crate) mod attr {
    pub(crate) const LEASE_KEY: &str = "leaseKey";
    pub(crate) const LEASE_OWNER: &str = "leaseOwner";
    pub(crate) const LEASE_COUNTER: &str = "leaseCounter";
    pub(crate) const CHECKPOINT: &str = "checkpoint";
    pub(crate) const CHECKPOINT_SUBSEQUENCE: &str = "checkpointSubSequenceNumber";
    pub(crate) const PENDING_CHECKPOINT: &str = "pendingCheckpoint";
    pub(crate) const PENDING_CHECKPOINT_SUBSEQUENCE: &str = "pendingCheckpointSubSequenceNumber";
    pub(crate) const PARENT_SHARD_ID: &str = "parentShardId";
    pub(crate) const CHECKPOINT_OWNER: &str = "checkpointOwner";
    pub(crate) const ENTITY_TYPE: &str = "entityType";
    pub(crate) const STREAM_NAME: &str = "streamName";
    pub(crate) const SHARD_ID: &str = "shardId";
}

/// The `entityType` of lease rows.
pub const LEASE_ENTITY: &str = "LEASE";

/// One row of a KCL lease table: the attributes the import reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KclRow {
    /// `leaseKey`: the shard id (single-stream), or `account:stream:creationEpoch:shardId`
    /// (multi-stream); for rows that are not leases, whatever their entity uses.
    pub lease_key: String,
    /// `entityType`: `LEASE`, another entity (`WORKER_METRIC_STATS`, `LEADER`, ...), or absent.
    pub entity_type: Option<String>,
    /// `leaseOwner`: the worker id holding the lease, if any.
    pub owner: Option<String>,
    /// `leaseCounter`: bumped by every KCL write of the row.
    pub counter: u64,
    /// `checkpoint`: a sequence number or a sentinel, as stored.
    pub checkpoint: Option<String>,
    /// `checkpointSubSequenceNumber` (0 when absent, as the KCL reads it).
    pub checkpoint_subsequence: u64,
    /// `pendingCheckpoint`: a checkpoint prepared and not committed (never a checkpoint).
    pub pending_checkpoint: Option<String>,
    /// `pendingCheckpointSubSequenceNumber`.
    pub pending_checkpoint_subsequence: u64,
    /// `parentShardId`: the shards this one was split or merged from.
    pub parents: Vec<String>,
    /// `checkpointOwner` (3.x): the worker finishing a graceful hand-off of the lease.
    pub checkpoint_owner: Option<String>,
    /// `streamName` (multi-stream): the serialized stream identifier.
    pub stream_identifier: Option<String>,
    /// `shardId` (multi-stream).
    pub shard_id: Option<String>,
}

impl KclRow {
    /// A lease row with `lease_key` and `counter`, every other attribute absent.
    pub fn lease(lease_key: impl Into<String>, counter: u64) -> Self {
        Self {
            lease_key: lease_key.into(),
            counter,
            ..Self::default()
        }
    }

    /// True when the KCL reads this row as a lease: `entityType` is `LEASE` or absent.
    pub fn is_lease(&self) -> bool {
        self.entity_type
            .as_deref()
            .is_none_or(|entity| entity == LEASE_ENTITY)
    }

    /// The pending checkpoint as `sequence/subsequence`, if one is stored.
    pub fn pending(&self) -> Option<String> {
        self.pending_checkpoint
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/{}", self.pending_checkpoint_subsequence))
    }

    /// Reads a DynamoDB item as the KCL wrote it.
    ///
    /// # Errors
    ///
    /// What is wrong, when the item has no string `leaseKey`, or a lease row (see
    /// [`is_lease`](Self::is_lease)) has a `leaseCounter` or a subsequence that is not a
    /// number. Rows that are not leases are read by their key and entity type only.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, String> {
        let lease_key = match item.get(attr::LEASE_KEY) {
            Some(AttributeValue::S(key)) => key.clone(),
            Some(_) => return Err(format!("`{}` is not a string", attr::LEASE_KEY)),
            None => {
                return Err(format!(
                    "no `{}` attribute: not a KCL lease table",
                    attr::LEASE_KEY
                ))
            }
        };
        let mut row = KclRow {
            lease_key,
            entity_type: string(item, attr::ENTITY_TYPE),
            ..KclRow::default()
        };
        if !row.is_lease() {
            return Ok(row);
        }
        row.owner = string(item, attr::LEASE_OWNER);
        row.counter = number(item, attr::LEASE_COUNTER)?.unwrap_or(0);
        row.checkpoint = string(item, attr::CHECKPOINT);
        row.checkpoint_subsequence = number(item, attr::CHECKPOINT_SUBSEQUENCE)?.unwrap_or(0);
        row.pending_checkpoint = string(item, attr::PENDING_CHECKPOINT);
        row.pending_checkpoint_subsequence =
            number(item, attr::PENDING_CHECKPOINT_SUBSEQUENCE)?.unwrap_or(0);
        row.parents = match item.get(attr::PARENT_SHARD_ID) {
            Some(AttributeValue::Ss(set)) => {
                let mut parents = set.clone();
                parents.sort();
                parents
            }
            Some(AttributeValue::S(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        row.checkpoint_owner = string(item, attr::CHECKPOINT_OWNER);
        row.stream_identifier = string(item, attr::STREAM_NAME);
        row.shard_id = string(item, attr::SHARD_ID);
        Ok(row)
    }

    /// The DynamoDB item the KCL's serializer would write for this row (the attributes the
    /// import reads), for tests and tools that write KCL-format rows.
    pub fn to_item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::new();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: u64| AttributeValue::N(v.to_string());
        item.insert(attr::LEASE_KEY.to_owned(), s(&self.lease_key));
        if let Some(entity) = &self.entity_type {
            item.insert(attr::ENTITY_TYPE.to_owned(), s(entity));
        }
        if !self.is_lease() {
            return item;
        }
        item.insert(attr::LEASE_COUNTER.to_owned(), n(self.counter));
        item.insert("ownerSwitchesSinceCheckpoint".to_owned(), n(0));
        let optional = [
            (attr::LEASE_OWNER, &self.owner),
            (attr::CHECKPOINT, &self.checkpoint),
            (attr::CHECKPOINT_OWNER, &self.checkpoint_owner),
            (attr::STREAM_NAME, &self.stream_identifier),
            (attr::SHARD_ID, &self.shard_id),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                item.insert(name.to_owned(), s(value));
            }
        }
        item.insert(
            attr::CHECKPOINT_SUBSEQUENCE.to_owned(),
            n(self.checkpoint_subsequence),
        );
        if let Some(pending) = &self.pending_checkpoint {
            item.insert(attr::PENDING_CHECKPOINT.to_owned(), s(pending));
            item.insert(
                attr::PENDING_CHECKPOINT_SUBSEQUENCE.to_owned(),
                n(self.pending_checkpoint_subsequence),
            );
        }
        if !self.parents.is_empty() {
            item.insert(
                attr::PARENT_SHARD_ID.to_owned(),
                AttributeValue::Ss(self.parents.clone()),
            );
        }
        item
    }
}

fn string(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Some(value.clone()),
        _ => None,
    }
}

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Result<Option<u64>, String> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(value)) => value
            .parse()
            .map(Some)
            .map_err(|_| format!("`{name}` is `{value}`, not a whole number")),
        Some(_) => Err(format!("`{name}` is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: u64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }

    #[test]
    fn a_lease_row_reads_every_attribute_the_import_needs() {
        let row = KclRow::from_item(&item(&[
            ("leaseKey", s("shardId-000000000002")),
            ("leaseOwner", s("worker-1")),
            ("leaseCounter", n(41)),
            ("checkpoint", s("4959")),
            ("checkpointSubSequenceNumber", n(3)),
            ("pendingCheckpoint", s("4970")),
            ("pendingCheckpointSubSequenceNumber", n(0)),
            (
                "parentShardId",
                AttributeValue::Ss(vec!["shardId-1".into(), "shardId-0".into()]),
            ),
            ("checkpointOwner", s("worker-0")),
            ("entityType", s("LEASE")),
            ("throughputKBps", AttributeValue::N("12.5".into())),
        ]))
        .unwrap();
        assert!(row.is_lease());
        assert_eq!(row.lease_key, "shardId-000000000002");
        assert_eq!(row.owner.as_deref(), Some("worker-1"));
        assert_eq!(row.counter, 41);
        assert_eq!(
            (row.checkpoint.as_deref(), row.checkpoint_subsequence),
            (Some("4959"), 3)
        );
        assert_eq!(row.pending().as_deref(), Some("4970/0"));
        assert_eq!(row.parents, ["shardId-0", "shardId-1"]);
        assert_eq!(row.checkpoint_owner.as_deref(), Some("worker-0"));
        assert_eq!(
            KclRow::from_item(&row.to_item()).unwrap(),
            row,
            "to_item writes what from_item reads"
        );
    }

    #[test]
    fn rows_without_entity_type_are_leases_and_others_are_not() {
        let old = KclRow::from_item(&item(&[
            ("leaseKey", s("shardId-0")),
            ("leaseCounter", n(1)),
        ]))
        .unwrap();
        assert!(old.is_lease(), "rows written before 3.x have no entityType");
        assert_eq!(old.checkpoint_subsequence, 0);
        for entity in ["WORKER_METRIC_STATS", "LEADER", "CLIENT_VERSION_MIGRATION"] {
            // Other entities need no leaseCounter: they are read by key and type only.
            let row = KclRow::from_item(&item(&[
                ("leaseKey", s("worker-1")),
                ("entityType", s(entity)),
            ]))
            .unwrap();
            assert!(!row.is_lease(), "{entity}");
        }
    }

    #[test]
    fn unreadable_rows_are_named_errors() {
        assert!(
            KclRow::from_item(&item(&[("lease_key", s("orders:shardId-0"))]))
                .unwrap_err()
                .contains("not a KCL lease table")
        );
        assert!(KclRow::from_item(&item(&[
            ("leaseKey", s("shardId-0")),
            ("leaseCounter", s("seven"))
        ]))
        .unwrap_err()
        .contains("leaseCounter"));
        assert!(KclRow::from_item(&item(&[
            ("leaseKey", s("shardId-0")),
            (
                "checkpointSubSequenceNumber",
                AttributeValue::N("-1".into())
            )
        ]))
        .unwrap_err()
        .contains("checkpointSubSequenceNumber"));
    }
}
