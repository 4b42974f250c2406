//! Which rows of a KCL lease table belong to the stream being imported: pure.
//!
//! A KCL application reads one stream (single-stream mode: `leaseKey` is the shard id, and
//! the table does not say which stream) or several (multi-stream mode: `leaseKey` is
//! `account:stream:creationEpoch:shardId`, the stream identifier then the shard). In
//! multi-stream mode a stream name alone can match several identifiers (a stream deleted and
//! created again has a new creation epoch, and other accounts may hold a stream of the same
//! name): the import then asks for the identifier (`--kcl-stream-key`) instead of guessing.
//! In single-stream mode the shards are checked against the stream's listing later (see
//! `plan`): a table whose shards are none of the stream's is refused.

use std::collections::BTreeSet;

use crate::KclRow;

/// How the rows of the stream were recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KclMode {
    /// Single-stream: `leaseKey` is the shard id.
    SingleStream,
    /// Multi-stream: `leaseKey` is this stream identifier (`account:stream:creationEpoch`),
    /// `:`, the shard id.
    MultiStream {
        /// The stream identifier.
        identifier: String,
    },
}

/// A KCL lease of the stream being imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KclLease {
    /// The shard id.
    pub shard: String,
    /// The row.
    pub row: KclRow,
}

/// The leases of one stream in a KCL table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// How they were recognised.
    pub mode: KclMode,
    /// The leases, sorted by shard.
    pub leases: Vec<KclLease>,
    /// Rows of the table that are not leases (3.5's worker metrics and coordinator rows).
    pub other_entities: usize,
}

/// Why no rows could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// No lease of the stream; `hint` says what the table holds instead.
    NoLeases {
        /// What the table holds instead, for the message.
        hint: String,
    },
    /// Several multi-stream identifiers name the stream (or the table mixes single-stream and
    /// multi-stream rows).
    Ambiguous {
        /// The identifiers (and `single-stream rows`), sorted.
        candidates: Vec<String>,
    },
}

/// The stream identifier and shard of a multi-stream `leaseKey`, `None` for a single-stream
/// key (no `:`). The shard id is what follows the last `:` (shard ids have none).
pub fn split_multi_stream_key(lease_key: &str) -> Option<(&str, &str)> {
    let (identifier, shard) = lease_key.rsplit_once(':')?;
    (!identifier.is_empty() && !shard.is_empty()).then_some((identifier, shard))
}

/// The stream name inside a serialized stream identifier `account:stream:creationEpoch`.
pub fn identifier_stream(identifier: &str) -> Option<&str> {
    let mut parts = identifier.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_account), Some(stream), Some(_epoch), None) => Some(stream),
        _ => None,
    }
}

