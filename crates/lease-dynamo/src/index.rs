//! The index rows: one per stream (`stream:*`), listing its shards (a string set); and the
//! epoch rows (`stream:*epoch`), holding a counter bumped whenever rows are freed or moved.
//! The epoch has a row of its own because DynamoDB bills a read by the whole item: read from
//! the index row, every epoch read would cost more as the stream gains shards. Listing a
//! stream reads its index row, then its rows in consistent BatchGetItem calls of up to 100
//! keys.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use kinesis_lease_core::{Lease, LeaseError, LeaseKey, LeaseResult};

use crate::item::{epoch_key, index_key, n, s, to_lease, Item, EPOCH, KEY, SHARDS};
use crate::retry::retrying;
use crate::store::refused;
use crate::DynamoLeaseStore;

/// BatchGetItem takes at most 100 keys.
const BATCH: usize = 100;

impl DynamoLeaseStore {
    /// An unconditional `ADD` of `value` to `attribute` of the item keyed `index`.
    pub(crate) async fn add_to_index(
        &self,
        index: String,
        attribute: &str,
        value: AttributeValue,
    ) -> LeaseResult<()> {
        let resource = self.resource(&index);
        retrying(self.retry, &self.table, "UpdateItem", &resource, || {
            self.count(&self.calls.writes);
            self.client
                .update_item()
                .table_name(&*self.table)
                .key(KEY, s(index.clone()))
                .update_expression(format!("ADD {attribute} :value"))
                .expression_attribute_values(":value", value.clone())
                .send()
        })
        .await?
        .map_err(|e| refused("UpdateItem", &resource, e))?;
        Ok(())
    }

    /// Adds `key`'s shard to its stream's index row (idempotent).
    pub(crate) async fn index_add(&self, key: &LeaseKey) -> LeaseResult<()> {
        let shard = AttributeValue::Ss(vec![key.shard().to_owned()]);
        self.add_to_index(index_key(key.stream()), SHARDS, shard)
            .await
    }

    /// Bumps `stream`'s epoch: rows were freed or moved.
    pub(crate) async fn bump(&self, stream: &str) -> LeaseResult<()> {
        self.add_to_index(epoch_key(stream), EPOCH, n(1)).await
    }

    /// Reads `stream`'s epoch (strongly consistent; 0 before the first bump).
    pub(crate) async fn read_epoch(&self, stream: &str) -> LeaseResult<u64> {
        let index = epoch_key(stream);
        let resource = self.resource(&index);
        let out = retrying(self.retry, &self.table, "GetItem", &resource, || {
            self.count(&self.calls.reads);
            self.client
                .get_item()
                .table_name(&*self.table)
                .key(KEY, s(index.clone()))
                .consistent_read(true)
                .projection_expression(EPOCH)
                .send()
        })
        .await?
        .map_err(|e| refused("GetItem", &resource, e))?;
        match out.item.as_ref().and_then(|i| i.get(EPOCH)) {
            None => Ok(0),
            Some(AttributeValue::N(v)) => v.parse().map_err(|_| LeaseError::CorruptRow {
                table: self.table.to_string(),
                key: index.clone(),
                reason: format!("`{EPOCH}` = {v} is not a u64"),
            }),
            Some(_) => Err(LeaseError::CorruptRow {
                table: self.table.to_string(),
                key: index,
                reason: format!("`{EPOCH}` is not a number"),
            }),
        }
    }

    /// Every row of `stream`, through its index row.
    pub(crate) async fn list_indexed(&self, stream: &str) -> LeaseResult<Vec<Lease>> {
        self.list_with_progress(stream, |_, _| {}).await
    }

    /// Every row of `stream`, as [`list`](kinesis_lease_core::LeaseStore::list) reads them
    /// (the index row, then consistent BatchGetItem calls of up to 100 rows), calling
    /// `progress(rows read, rows listed in the index)` after each batch: for tools that show
    /// progress on long listings.
    ///
    /// # Errors
    ///
    /// As `list`: [`LeaseError::TableNotFound`], [`LeaseError::Unavailable`],
    /// [`LeaseError::Refused`], [`LeaseError::CorruptRow`].
    pub async fn list_with_progress(
        &self,
        stream: &str,
        mut progress: impl FnMut(usize, usize),
    ) -> LeaseResult<Vec<Lease>> {
        let shards = match self
            .get(&index_key(stream))
            .await?
            .and_then(|mut i| i.remove(SHARDS))
        {
            Some(AttributeValue::Ss(shards)) => shards,
            Some(_) => {
                return Err(LeaseError::CorruptRow {
                    table: self.table.to_string(),
                    key: index_key(stream),
                    reason: format!("`{SHARDS}` is not a string set"),
                })
            }
            None => return Ok(Vec::new()),
        };
        let mut rows = Vec::with_capacity(shards.len());
        for chunk in shards.chunks(BATCH) {
            let keys = chunk
                .iter()
                .map(|shard| Item::from([(KEY.to_owned(), s(format!("{stream}:{shard}")))]))
                .collect();
            for item in self.batch_get(stream, keys).await? {
                rows.push(to_lease(&self.table, &item)?);
            }
            progress(rows.len(), shards.len());
        }
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(rows)
    }

    /// Consistent BatchGetItem of up to 100 keys, re-asking for unprocessed keys.
    async fn batch_get(&self, stream: &str, keys: Vec<Item>) -> LeaseResult<Vec<Item>> {
        let resource = self.resource(&index_key(stream));
        let mut pending = keys;
        let mut items = Vec::new();
        let mut rounds = 0u32;
        while !pending.is_empty() {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut pending)))
                .consistent_read(true)
                .build()
                .map_err(|e| refused("BatchGetItem", &resource, e))?;
            let out = retrying(self.retry, &self.table, "BatchGetItem", &resource, || {
                self.count(&self.calls.reads);
                self.client
                    .batch_get_item()
                    .request_items(&*self.table, request.clone())
                    .send()
            })
            .await?
            .map_err(|e| refused("BatchGetItem", &resource, e))?;
            items.extend(
                out.responses
                    .and_then(|mut r| r.remove(&*self.table))
                    .unwrap_or_default(),
            );
            if let Some(left) = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&*self.table))
            {
                pending = left.keys;
                rounds += 1;
                if rounds > 10 {
                    return Err(LeaseError::Unavailable {
                        operation: "BatchGetItem",
                        resource,
                        source: "keys still unprocessed after 10 rounds".into(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(20 << rounds.min(5))).await;
            }
        }
        Ok(items)
    }
}
