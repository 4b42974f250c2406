//! Creating the lease table on demand and checking an existing one's key schema.

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
};
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use crate::item::KEY;
use crate::DynamoLeaseError;

/// How long `ensure_table` waits for a new table to become ACTIVE.
const ACTIVE_WAIT: Duration = Duration::from_secs(120);

fn call_error(
    table: &str,
    operation: &'static str,
    err: impl std::error::Error + Send + Sync + 'static,
) -> DynamoLeaseError {
    DynamoLeaseError::Call {
        table: table.to_owned(),
        operation,
        source: Box::new(err),
    }
}

/// A failed call of `operation`: [`DynamoLeaseError::Unavailable`] when retrying may help
/// (dropped connection, timeout, throttling, 5xx), [`DynamoLeaseError::Call`] otherwise.
fn sdk_error<E, R>(table: &str, operation: &'static str, err: SdkError<E, R>) -> DynamoLeaseError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: crate::retry::HttpStatus + std::fmt::Debug + Send + Sync + 'static,
{
    if crate::retry::is_transient(&err) {
        DynamoLeaseError::Unavailable {
            table: table.to_owned(),
            operation,
            source: Box::new(err),
        }
    } else {
        call_error(table, operation, err)
    }
}

/// Creates `table` (PAY_PER_REQUEST) when missing, waits until ACTIVE, and checks its key.
pub(crate) async fn ensure(client: &Client, table: &str) -> Result<(), DynamoLeaseError> {
    let described = client.describe_table().table_name(table).send().await;
    let mut status = match described {
        Ok(out) => {
            let desc = out.table;
            check_schema(table, desc.as_ref())?;
            desc.and_then(|d| d.table_status)
        }
        Err(err) if is_not_found(&err) => {
            tracing::info!(table, "creating the lease table");
            let created = client
                .create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(KEY)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(|e| call_error(table, "CreateTable", e))?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(KEY)
                        .key_type(KeyType::Hash)
                        .build()
                        .map_err(|e| call_error(table, "CreateTable", e))?,
                )
                .send()
                .await;
            match created {
                Ok(out) => out.table_description.and_then(|d| d.table_status),
                // Another instance created it first: fine, wait for it below.
                Err(err) if is_code(&err, "ResourceInUseException") => None,
                Err(err) => return Err(sdk_error(table, "CreateTable", err)),
            }
        }
        Err(err) => return Err(sdk_error(table, "DescribeTable", err)),
    };
    let started = Instant::now();
    let mut backoff =
        kinesis_lease_core::Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    while status != Some(TableStatus::Active) {
        if started.elapsed() > ACTIVE_WAIT {
            return Err(DynamoLeaseError::NotActive {
                table: table.to_owned(),
                status: status.map_or_else(|| "unknown".to_owned(), |s| s.as_str().to_owned()),
                waited: started.elapsed(),
            });
        }
        tokio::time::sleep(backoff.next_ceiling()).await;
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| sdk_error(table, "DescribeTable", e))?;
        check_schema(table, out.table.as_ref())?;
        status = out.table.and_then(|d| d.table_status);
    }
    Ok(())
}

/// Checks that a table's key is exactly one string hash key `lease_key`.
pub(crate) fn check_schema(
    table: &str,
    desc: Option<&aws_sdk_dynamodb::types::TableDescription>,
) -> Result<(), DynamoLeaseError> {
    let Some(desc) = desc else {
        return Ok(());
    };
    let keys = desc.key_schema();
    let key_type = |name: &str| {
        desc.attribute_definitions()
            .iter()
            .find(|a| a.attribute_name() == name)
            .map(|a| a.attribute_type().as_str().to_owned())
            .unwrap_or_else(|| "?".to_owned())
    };
    let found = keys
        .iter()
        .map(|k| {
            format!(
                "{} {} ({})",
                k.attribute_name(),
                k.key_type().as_str(),
                key_type(k.attribute_name())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let ok = keys.len() == 1
        && keys[0].attribute_name() == KEY
        && keys[0].key_type() == &KeyType::Hash
        && key_type(KEY) == "S";
    if ok {
        Ok(())
    } else {
        Err(DynamoLeaseError::WrongKeySchema {
            table: table.to_owned(),
            found,
        })
    }
}

fn is_code<E: aws_sdk_dynamodb::error::ProvideErrorMetadata, R>(
    err: &aws_sdk_dynamodb::error::SdkError<E, R>,
    code: &str,
) -> bool {
    matches!(err, aws_sdk_dynamodb::error::SdkError::ServiceError(ctx) if ctx.err().code() == Some(code))
}

fn is_not_found<E: aws_sdk_dynamodb::error::ProvideErrorMetadata, R>(
    err: &aws_sdk_dynamodb::error::SdkError<E, R>,
) -> bool {
    is_code(err, "ResourceNotFoundException")
}
