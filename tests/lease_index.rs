//! The paged lease-table index on moto: no item grows with the stream, a table written by the
//! previous release (one index row listing every shard in `shards`) is read, and kept readable
//! for that release during a rolling deploy, until `migrate_index` (or a full `shards`) turns it
//! paged. The "previous release" here is its layout written by a raw client: its list reads
//! the index row's `shards` and nothing else, so what it would list is that set.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_integ::{
    endpoint, sdk_config, sdk_config_via, unique_account, unique_name, FaultProxy, Service,
};
use kinesis_lease_core::{Lease, LeaseKey, LeaseStore};
use kinesis_lease_dynamo::DynamoLeaseStore;

const STREAM: &str = "orders";

struct Table {
    store: DynamoLeaseStore,
    raw: aws_sdk_dynamodb::Client,
    name: String,
}

async fn table() -> Table {
    let config = sdk_config(Service::Dynamodb).await;
    let name = unique_name("index");
    let store = DynamoLeaseStore::new(&config, &name);
    store.ensure_table().await.expect("ensure_table");
    Table {
        store,
        raw: aws_sdk_dynamodb::Client::new(&config),
        name,
    }
}

fn shard(n: u32) -> String {
    format!("shardId-{n:012}")
}

fn key(n: u32) -> LeaseKey {
    LeaseKey::new(STREAM, shard(n)).unwrap()
}

