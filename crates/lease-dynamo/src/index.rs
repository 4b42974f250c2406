//! The index: per stream a header row (`stream:*`) naming its pages, and pages
//! (`stream:*p<page>`) naming its shards (see `pages` for the layout and the formats); and
//! the epoch rows (`stream:*epoch`), holding a counter bumped whenever rows are freed or moved.
//! The epoch has a row of its own because DynamoDB bills a read by the whole item. Listing a
//! stream reads its header, its pages, then its rows, each in consistent reads (BatchGetItem
//! calls of up to 100 keys).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use kinesis_lease_core::{Epochs, Lease, LeaseError, LeaseKey, LeaseResult};

use crate::item::{
    epoch_key, index_key, n, s, to_lease, Item, EPOCH, FORMAT, KEY, PAGES, ROSTER_EPOCH, SHARDS,
};
use crate::pages::{page_key, page_of, Format, Known, PAGED_FORMAT};
use crate::retry::retrying;
use crate::store::refused;
use crate::DynamoLeaseStore;

/// True when DynamoDB refused a write because the item would pass its size limit (400 KB):
/// a `ValidationException` whose message speaks of the item's size.
fn too_large(error: &LeaseError) -> bool {
    let LeaseError::Refused { source, .. } = error else {
        return false;
    };
    source
        .downcast_ref::<SdkError<UpdateItemError, HttpResponse>>()
        .is_some_and(|e| {
            e.code() == Some("ValidationException")
                && e.message().is_some_and(|m| m.contains("size"))
        })
}

/// BatchGetItem takes at most 100 keys.
const BATCH: usize = 100;

/// A stream's index header as read.
#[derive(Debug)]
struct Header {
    format: Format,
    pages: Vec<String>,
    legacy: Vec<String>,
}

/// What [`DynamoLeaseStore::migrate_index`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexMigration {
    /// The header's format was already paged: nothing needed moving.
    pub already_paged: bool,
    /// Shard ids copied from the header's `shards` into pages.
    pub moved: usize,
}

impl DynamoLeaseStore {
    /// An unconditional `ADD` of `value` to `attribute` of the item keyed `index`.
    pub(crate) async fn add_to_index(
        &self,
        index: String,
        attribute: &str,
        value: AttributeValue,
    ) -> LeaseResult<()> {
        self.try_add(index, attribute, value)
            .await
            .map_err(|(e, _)| e)
    }

