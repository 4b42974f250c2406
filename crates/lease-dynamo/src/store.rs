//! `DynamoLeaseStore`: the `LeaseStore` rules as DynamoDB condition expressions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use kinesis_lease_core::{
    duration_ms, rules, BoxFuture, Checkpoint, Clock, Holder, Lease, LeaseError, LeaseKey,
    LeaseResult, LeaseStore, Load, Outcome, SystemClock, Take,
};

use crate::condition::{self, Cond};
use crate::item::{
    index_key, lost_from, n, s, to_lease, Item, CHECKPOINT, COUNTER, EXPIRY, KEY, OWNER, PARENTS,
    POKED, POKED_AT, POKES, REPOSITIONED, SHARDS, SUBSEQUENCE, TOKEN, WANTED_BY, WRITE_ID,
};
use crate::pages::{page_key, page_of, Format};
use crate::retry::{retrying, RetryPolicy};
use crate::update::Expr;
use crate::{table, DynamoLeaseError};

/// The time one HTTP attempt may take before it is abandoned and retried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

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
    pub(crate) client: Client,
    pub(crate) table: Arc<str>,
    clock: Arc<dyn Clock>,
    pub(crate) retry: RetryPolicy,
    pub(crate) calls: Arc<Counters>,
    endpoint: Arc<str>,
    credentials: bool,
    /// Per stream, what this process knows of its index header (see `index`).
    pub(crate) headers:
        Arc<std::sync::Mutex<std::collections::HashMap<String, crate::pages::Known>>>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
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
        let mut store = Self::from_client(Client::from_conf(conf), table);
        store.endpoint = endpoint_of(config).into();
        store.credentials = config.credentials_provider().is_some();
        store
    }

    /// A store on `table` with a client of your own (its retry settings add to the store's).
    pub fn from_client(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into().into(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            calls: Arc::default(),
            endpoint: "the client's own endpoint".into(),
            credentials: true,
            headers: Arc::default(),
        }
    }

    /// The endpoint this store calls (`http://127.0.0.1:5000`,
    /// `https://dynamodb.eu-west-1.amazonaws.com`), for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The region its client signs for, if one is configured.
    pub fn region(&self) -> Option<&str> {
        self.client.config().region().map(|r| r.as_ref())
    }

    /// False when the store was built from an SDK config without a credentials provider
    /// (`DynamoLeaseStore::new`); a store over a client of your own says true.
    pub fn has_credentials_provider(&self) -> bool {
        self.credentials
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

    pub(crate) fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn resource(&self, key: &str) -> String {
        format!("{}/{key}", self.table)
    }

    /// One conditional UpdateItem that bumps the counter and returns the new row.
    ///
    /// Every write stamps a fresh write id, and its condition refuses an item that already
    /// carries it, so a retry never lands twice (a renewal's condition would otherwise still
    /// hold after its own first attempt). When a condition fails, the item DynamoDB returns is
    /// read for that id: if it is ours, an earlier attempt of this same call landed and only
    /// its response was lost, so the write is reported as written, once.
    /// A renewal: the expiry moves, and the checkpoint and the load are stored when given.
    async fn renewal(
        &self,
        key: &LeaseKey,
        holder: &Holder,
        ttl: Duration,
        checkpoint: Option<&Checkpoint>,
        load: Option<&Load>,
    ) -> LeaseResult<Outcome> {
        let now = self.clock.now_ms();
        let expr = Expr::default()
            .set(EXPIRY, ":expiry", n(now.saturating_add(duration_ms(ttl))))
            .checkpoint(checkpoint)
            .load(load);
        self.update(key, expr, condition::held(holder)).await
    }

    async fn update(&self, key: &LeaseKey, expr: Expr, condition: Cond) -> LeaseResult<Outcome> {
        let raw_key = key.to_string();
        let resource = self.resource(&raw_key);
        let write_id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let mut expr = expr.set(WRITE_ID, ":write_id", s(write_id.as_str()));
        expr.values.extend(condition.values());
        let condition = format!(
            "({}) AND (attribute_not_exists({WRITE_ID}) OR {WRITE_ID} <> :write_id)",
            condition.render()
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

    /// An operator's evict and the poke of the holder's member row in one transaction (see
    /// `LeaseStore::evict`). `None` when the member row does not exist (nothing was written).
    async fn evict_poking(
        &self,
        key: &LeaseKey,
        observed: u64,
        expr: Expr,
        member: &LeaseKey,
    ) -> LeaseResult<Option<Outcome>> {
        let raw_key = key.to_string();
        let resource = self.resource(&raw_key);
        let failed =
            |e: aws_sdk_dynamodb::error::BuildError| refused("TransactWriteItems", &resource, e);
        // As `update`: a random id stamped by this write, so a retry whose first attempt
        // landed recognises its own write.
        let write_id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let mut expr = expr.set(WRITE_ID, ":write_id", s(write_id.as_str()));
        let cond = condition::evict(observed);
        expr.values.extend(cond.values());
        let mut row = Update::builder()
            .table_name(&*self.table)
            .key(KEY, s(raw_key.clone()))
            .update_expression(expr.render())
            .condition_expression(format!(
                "({}) AND (attribute_not_exists({WRITE_ID}) OR {WRITE_ID} <> :write_id)",
                cond.render()
            ))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_values(":one", n(1));
        for (name, value) in &expr.values {
            row = row.expression_attribute_values(*name, value.clone());
        }
        let row = row.build().map_err(failed)?;
        let poke = Update::builder()
            .table_name(&*self.table)
            .key(KEY, s(member.to_string()))
            .update_expression(poke_update())
            .condition_expression(format!("attribute_exists({KEY})"))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":about", s(key.shard()))
            .build()
            .map_err(failed)?;
        let out = retrying(
            self.retry,
            &self.table,
            "TransactWriteItems",
            &resource,
            || {
                self.count(&self.calls.writes);
                self.client
                    .transact_write_items()
                    .transact_items(TransactWriteItem::builder().update(row.clone()).build())
                    .transact_items(TransactWriteItem::builder().update(poke.clone()).build())
                    .send()
            },
        )
        .await?;
        let failed_check = |r: &aws_sdk_dynamodb::types::CancellationReason| {
            r.code() == Some("ConditionalCheckFailed")
        };
        match out {
            // A transaction returns no item: read the row as it now stands.
            Ok(_) => self.evicted_row(key, &resource).await.map(Some),
            Err(TransactWriteItemsError::TransactionCanceledException(e)) => {
                let reasons = e.cancellation_reasons();
                let row_failed = reasons.first().is_some_and(failed_check);
                let member_failed = reasons.get(1).is_some_and(failed_check);
                if row_failed {
                    let item = match reasons.first().and_then(|r| r.item()) {
                        Some(item) => Some(item.clone()),
                        // An emulator may not return the old item: read it.
                        None => self.get(&raw_key).await?,
                    };
                    if item
                        .as_ref()
                        .is_some_and(|i| i.get(WRITE_ID) == Some(&s(write_id.as_str())))
                    {
                        tracing::debug!(key = %raw_key, "an earlier attempt of this evict landed");
                        return self.evicted_row(key, &resource).await.map(Some);
                    }
                    Ok(Some(Outcome::Lost(lost_from(item.as_ref()))))
                } else if member_failed {
                    Ok(None)
                } else {
                    Err(LeaseError::Unavailable {
                        operation: "evict",
                        resource,
                        source: Box::new(e),
                    })
                }
            }
            Err(other) => Err(refused("TransactWriteItems", &resource, other)),
        }
    }

    /// The row after an evict that landed, read back (strongly consistent).
    async fn evicted_row(&self, key: &LeaseKey, resource: &str) -> LeaseResult<Outcome> {
        match self.get(&key.to_string()).await? {
            Some(item) => Ok(Outcome::Written(to_lease(&self.table, &item)?)),
            None => Err(LeaseError::Unavailable {
                operation: "evict",
                resource: resource.to_owned(),
                source: "the evicted row was deleted before it could be read back".into(),
            }),
        }
    }

    pub(crate) async fn get(&self, raw_key: &str) -> LeaseResult<Option<Item>> {
        self.get_with(raw_key, true).await
    }

    /// A GetItem of `raw_key`, strongly consistent or not.
    async fn get_with(&self, raw_key: &str, consistent: bool) -> LeaseResult<Option<Item>> {
        let resource = self.resource(raw_key);
        let out = retrying(self.retry, &self.table, "GetItem", &resource, || {
            self.count(&self.calls.reads);
            self.client
                .get_item()
                .table_name(&*self.table)
                .key(KEY, s(raw_key))
                .consistent_read(consistent)
                .send()
        })
        .await?
        .map_err(|e| refused("GetItem", &resource, e))?;
        Ok(out.item)
    }
}

/// The endpoint a client built from `config` calls, as the SDK resolves it:
/// `AWS_ENDPOINT_URL_DYNAMODB` (or the profile's), else `AWS_ENDPOINT_URL`, else the region's.
fn endpoint_of(config: &SdkConfig) -> String {
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("DynamoDB")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build();
    // As the SDK does: an endpoint set on the config in code wins over the environment's.
    let explicit = config
        .get_origin("endpoint_url")
        .is_client_config()
        .then(|| config.endpoint_url().map(str::to_owned))
        .flatten();
    explicit
        .or_else(|| {
            key.ok()
                .and_then(|key| config.service_config().and_then(|c| c.load_config(key)))
        })
        .or_else(|| config.endpoint_url().map(str::to_owned))
        .unwrap_or_else(|| match config.region() {
            Some(region) => format!("https://dynamodb.{region}.amazonaws.com"),
            None => "https://dynamodb.<no region>.amazonaws.com".to_owned(),
        })
}

/// A final refusal of `operation` on `resource`.
pub(crate) fn refused(
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

impl LeaseStore for DynamoLeaseStore {
    fn delete<'a>(&'a self, key: &'a LeaseKey, observed: u64) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let raw_key = key.to_string();
            let resource = self.resource(&raw_key);
            // The row and its index entry go in one transaction: apart, a create landing
            // between them would leave a row the index does not name, which no listing returns
            // (and a retry after a lost response would skip the index).
            let delete = Delete::builder()
                .table_name(&*self.table)
                .key(KEY, s(raw_key.clone()))
                .condition_expression(format!("{COUNTER} = :observed"))
                .expression_attribute_values(":observed", n(observed))
                .build()
                .map_err(|e| refused("TransactWriteItems", &resource, e))?;
            let shard = AttributeValue::Ss(vec![key.shard().to_owned()]);
            let unlist = |index: String| {
                Update::builder()
                    .table_name(&*self.table)
                    .key(KEY, s(index))
                    .update_expression(format!("DELETE {SHARDS} :shard"))
                    .expression_attribute_values(":shard", shard.clone())
                    .build()
                    .map_err(|e| refused("TransactWriteItems", &resource, e))
            };
            let mut unlists = vec![unlist(page_key(key.stream(), &page_of(key.shard())))?];
            // A legacy header lists the shard itself too (see `pages`).
            if self.format(key.stream(), false).await? == Format::Legacy {
                unlists.push(unlist(index_key(key.stream()))?);
            }
            let out =
                retrying(
                    self.retry,
                    &self.table,
                    "TransactWriteItems",
                    &resource,
                    || {
                        self.count(&self.calls.writes);
                        self.client
                            .transact_write_items()
                            .set_transact_items(Some(
                                std::iter::once(
                                    TransactWriteItem::builder().delete(delete.clone()).build(),
                                )
                                .chain(unlists.iter().map(|u| {
                                    TransactWriteItem::builder().update(u.clone()).build()
                                }))
                                .collect(),
                            ))
                            .send()
                    },
                )
                .await?;
            match out {
                Ok(_) => Ok(true),
                // The condition failed (the row was written since, or is gone): nothing done.
                Err(TransactWriteItemsError::TransactionCanceledException(e))
                    if e.cancellation_reasons()
                        .iter()
                        .any(|r| r.code() == Some("ConditionalCheckFailed")) =>
                {
                    Ok(false)
                }
                // Cancelled for another reason (a conflicting transaction): nothing done.
                Err(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    Err(LeaseError::Unavailable {
                        operation: "delete",
                        resource,
                        source: Box::new(e),
                    })
                }
                Err(other) => Err(refused("TransactWriteItems", &resource, other)),
            }
        })
    }

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
                Ok(_) => {
                    // Again after the row: a delete of an earlier row with this key may have
                    // taken the shard out of the index between the first add and the put.
                    self.index_add(key).await?;
                    Ok(true)
                }
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
            let outcome = self.update(key, expr, condition::take(take)).await?;
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
        Box::pin(self.renewal(key, holder, ttl, checkpoint, None))
    }

    fn renew_with_load<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        ttl: Duration,
        checkpoint: Option<&'a Checkpoint>,
        load: &'a Load,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(self.renewal(key, holder, ttl, checkpoint, Some(load)))
    }

    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a Holder,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let expr = Expr::default().checkpoint(Some(checkpoint));
            self.update(key, expr, condition::held(holder)).await
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
                .checkpoint(checkpoint);
            self.update(key, expr, condition::held(holder)).await
        })
    }

    fn evict<'a>(
        &'a self,
        key: &'a LeaseKey,
        observed: u64,
        checkpoint: Option<&'a Checkpoint>,
        poke: Option<&'a LeaseKey>,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            // As `rules::evicted`: the operator's hold, taken once it stood still for a lease.
            let expr = || {
                Expr::default()
                    .set(EXPIRY, ":expiry", n(0))
                    .set(OWNER, ":owner", s(rules::EVICTED_OWNER))
                    .set(TOKEN, ":token", s(rules::EVICTED_TOKEN))
                    .remove(WANTED_BY)
                    .checkpoint(checkpoint)
            };
            if let Some(member) = poke {
                if let Some(outcome) = self.evict_poking(key, observed, expr(), member).await? {
                    return Ok(outcome);
                }
                // The member row does not exist: the holder is no member, nothing to poke.
            }
            self.update(key, expr(), condition::evict(observed)).await
        })
    }

    fn poke<'a>(
        &'a self,
        member: &'a LeaseKey,
        about: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<bool>> {
        Box::pin(async move {
            let raw_key = member.to_string();
            let resource = self.resource(&raw_key);
            let out = retrying(self.retry, &self.table, "UpdateItem", &resource, || {
                self.count(&self.calls.writes);
                self.client
                    .update_item()
                    .table_name(&*self.table)
                    .key(KEY, s(raw_key.clone()))
                    .update_expression(poke_update())
                    .condition_expression(format!("attribute_exists({KEY})"))
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":about", s(about.shard()))
                    .send()
            })
            .await?;
            match out {
                Ok(_) => Ok(true),
                Err(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(false),
                Err(other) => Err(refused("UpdateItem", &resource, other)),
            }
        })
    }

    fn request<'a>(
        &'a self,
        key: &'a LeaseKey,
        asker: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, LeaseResult<Outcome>> {
        Box::pin(async move {
            let expr = Expr::default().set(WANTED_BY, ":asker", s(asker));
            self.update(key, expr, condition::request(asker, holder))
                .await
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
                .checkpoint(checkpoint);
            self.update(key, expr, condition::hand_over(holder, to))
                .await
        })
    }

    fn bump_epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<()>> {
        Box::pin(self.bump(stream))
    }

    fn epoch<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<u64>> {
        Box::pin(self.read_epoch(stream))
    }

    fn epochs<'a>(
        &'a self,
        stream: &'a str,
    ) -> BoxFuture<'a, LeaseResult<kinesis_lease_core::Epochs>> {
        Box::pin(self.read_epochs(stream))
    }

    fn read<'a>(&'a self, key: &'a LeaseKey) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            match self.get(&key.to_string()).await? {
                Some(item) => Ok(Some(to_lease(&self.table, &item)?)),
                None => Ok(None),
            }
        })
    }

    fn read_eventually<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, LeaseResult<Option<Lease>>> {
        Box::pin(async move {
            match self.get_with(&key.to_string(), false).await? {
                Some(item) => Ok(Some(to_lease(&self.table, &item)?)),
                None => Ok(None),
            }
        })
    }

    fn list<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, LeaseResult<Vec<Lease>>> {
        Box::pin(self.list_indexed(stream))
    }
}

/// A poke's update (see `LeaseStore::poke`): one more poke, the row it is about, and the count
/// it left beside that row (both from the item before the update), so a count an earlier
/// release adds to without naming a row no longer matches it.
fn poke_update() -> String {
    format!(
        "SET {POKES} = if_not_exists({POKES}, :zero) + :one, {POKED} = :about, \
         {POKED_AT} = if_not_exists({POKES}, :zero) + :one"
    )
}
