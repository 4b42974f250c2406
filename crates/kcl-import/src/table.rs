//! `KclTable`: where the KCL's lease rows are read from. [`DynamoKclTable`] scans the
//! KCL's DynamoDB table; tests put a table of their own behind the trait, so the import's
//! timing (the liveness watch) runs on tokio's paused clock.

use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::Client;
use aws_types::SdkConfig;
use kinesis_lease_core::BoxFuture;

use crate::{ImportError, KclRow};

/// A KCL lease table, read whole.
pub trait KclTable: Send + Sync + fmt::Debug {
    /// The table's name, for messages.
    fn name(&self) -> &str;

    /// Every row of the table (leases and other KCL entities), strongly consistent.
    fn scan(&self) -> BoxFuture<'_, Result<Vec<KclRow>, ImportError>>;
}

/// A KCL lease table on DynamoDB (read only: the import never writes the KCL's table).
#[derive(Debug, Clone)]
pub struct DynamoKclTable {
    client: Client,
    table: String,
}

impl DynamoKclTable {
    /// The KCL table `table` (the KCL application's name, unless it configured another), with
    /// a client from `config` (its region, credentials and endpoint, `AWS_ENDPOINT_URL_DYNAMODB`
    /// included).
    pub fn new(config: &SdkConfig, table: impl Into<String>) -> Self {
        Self::from_client(Client::new(config), table)
    }

    /// The KCL table `table`, read with `client`.
    pub fn from_client(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    async fn scan_all(&self) -> Result<Vec<KclRow>, ImportError> {
        let mut rows = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.error(e))?;
            for item in page.items() {
                let row = KclRow::from_item(item).map_err(|reason| ImportError::UnreadableRow {
                    table: self.table.clone(),
                    lease_key: match item.get("leaseKey") {
                        Some(aws_sdk_dynamodb::types::AttributeValue::S(k)) => k.clone(),
                        _ => "?".to_owned(),
                    },
                    reason,
                })?;
                rows.push(row);
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(rows),
            }
        }
    }

    fn error<E>(
        &self,
        err: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    ) -> ImportError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        if let SdkError::ServiceError(ctx) = &err {
            if ctx.err().code() == Some("ResourceNotFoundException") {
                return ImportError::KclTableNotFound {
                    table: self.table.clone(),
                };
            }
        }
        ImportError::KclTable {
            table: self.table.clone(),
            operation: "Scan",
            transient: kinesis_lease_dynamo::is_transient_sdk_error(&err),
            source: Box::new(err),
        }
    }
}

impl KclTable for DynamoKclTable {
    fn name(&self) -> &str {
        &self.table
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<KclRow>, ImportError>> {
        Box::pin(self.scan_all())
    }
}