/// Chooses the lease rows of `stream` among `rows`: those under `stream_key` when given (a
/// multi-stream identifier), else the multi-stream rows whose identifier names `stream`, else
/// the single-stream rows.
///
/// # Errors
///
/// [`SelectError::NoLeases`] when nothing matches; [`SelectError::Ambiguous`] when several
/// identifiers name the stream, or single-stream and multi-stream rows are mixed.
pub fn select(
    rows: &[KclRow],
    stream: &str,
    stream_key: Option<&str>,
) -> Result<Selection, SelectError> {
    let other_entities = rows.iter().filter(|r| !r.is_lease()).count();
    let leases: Vec<&KclRow> = rows.iter().filter(|r| r.is_lease()).collect();
    let under = |identifier: &str| -> Vec<KclLease> {
        leases
            .iter()
            .filter_map(|row| match split_multi_stream_key(&row.lease_key) {
                Some((i, shard)) if i == identifier => Some(KclLease {
                    shard: shard.to_owned(),
                    row: (*row).clone(),
                }),
                _ => None,
            })
            .collect()
    };
    let identifiers: BTreeSet<&str> = leases
        .iter()
        .filter_map(|row| split_multi_stream_key(&row.lease_key))
        .map(|(identifier, _)| identifier)
        .collect();
    if let Some(key) = stream_key {
        if identifier_stream(key) != Some(stream) {
            return Err(SelectError::NoLeases {
                hint: match identifier_stream(key) {
                    Some(other) => format!(
                        "the stream key `{key}` names stream `{other}`: its leases belong to \
                         that stream"
                    ),
                    None => format!(
                        "the stream key `{key}` is not a stream identifier \
                         `account:stream:creationEpoch`"
                    ),
                },
            });
        }
    }
    let (mode, mut chosen) = match stream_key {
        Some(key) => (
            KclMode::MultiStream {
                identifier: key.to_owned(),
            },
            under(key),
        ),
        None => {
            let named: Vec<&str> = identifiers
                .iter()
                .copied()
                .filter(|identifier| identifier_stream(identifier) == Some(stream))
                .collect();
            let singles: Vec<&KclRow> = leases
                .iter()
                .copied()
                .filter(|row| split_multi_stream_key(&row.lease_key).is_none())
                .collect();
            if named.len() > 1 || (!named.is_empty() && !singles.is_empty()) {
                let mut candidates: Vec<String> = named.iter().map(|i| (*i).to_owned()).collect();
                if !singles.is_empty() {
                    candidates.push("single-stream rows".to_owned());
                }
                return Err(SelectError::Ambiguous { candidates });
            }
            match named.first() {
                Some(identifier) => (
                    KclMode::MultiStream {
                        identifier: (*identifier).to_owned(),
                    },
                    under(identifier),
                ),
                None => (
                    KclMode::SingleStream,
                    singles
                        .iter()
                        .map(|row| KclLease {
                            shard: row.lease_key.clone(),
                            row: (*row).clone(),
                        })
                        .collect(),
                ),
            }
        }
    };
    if chosen.is_empty() {
        let hint = if leases.is_empty() {
            format!("the table holds no lease rows ({other_entities} rows of other KCL entities)")
        } else if identifiers.is_empty() {
            format!("the table holds {} single-stream leases", leases.len())
        } else {
            format!(
                "the table holds leases of the stream identifiers {}",
                identifiers.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        return Err(SelectError::NoLeases { hint });
    }
    chosen.sort_by(|a, b| a.shard.cmp(&b.shard));
    Ok(Selection {
        mode,
        leases: chosen,
        other_entities,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(key: &str) -> KclRow {
        KclRow::lease(key, 1)
    }

    fn other(key: &str, entity: &str) -> KclRow {
        KclRow {
            entity_type: Some(entity.to_owned()),
            ..KclRow::lease(key, 0)
        }
    }

    #[test]
    fn single_stream_rows_are_the_shards_and_other_entities_are_not_leases() {
        let rows = [
            lease("shardId-000000000001"),
            other("worker-1", "WORKER_METRIC_STATS"),
            other("Leader", "LEADER"),
            KclRow {
                entity_type: Some("LEASE".into()),
                ..lease("shardId-000000000000")
            },
        ];
        let picked = select(&rows, "orders", None).unwrap();
        assert_eq!(picked.mode, KclMode::SingleStream);
        let shards: Vec<&str> = picked.leases.iter().map(|l| l.shard.as_str()).collect();
        assert_eq!(shards, ["shardId-000000000000", "shardId-000000000001"]);
        assert_eq!(picked.other_entities, 2);
    }

    #[test]
    fn multi_stream_keys_map_to_their_own_stream() {
        let rows = [
            lease("123456789012:orders:1700000000:shardId-000000000000"),
            lease("123456789012:orders:1700000000:shardId-000000000001"),
            lease("123456789012:payments:1700000005:shardId-000000000000"),
        ];
        let picked = select(&rows, "orders", None).unwrap();
        assert_eq!(
            picked.mode,
            KclMode::MultiStream {
                identifier: "123456789012:orders:1700000000".into()
            }
        );
        assert_eq!(picked.leases.len(), 2);
        assert!(picked
            .leases
            .iter()
            .all(|l| l.row.lease_key.contains(":orders:")));
        let payments = select(&rows, "payments", None).unwrap();
        assert_eq!(payments.leases.len(), 1);
        assert_eq!(payments.leases[0].shard, "shardId-000000000000");
        assert!(matches!(
            select(&rows, "refunds", None),
            Err(SelectError::NoLeases { hint }) if hint.contains("123456789012:payments:1700000005")
        ));
    }

    #[test]
    fn a_recreated_stream_is_ambiguous_until_its_key_is_given() {
        let rows = [
            lease("123456789012:orders:1700000000:shardId-000000000000"),
            lease("123456789012:orders:1800000000:shardId-000000000003"),
        ];
        match select(&rows, "orders", None) {
            Err(SelectError::Ambiguous { candidates }) => assert_eq!(
                candidates,
                [
                    "123456789012:orders:1700000000",
                    "123456789012:orders:1800000000"
                ]
            ),
            other => panic!("{other:?}"),
        }
        let picked = select(&rows, "orders", Some("123456789012:orders:1800000000")).unwrap();
        assert_eq!(picked.leases.len(), 1);
        assert_eq!(picked.leases[0].shard, "shardId-000000000003");
        assert!(matches!(
            select(&rows, "orders", Some("123456789012:orders:1")),
            Err(SelectError::NoLeases { .. })
        ));
        // A key of another stream never imports its leases into this one.
        assert!(matches!(
            select(&rows, "payments", Some("123456789012:orders:1800000000")),
            Err(SelectError::NoLeases { hint }) if hint.contains("names stream `orders`")
        ));
        assert!(matches!(
            select(&rows, "orders", Some("orders")),
            Err(SelectError::NoLeases { hint }) if hint.contains("not a stream identifier")
        ));
    }

    #[test]
    fn mixed_modes_and_empty_tables_are_refused() {
        let mixed = [
            lease("shardId-000000000000"),
            lease("123456789012:orders:1700000000:shardId-000000000000"),
        ];
        assert!(matches!(
            select(&mixed, "orders", None),
            Err(SelectError::Ambiguous { candidates }) if candidates.len() == 2
        ));
        let empty = [other("worker-1", "WORKER_METRIC_STATS")];
        assert!(matches!(
            select(&empty, "orders", None),
            Err(SelectError::NoLeases { hint }) if hint.contains("no lease rows")
        ));
    }

    #[test]
    fn keys_split_at_the_last_colon() {
        assert_eq!(
            split_multi_stream_key("1:s:2:shardId-1"),
            Some(("1:s:2", "shardId-1"))
        );
        assert_eq!(split_multi_stream_key("shardId-1"), None);
        assert_eq!(identifier_stream("1:s:2"), Some("s"));
        assert_eq!(identifier_stream("s"), None);
    }
}
