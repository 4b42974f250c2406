//! `DynamoLeaseStore`: the `LeaseStore` rules as DynamoDB condition expressions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use kinesis_lease_core::{
    duration_ms, BoxFuture, Checkpoint, Clock, Holder, Lease, LeaseError, LeaseKey, LeaseResult,
    LeaseStore, Outcome, SystemClock, Take,
};

use crate::item::{
    index_key, lost_from, n, s, to_lease, Item, CHECKPOINT, COUNTER, EPOCH, EXPIRY, KEY, OWNER,
    PARENTS, REPOSITIONED, SHARDS, SUBSEQUENCE, TOKEN, WANTED_BY, WRITE_ID,
};
use crate::retry::{retrying, RetryPolicy};
use crate::{table, DynamoLeaseError};

/// The time one HTTP attempt may take before it is abandoned and retried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// BatchGetItem takes at most 100 keys.
const BATCH: usize = 100;

/// A [`LeaseStore`] over one DynamoDB table; see the crate docs for the layout and costs.
///
/// # Examples
///
/// ```no_run
/// use kinesis_lease_dynamo::DynamoLeaseStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
/// let store = DynamoLeaseStore::new(&config, "orders-leases");
/// store.ensure_table().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoLeaseStore {
    client: Client,
    table: Arc<str>,
    clock: Arc<dyn Clock>,
    retry: RetryPolicy,
    calls: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
}

/// How many DynamoDB calls a store has sent (every attempt counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DynamoCalls {
    /// GetItem and BatchGetItem calls.
    pub reads: u64,
    /// UpdateItem and PutItem calls.
    pub writes: u64,
}