    /// As `add_to_index`, saying besides whether DynamoDB refused the item as too large.
    async fn try_add(
        &self,
        index: String,
        attribute: &str,
        value: AttributeValue,
    ) -> Result<(), (LeaseError, bool)> {
        let resource = self.resource(&index);
        let out = retrying(self.retry, &self.table, "UpdateItem", &resource, || {
            self.count(&self.calls.writes);
            self.client
                .update_item()
                .table_name(&*self.table)
                .key(KEY, s(index.clone()))
                .update_expression(format!("ADD {attribute} :value"))
                .expression_attribute_values(":value", value.clone())
                .send()
        })
        .await;
        match out {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err((refused("UpdateItem", &resource, e), false)),
            Err(error) => {
                let too_large = too_large(&error);
                Err((error, too_large))
            }
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        self.headers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `stream`'s header (consistent), noting its format and pages; `None` when the
    /// stream has none yet.
    async fn read_header(&self, stream: &str) -> LeaseResult<Option<Header>> {
        let key = index_key(stream);
        let Some(mut item) = self.get(&key).await? else {
            return Ok(None);
        };
        let corrupt = |reason: String| LeaseError::CorruptRow {
            table: self.table.to_string(),
            key: key.clone(),
            reason,
        };
        let set = |item: &mut Item, name: &str| match item.remove(name) {
            None => Ok(Vec::new()),
            Some(AttributeValue::Ss(v)) => Ok(v),
            Some(_) => Err(corrupt(format!("`{name}` is not a string set"))),
        };
        let legacy = set(&mut item, SHARDS)?;
        let pages = set(&mut item, PAGES)?;
        let format = match item.remove(FORMAT) {
            None => None,
            Some(AttributeValue::N(v)) => Some(
                v.parse()
                    .map_err(|_| corrupt(format!("`{FORMAT}` = {v} is not a u64")))?,
            ),
            Some(_) => return Err(corrupt(format!("`{FORMAT}` is not a number"))),
        };
        let header = Header {
            format: Format::of(format),
            pages,
            legacy,
        };
        let mut known = self.known();
        let entry = known.entry(stream.to_owned()).or_default();
        entry.format = Some(header.format);
        entry.pages.extend(header.pages.iter().cloned());
        Ok(Some(header))
    }

    /// `stream`'s header format, as last seen; read (and, when `create`, written as paged
    /// when the stream has no header yet) the first time.
    pub(crate) async fn format(&self, stream: &str, create: bool) -> LeaseResult<Format> {
        if let Some(format) = self.known().get(stream).and_then(|k| k.format) {
            return Ok(format);
        }
        loop {
            if let Some(header) = self.read_header(stream).await? {
                return Ok(header.format);
            }
            if !create {
                return Ok(Format::Paged);
            }
            let key = index_key(stream);
            let resource = self.resource(&key);
            let out = retrying(self.retry, &self.table, "PutItem", &resource, || {
                self.count(&self.calls.writes);
                self.client
                    .put_item()
                    .table_name(&*self.table)
                    .item(KEY, s(key.clone()))
                    .item(FORMAT, n(PAGED_FORMAT))
                    .condition_expression(format!("attribute_not_exists({KEY})"))
                    .send()
            })
            .await?;
            match out {
                // Written, or written by another process meanwhile: read it back.
                Ok(_) | Err(PutItemError::ConditionalCheckFailedException(_)) => {}
                Err(other) => return Err(refused("PutItem", &resource, other)),
            }
        }
    }

    /// Adds `key`'s shard to its stream's index (idempotent): its page named in the header,
    /// the shard in its page and, on a legacy header, in the header's `shards` too.
    pub(crate) async fn index_add(&self, key: &LeaseKey) -> LeaseResult<()> {
        let stream = key.stream();
        let shard = key.shard();
        // The header exists (created paged when the stream had none) and its format is known.
        self.format(stream, true).await?;
        let page = page_of(shard);
        let named = self
            .known()
            .get(stream)
            .is_some_and(|k| k.pages.contains(&page));
        if !named {
            // The name before the page's content: a shard in a page is listed only once the
            // header names the page.
            let name = AttributeValue::Ss(vec![page.clone()]);
            match self.try_add(index_key(stream), PAGES, name.clone()).await {
                Ok(()) => {}
                // A legacy header full to DynamoDB's limit takes no page name either: move
                // its `shards` out (see below), which names the pages it needs, then this one.
                // (A paged header has `shards` too when processes of the previous release
                // added to it after all.)
                Err((error, true)) => {
                    tracing::warn!(%stream, error = %kinesis_lease_core::ErrorChain(&error), "the index header is full; moving the stream's index into pages");
                    self.migrate_index(stream).await?;
                    self.add_to_index(index_key(stream), PAGES, name).await?;
                }
                Err((error, _)) => return Err(error),
            }
            self.known()
                .entry(stream.to_owned())
                .or_default()
                .pages
                .insert(page.clone());
        }
        self.add_to_index(
            page_key(stream, &page),
            SHARDS,
            AttributeValue::Ss(vec![shard.to_owned()]),
        )
        .await?;
        // Read again: a migration above made the header paged.
        let format = self.format(stream, true).await?;
        if format == Format::Legacy {
            let legacy = AttributeValue::Ss(vec![shard.to_owned()]);
            match self.try_add(index_key(stream), SHARDS, legacy).await {
                Ok(()) => {}
                // The previous release could not add to it either: no reader of `shards`
                // alone lists this stream any more, so the header turns paged.
                Err((error, true)) => {
                    tracing::warn!(%stream, error = %kinesis_lease_core::ErrorChain(&error), "the index header's `shards` is full; moving the stream's index into pages");
                    self.migrate_index(stream).await?;
                }
                Err((error, false)) => return Err(error),
            }
        }
        Ok(())
    }

    /// Moves `stream`'s index out of a legacy header: every shard its `shards` names is added
    /// to its page, then the header is marked paged and the shards copied are taken out of
    /// `shards` (shards a process of the previous release adds meanwhile stay there, and are
    /// listed). Idempotent; safe while instances run. Run it once no process of a release
    /// before paged indexes uses the table: those read `shards` only.
    ///
    /// # Errors
    ///
    /// As [`list`](kinesis_lease_core::LeaseStore::list): [`LeaseError::TableNotFound`],
    /// [`LeaseError::Unavailable`], [`LeaseError::Refused`], [`LeaseError::CorruptRow`].
    pub async fn migrate_index(&self, stream: &str) -> LeaseResult<IndexMigration> {
        let Some(header) = self.read_header(stream).await? else {
            return Ok(IndexMigration {
                already_paged: true,
                moved: 0,
            });
        };
        let already_paged = header.format == Format::Paged && header.legacy.is_empty();
        if already_paged {
            return Ok(IndexMigration {
                already_paged,
                moved: 0,
            });
        }
        let mut by_page: HashMap<String, Vec<String>> = HashMap::new();
        for shard in &header.legacy {
            by_page
                .entry(page_of(shard))
                .or_default()
                .push(shard.clone());
        }
        // The pages' contents first (the ids stay in `shards` meanwhile, so listed), then
        // in one update of the header: the pages named, the format set, the ids copied taken
        // out of `shards`. One update, because a full header takes no page name until its
        // `shards` shrinks (DynamoDB checks the item as the update leaves it).
        for (page, shards) in &by_page {
            self.add_to_index(
                page_key(stream, page),
                SHARDS,
                AttributeValue::Ss(shards.clone()),
            )
            .await?;
        }
        let names: Vec<String> = by_page.keys().cloned().collect();
        let key = index_key(stream);
        let resource = self.resource(&key);
        let mut update = format!("SET {FORMAT} = :format");
        if !names.is_empty() {
            update.push_str(&format!(" ADD {PAGES} :names DELETE {SHARDS} :copied"));
        }
        retrying(self.retry, &self.table, "UpdateItem", &resource, || {
            self.count(&self.calls.writes);
            let mut request = self
                .client
                .update_item()
                .table_name(&*self.table)
                .key(KEY, s(key.clone()))
                .update_expression(update.clone())
                .expression_attribute_values(":format", n(PAGED_FORMAT));
            if !names.is_empty() {
                request = request
                    .expression_attribute_values(":names", AttributeValue::Ss(names.clone()))
                    .expression_attribute_values(
                        ":copied",
                        AttributeValue::Ss(header.legacy.clone()),
                    );
            }
            request.send()
        })
        .await?
        .map_err(|e| refused("UpdateItem", &resource, e))?;
        self.known()
            .entry(stream.to_owned())
            .or_default()
            .pages
            .extend(names);
        self.known().entry(stream.to_owned()).or_default().format = Some(Format::Paged);
        Ok(IndexMigration {
            already_paged: false,
            moved: header.legacy.len(),
        })
    }

    /// Bumps `stream`'s epoch: rows were freed or moved. A roster's bump is also counted in
    /// its stream's epoch item (`roster_epoch`), so that one read of that item tells both
    /// (`LeaseStore::epochs`); the roster's own epoch item is still bumped first, for
    /// instances of earlier releases, which read it.
    pub(crate) async fn bump(&self, stream: &str) -> LeaseResult<()> {
        self.add_to_index(epoch_key(stream), EPOCH, n(1)).await?;
        if let Some(base) = LeaseKey::roster_of(stream) {
            self.add_to_index(epoch_key(base), ROSTER_EPOCH, n(1))
                .await?;
        }
        Ok(())
    }

    /// Reads `stream`'s epoch (0 before the first bump), eventually consistent: the epoch only
    /// says when to list, and a read that misses a bump by a replica's lag (usually well under
    /// a second) sees it at the next read; read so, it costs half.
    pub(crate) async fn read_epoch(&self, stream: &str) -> LeaseResult<u64> {
        Ok(self.read_epochs(stream).await?.rows)
    }

    /// Reads `stream`'s epoch item: its epoch and its count of roster bumps (0 when absent),
    /// eventually consistent, in one GetItem of half a read unit.
    pub(crate) async fn read_epochs(&self, stream: &str) -> LeaseResult<Epochs> {
        let index = epoch_key(stream);
        let resource = self.resource(&index);
        let out = retrying(self.retry, &self.table, "GetItem", &resource, || {
            self.count(&self.calls.reads);
            self.client
                .get_item()
                .table_name(&*self.table)
                .key(KEY, s(index.clone()))
                .consistent_read(false)
                .projection_expression(format!("{EPOCH}, {ROSTER_EPOCH}"))
                .send()
        })
        .await?
        .map_err(|e| refused("GetItem", &resource, e))?;
        let number = |name: &str| match out.item.as_ref().and_then(|i| i.get(name)) {
            None => Ok(0),
            Some(AttributeValue::N(v)) => v.parse().map_err(|_| LeaseError::CorruptRow {
                table: self.table.to_string(),
                key: index.clone(),
                reason: format!("`{name}` = {v} is not a u64"),
            }),
            Some(_) => Err(LeaseError::CorruptRow {
                table: self.table.to_string(),
                key: index.clone(),
                reason: format!("`{name}` is not a number"),
            }),
        };
        Ok(Epochs::new(number(EPOCH)?, number(ROSTER_EPOCH)?))
    }

    /// Every row of `stream`, through its index.
    pub(crate) async fn list_indexed(&self, stream: &str) -> LeaseResult<Vec<Lease>> {
        self.list_with_progress(stream, |_, _| {}).await
    }

    /// Every row of `stream`, as [`list`](kinesis_lease_core::LeaseStore::list) reads them
    /// (the index header and pages, then consistent BatchGetItem calls of up to 100 rows), calling
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
        let shards = self.indexed_shards(stream).await?;
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

    /// Every shard `stream`'s index names: the header's `shards` (a legacy header) and every
    /// page the header names, read consistently.
    async fn indexed_shards(&self, stream: &str) -> LeaseResult<Vec<String>> {
        let Some(header) = self.read_header(stream).await? else {
            return Ok(Vec::new());
        };
        let mut shards: BTreeSet<String> = header.legacy.into_iter().collect();
        for chunk in header.pages.chunks(BATCH) {
            let keys = chunk
                .iter()
                .map(|page| Item::from([(KEY.to_owned(), s(page_key(stream, page)))]))
                .collect();
            for mut page in self.batch_get(stream, keys).await? {
                match page.remove(SHARDS) {
                    None => {}
                    Some(AttributeValue::Ss(names)) => shards.extend(names),
                    Some(_) => {
                        let key = match page.get(KEY) {
                            Some(AttributeValue::S(k)) => k.clone(),
                            _ => index_key(stream),
                        };
                        return Err(LeaseError::CorruptRow {
                            table: self.table.to_string(),
                            key,
                            reason: format!("`{SHARDS}` is not a string set"),
                        });
                    }
                }
            }
        }
        Ok(shards.into_iter().collect())
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