impl Table {
    async fn item(&self, key: &str) -> Option<HashMap<String, AttributeValue>> {
        self.raw
            .get_item()
            .table_name(&self.name)
            .key("lease_key", AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
            .item
    }

    /// What the previous release's `list` would name: the index row's `shards`.
    async fn legacy_listing(&self) -> BTreeSet<String> {
        match self
            .item(&format!("{STREAM}:*"))
            .await
            .and_then(|mut i| i.remove("shards"))
        {
            Some(AttributeValue::Ss(v)) => v.into_iter().collect(),
            _ => BTreeSet::new(),
        }
    }

    /// A create by the previous release: the shard added to the index row's `shards`, then
    /// the row put.
    async fn legacy_create(&self, n: u32) {
        self.raw
            .update_item()
            .table_name(&self.name)
            .key("lease_key", AttributeValue::S(format!("{STREAM}:*")))
            .update_expression("ADD shards :s")
            .expression_attribute_values(":s", AttributeValue::Ss(vec![shard(n)]))
            .send()
            .await
            .expect("legacy index add");
        self.raw
            .put_item()
            .table_name(&self.name)
            .item("lease_key", AttributeValue::S(key(n).to_string()))
            .item("lease_counter", AttributeValue::N("1".into()))
            .item("lease_expiry", AttributeValue::N("0".into()))
            .send()
            .await
            .expect("legacy put");
    }

    async fn listed(&self) -> BTreeSet<String> {
        self.store
            .list(STREAM)
            .await
            .expect("list")
            .into_iter()
            .map(|r| r.key.shard().to_owned())
            .collect()
    }

    /// Every item of the table and its size as DynamoDB counts it (names plus values).
    async fn item_sizes(&self) -> Vec<(String, usize)> {
        let items = self
            .raw
            .scan()
            .table_name(&self.name)
            .send()
            .await
            .expect("Scan")
            .items
            .unwrap_or_default();
        items
            .into_iter()
            .map(|item| {
                let key = match item.get("lease_key") {
                    Some(AttributeValue::S(k)) => k.clone(),
                    _ => String::new(),
                };
                let size = item
                    .iter()
                    .map(|(name, value)| {
                        name.len()
                            + match value {
                                AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
                                AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
                                _ => 8,
                            }
                    })
                    .sum();
                (key, size)
            })
            .collect()
    }
}

fn names(ns: impl IntoIterator<Item = u32>) -> BTreeSet<String> {
    ns.into_iter().map(shard).collect()
}

/// A new table: 300 shards over three pages; the header names pages only, and no item of the
/// index is larger than one read unit.
#[tokio::test]
async fn no_index_item_grows_with_the_stream() {
    let t = table().await;
    for n in 0..300 {
        t.store
            .create(&Lease::new(key(n), Vec::new()))
            .await
            .unwrap();
    }
    assert_eq!(t.listed().await, names(0..300));
    assert!(
        t.legacy_listing().await.is_empty(),
        "a new header has no `shards`"
    );
    let header = t.item(&format!("{STREAM}:*")).await.expect("a header");
    assert_eq!(
        header.get("index_format"),
        Some(&AttributeValue::N("2".into()))
    );
    let sizes = t.item_sizes().await;
    let index: Vec<&(String, usize)> = sizes.iter().filter(|(k, _)| k.contains(":*")).collect();
    // The header, three pages (0-127, 128-255, 256-299).
    assert_eq!(index.len(), 4, "{index:?}");
    assert!(index.iter().all(|(_, size)| *size < 4_096), "{index:?}");
    // Deleting empties a page without touching the header.
    let before = t.item(&format!("{STREAM}:*")).await;
    for n in 256..300 {
        let row = t.store.read(&key(n)).await.unwrap().unwrap();
        assert!(t.store.delete(&key(n), row.counter).await.unwrap());
    }
    assert_eq!(t.item(&format!("{STREAM}:*")).await, before);
    assert_eq!(t.listed().await, names(0..256));
}

/// A rolling deploy: the previous release made the table; this one lists its rows, adds and
/// deletes in a way the previous one still lists, and after `migrate_index` the header is
/// paged, its `shards` gone, and a straggler of the previous release is still listed.
#[tokio::test]
async fn a_table_of_the_previous_release_stays_readable_by_both_until_migrated() {
    let t = table().await;
    for n in 0..3 {
        t.legacy_create(n).await;
    }
    assert_eq!(t.listed().await, names(0..3));

    // This release creates and deletes: the previous one sees both.
    assert!(t
        .store
        .create(&Lease::new(key(200), Vec::new()))
        .await
        .unwrap());
    let row = t.store.read(&key(0)).await.unwrap().unwrap();
    assert!(t.store.delete(&key(0), row.counter).await.unwrap());
    assert_eq!(t.legacy_listing().await, names([1, 2, 200]));
    assert_eq!(t.listed().await, names([1, 2, 200]));

    // The previous release creates meanwhile: this one lists it.
    t.legacy_create(7).await;
    assert_eq!(t.listed().await, names([1, 2, 7, 200]));

    let migrated = t.store.migrate_index(STREAM).await.unwrap();
    assert!(!migrated.already_paged);
    assert_eq!(migrated.moved, 4);
    assert!(t.legacy_listing().await.is_empty());
    let header = t.item(&format!("{STREAM}:*")).await.unwrap();
    assert_eq!(
        header.get("index_format"),
        Some(&AttributeValue::N("2".into()))
    );
    assert_eq!(t.listed().await, names([1, 2, 7, 200]));

    // A straggler of the previous release after the migration: still listed.
    t.legacy_create(9).await;
    assert_eq!(t.listed().await, names([1, 2, 7, 9, 200]));
    // Another process of this release, started after it: lists the same, writes pages only.
    let other = DynamoLeaseStore::new(&sdk_config(Service::Dynamodb).await, &t.name);
    assert!(other
        .create(&Lease::new(key(300), Vec::new()))
        .await
        .unwrap());
    assert_eq!(t.legacy_listing().await, names([9]));
    assert_eq!(t.listed().await, names([1, 2, 7, 9, 200, 300]));
    // A second migration moves the straggler and is otherwise a no-op.
    assert_eq!(t.store.migrate_index(STREAM).await.unwrap().moved, 1);
    assert!(t.store.migrate_index(STREAM).await.unwrap().already_paged);
    assert_eq!(t.listed().await, names([1, 2, 7, 9, 200, 300]));
}

/// A legacy header whose `shards` is full: DynamoDB refuses to add a shard id to an item past
/// 400 KB (about 20,400 ids), so the previous release can list no new shard. This release, told
/// so, turns the header paged by itself on the next create, and nothing it named is lost.
/// (moto does not enforce the item size: the proxy refuses every `ADD` to the header as
/// DynamoDB does, with the message DynamoDB gives.)
#[tokio::test]
async fn a_full_legacy_header_turns_paged_by_itself() {
    let account = unique_account();
    let proxy = FaultProxy::start(&endpoint(Service::Dynamodb)).await;
    let direct = sdk_config_via(&account, &endpoint(Service::Dynamodb)).await;
    let name = unique_name("full");
    let store = DynamoLeaseStore::new(&sdk_config_via(&account, proxy.endpoint()).await, &name);
    store.ensure_table().await.expect("ensure_table");
    let t = Table {
        store,
        raw: aws_sdk_dynamodb::Client::new(&direct),
        name,
    };
    let ids: Vec<String> = (0..2_000).map(|n| shard(n + 1_000)).collect();
    t.raw
        .put_item()
        .table_name(&t.name)
        .item("lease_key", AttributeValue::S(format!("{STREAM}:*")))
        .item("shards", AttributeValue::Ss(ids.clone()))
        .send()
        .await
        .expect("a legacy header");
    // An addition to the full item is refused (of a page name, the first this release
    // sends); once the header is paged it is small again and takes additions.
    proxy.refuse(
        "UpdateItem",
        &[
            &format!(r#""S":"{STREAM}:*""#),
            r#""UpdateExpression":"ADD "#,
        ],
        "ValidationException",
        "Item size to update has exceeded the maximum allowed size",
        1,
    );

    assert!(t
        .store
        .create(&Lease::new(key(5), Vec::new()))
        .await
        .unwrap());
    assert_eq!(proxy.counts().1, 1, "the header's add was refused");
    let header = t.item(&format!("{STREAM}:*")).await.unwrap();
    assert_eq!(
        header.get("index_format"),
        Some(&AttributeValue::N("2".into()))
    );
    assert!(!header.contains_key("shards"), "the legacy set moved out");
    let Some(AttributeValue::Ss(pages)) = header.get("pages") else {
        panic!("no pages in {:?}", header.keys());
    };
    let mut paged = BTreeSet::new();
    for page in pages {
        if let Some(AttributeValue::Ss(v)) = t
            .item(&format!("{STREAM}:*p{page}"))
            .await
            .and_then(|mut i| i.remove("shards"))
        {
            paged.extend(v);
        }
    }
    let mut expected: BTreeSet<String> = ids.into_iter().collect();
    expected.insert(shard(5));
    assert!(paged == expected, "every id moved into its page");
    assert!(t.item_sizes().await.iter().all(|(_, size)| *size < 4_096));
    // Further creates write pages only (the header is paged now): nothing more refused.
    let refused = proxy.counts().1;
    assert!(t
        .store
        .create(&Lease::new(key(6), Vec::new()))
        .await
        .unwrap());
    assert_eq!(proxy.counts().1, refused);
    // Listed by this process and by a fresh one (rows of the 2,000 ids were never put).
    let other = DynamoLeaseStore::new(&direct, &t.name);
    for store in [&t.store, &other] {
        let rows = store.list(STREAM).await.unwrap();
        assert_eq!(
            rows.iter().map(|r| r.key.shard()).collect::<Vec<_>>(),
            [shard(5).as_str(), shard(6).as_str()]
        );
    }
}