impl DynamoLeaseStore {
    /// A store on `table`, with a client built from `config` (region, credentials, endpoint).
    ///
    /// The client's own retries are off and each attempt times out after 2 s: the store
    /// retries itself within its budget (see the crate docs).
    pub fn new(config: &SdkConfig, table: impl Into<String>) -> Self {
        let conf = aws_sdk_dynamodb::config::Builder::from(config)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                    .build(),
            )
            .build();
        Self::from_client(Client::from_conf(conf), table)
    }

    /// A store on `table` with a client of your own (its retry settings add to the store's).
    pub fn from_client(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into().into(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            calls: Arc::default(),
        }
    }

    /// The same store reading "now" from `clock` (tests inject a `ManualClock`).
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long one store call may keep retrying throttling and 5xx (default 2.5 s).
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry.budget = budget;
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// How many calls this store (and its clones) sent so far.
    pub fn calls(&self) -> DynamoCalls {
        DynamoCalls {
            reads: self.calls.reads.load(Ordering::Relaxed),
            writes: self.calls.writes.load(Ordering::Relaxed),
        }
    }

    /// Creates the table (PAY_PER_REQUEST, hash key `lease_key`) if it is missing and waits
    /// until it is ACTIVE.
    ///
    /// # Errors
    ///
    /// [`DynamoLeaseError::WrongKeySchema`] when the table exists with another key;
    /// [`DynamoLeaseError::Call`] when DynamoDB refuses; [`DynamoLeaseError::NotActive`] when it
    /// does not become ACTIVE within two minutes.
    pub async fn ensure_table(&self) -> Result<(), DynamoLeaseError> {
        table::ensure(&self.client, &self.table).await
    }

    /// Checks that the table exists and has the right key, without creating it.
    ///
    /// # Errors
    ///
    /// [`LeaseError::TableNotFound`] naming the table when it is missing;
    /// [`LeaseError::Refused`] with a [`DynamoLeaseError::WrongKeySchema`] source when the key
    /// is wrong.
    pub async fn check_table(&self) -> Result<(), LeaseError> {
        let resource = self.table.to_string();
        let out = retrying(self.retry, &self.table, "DescribeTable", &resource, || {
            self.count(&self.calls.reads);
            self.client.describe_table().table_name(&*self.table).send()
        })
        .await?
        .map_err(|e| refused("DescribeTable", &resource, e))?;
        table::check_schema(&self.table, out.table.as_ref())
            .map_err(|e| refused("DescribeTable", &resource, e))
    }

    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn resource(&self, key: &str) -> String {
        format!("{}/{key}", self.table)
    }

    /// An unconditional `ADD` of `value` to `attribute` of `stream`'s index row.
    async fn add_to_index(
        &self,
        stream: &str,
        attribute: &str,
        value: AttributeValue,
    ) -> LeaseResult<()> {
        let index = index_key(stream);
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

    /// One conditional UpdateItem that bumps the counter and returns the new row.
    ///
    /// Every write stamps a fresh write id, and its condition refuses an item that already
    /// carries it, so a retry never lands twice (a renewal's condition would otherwise still
    /// hold after its own first attempt). When a condition fails, the item DynamoDB returns is
    /// read for that id: if it is ours, an earlier attempt of this same call landed and only
    /// its response was lost, so the write is reported as written, once.
    async fn update(&self, key: &LeaseKey, expr: Expr, condition: &str) -> LeaseResult<Outcome> {
        let raw_key = key.to_string();
        let resource = self.resource(&raw_key);
        let write_id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let expr = expr.set(WRITE_ID, ":write_id", s(write_id.as_str()));
        let condition = format!(
            "({condition}) AND (attribute_not_exists({WRITE_ID}) OR {WRITE_ID} <> :write_id)"
        );
        let condition = condition.as_str();
        let update = expr.render();
        let out = retrying(self.retry, &self.table, "UpdateItem", &resource, || {
            self.count(&self.calls.writes);
            let mut req = self
                .client
                .update_item()
                .table_name(&*self.table)
                .key(KEY, s(raw_key.clone()))
                .update_expression(update.clone())
                .condition_expression(condition)
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .expression_attribute_values(":one", n(1));
            for (name, value) in &expr.values {
                req = req.expression_attribute_values(*name, value.clone());
            }
            req.send()
        })
        .await?;
        match out {
            Ok(out) => Ok(Outcome::Written(to_lease(
                &self.table,
                &out.attributes.unwrap_or_default(),
            )?)),
            Err(UpdateItemError::ConditionalCheckFailedException(e)) => match e.item() {
                Some(item) if item.get(WRITE_ID) == Some(&s(write_id.as_str())) => {
                    tracing::debug!(key = %raw_key, "an earlier attempt of this write landed");
                    Ok(Outcome::Written(to_lease(&self.table, item)?))
                }
                item => Ok(Outcome::Lost(lost_from(item))),
            },
            Err(other) => Err(refused("UpdateItem", &resource, other)),
        }
    }

    /// Adds `key`'s shard to its stream's index row (idempotent).
    async fn index_add(&self, key: &LeaseKey) -> LeaseResult<()> {
        let shard = AttributeValue::Ss(vec![key.shard().to_owned()]);
        self.add_to_index(key.stream(), SHARDS, shard).await
    }

    async fn get(&self, raw_key: &str) -> LeaseResult<Option<Item>> {
        let resource = self.resource(raw_key);
        let out = retrying(self.retry, &self.table, "GetItem", &resource, || {
            self.count(&self.calls.reads);
            self.client
                .get_item()
                .table_name(&*self.table)
                .key(KEY, s(raw_key))
                .consistent_read(true)
                .send()
        })
        .await?
        .map_err(|e| refused("GetItem", &resource, e))?;
        Ok(out.item)
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

/// A final refusal of `operation` on `resource`.
fn refused(
    operation: &'static str,
    resource: &str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> LeaseError {
    LeaseError::Refused {
        operation,
        resource: resource.to_owned(),
        source: Box::new(error),
    }
}

/// An update expression under construction: SET and REMOVE clauses plus values.
#[derive(Default)]
struct Expr {
    set: Vec<String>,
    remove: Vec<&'static str>,
    values: Vec<(&'static str, AttributeValue)>,
}

impl Expr {
    fn set(mut self, attr: &str, name: &'static str, value: AttributeValue) -> Self {
        self.set.push(format!("{attr} = {name}"));
        self.values.push((name, value));
        self
    }

    fn remove(mut self, attr: &'static str) -> Self {
        self.remove.push(attr);
        self
    }

    fn value(mut self, name: &'static str, value: AttributeValue) -> Self {
        self.values.push((name, value));
        self
    }

    fn checkpoint(self, cp: Option<&Checkpoint>) -> Self {
        match cp {
            None => self,
            Some(cp) => {
                let with = self.set(CHECKPOINT, ":cp", s(cp.stored()));
                match cp.subsequence() {
                    Some(sub) => with.set(SUBSEQUENCE, ":sub", n(sub)),
                    None => with.remove(SUBSEQUENCE),
                }
            }
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        if !self.set.is_empty() {
            out.push_str("SET ");
            out.push_str(&self.set.join(", "));
            out.push(' ');
        }
        if !self.remove.is_empty() {
            out.push_str("REMOVE ");
            out.push_str(&self.remove.join(", "));
            out.push(' ');
        }
        out.push_str(&format!("ADD {COUNTER} :one"));
        out
    }
}

/// The condition of renew, checkpoint and release: this owner, this holding.
fn held() -> String {
    format!("{OWNER} = :owner AND {TOKEN} = :token")
}

impl Expr {
    /// The values of [`held`].
    fn holder(self, holder: &Holder) -> Self {
        self.value(":owner", s(holder.owner.as_str()))
            .value(":token", s(holder.token.as_str()))
    }
}

impl LeaseStore for DynamoLeaseStore {
    fn create<'a>(&'a self, row: &'a Lease) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let key = &row.key;
            // Index first: a row that exists is always listed.
            self.index_add(key).await?;
            let raw_key = key.to_string();
            let resource = self.resource(&raw_key);
            let out = retrying(self.retry, &self.table, "PutItem", &resource, || {
                self.count(&self.calls.writes);
                let mut req = self
                    .client
                    .put_item()
                    .table_name(&*self.table)
                    .item(KEY, s(raw_key.clone()))
                    .item(COUNTER, n(1))
                    .item(EXPIRY, n(0))
                    .condition_expression(format!("attribute_not_exists({KEY})"));
                if !row.parents.is_empty() {
                    req = req.item(PARENTS, AttributeValue::Ss(row.parents.clone()));
                }
                if let Some(cp) = &row.checkpoint {
                    req = req.item(CHECKPOINT, s(cp.stored()));
                    if let Some(sub) = cp.subsequence() {
                        req = req.item(SUBSEQUENCE, n(sub));
                    }
                }
                if let Some(marker) = &row.repositioned {
                    req = req.item(REPOSITIONED, s(marker.as_str()));
                }
                req.send()
            })
            .await?;
            match out {
                Ok(_) => Ok(true),
                Err(PutItemError::ConditionalCheckFailedException(_)) => Ok(false),
                Err(other) => Err(refused("PutItem", &resource, other)),
            }
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        take: &'a Take,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let mut expr = Expr::default()
                .set(OWNER, ":owner", s(holder.owner.as_str()))
                .set(TOKEN, ":token", s(holder.token.as_str()))
                .set(
                    EXPIRY,
                    ":expiry",
                    n(now.saturating_add(duration_ms(take.ttl))),
                )
                .remove(WANTED_BY)
                .checkpoint(take.checkpoint.as_ref());
            if let Some(marker) = &take.repositioned {
                expr = expr.set(REPOSITIONED, ":marker", s(marker.as_str()));
            }
            let condition = match take.fence {
                0 => format!("attribute_not_exists({KEY})"),
                fence => {
                    expr = expr.value(":fence", n(fence));
                    format!("{COUNTER} = :fence")
                }
            };
            let outcome = self.update(key, expr, &condition).await?;
            if matches!(&outcome, Outcome::Written(lease) if lease.counter == 1) {
                // This take created the row: list it.
                self.index_add(key).await?;
            }
            Ok(outcome)
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let expr = Expr::default()
                .set(EXPIRY, ":expiry", n(now.saturating_add(duration_ms(ttl))))
                .holder(holder)
                .checkpoint(checkpoint);
            self.update(key, expr, &held()).await
        })
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let expr = Expr::default().holder(holder).checkpoint(Some(checkpoint));
            self.update(key, expr, &held()).await
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let expr = Expr::default()
                .set(EXPIRY, ":expiry", n(0))
                .remove(OWNER)
                .remove(TOKEN)
                .remove(WANTED_BY)
                .holder(holder)
                .checkpoint(checkpoint);
            self.update(key, expr, &held()).await
        })
    }

    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        observed: u64,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let expr = Expr::default()
                .set(WANTED_BY, ":asker", s(asker))
                .value(":observed", n(observed));
            let condition = format!(
                "{COUNTER} = :observed AND attribute_exists({OWNER}) AND {OWNER} <> :asker \
                 AND attribute_not_exists({WANTED_BY})"
            );
            self.update(key, expr, &condition).await
        })
    }

    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        to: &'a str,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            let expr = Expr::default()
                .set(OWNER, ":to", s(to))
                .set(EXPIRY, ":expiry", n(now.saturating_add(duration_ms(ttl))))
                .remove(WANTED_BY)
                .remove(TOKEN)
                .holder(holder)
                .checkpoint(checkpoint);
            let condition = format!("{} AND {WANTED_BY} = :to", held());
            self.update(key, expr, &condition).await
        })
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(self.add_to_index(stream, EPOCH, n(1)))
    }

    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        Box::pin(async move {
            let index = index_key(stream);
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
        })
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            match self.get(&key.to_string()).await? {
                Some(item) => Ok(Some(to_lease(&self.table, &item)?)),
                None => Ok(None),
            }
        })
    }

    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        Box::pin(async move {
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
            }
            rows.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(rows)
        })
    }
}
