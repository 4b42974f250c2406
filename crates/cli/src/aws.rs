//! The AWS clients, from the standard chain: `AWS_REGION` or `--region`, profiles, the
//! credentials files, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`,
//! `AWS_ENDPOINT_URL_KINESIS`.

use std::sync::Arc;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use kinesis_lease_dynamo::DynamoLeaseStore;
use kinesis_stream_aws::AwsKinesis;

use crate::commands::Context;
use crate::CliError;

/// Checks that `config` can sign a call: it has a region and a credentials provider.
///
/// # Errors
///
/// [`CliError::AwsSetting`] naming the missing setting.
pub fn check(config: &SdkConfig) -> Result<(), CliError> {
    if config.region().is_none() {
        return Err(CliError::AwsSetting {
            setting: "region",
            hint: "set AWS_REGION, a region in your AWS profile, or pass --region",
        });
    }
    if config.credentials_provider().is_none() {
        return Err(CliError::AwsSetting {
            setting: "credentials provider",
            hint: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
        });
    }
    Ok(())
}

/// Loads the AWS configuration and builds the lease store of `table` and the Kinesis client.
///
/// # Errors
///
/// [`CliError::AwsSetting`] when no region is configured.
pub async fn connect(region: Option<String>, table: &str) -> Result<Context, CliError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(region) = region {
        loader = loader.region(Region::new(region));
    }
    let config = loader.load().await;
    check(&config)?;
    let dynamo = DynamoLeaseStore::new(&config, table);
    Ok(Context {
        table: table.to_owned(),
        store: Arc::new(dynamo.clone()),
        dynamo: Some(dynamo),
        kinesis: Some(Arc::new(AwsKinesis::new(&config))),
        aws: Some(config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_without_a_region_is_refused_naming_it() {
        let config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .build();
        match check(&config) {
            Err(CliError::AwsSetting { setting, .. }) => assert_eq!(setting, "region"),
            other => panic!("{other:?}"),
        }
        let config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("eu-west-1"))
            .build();
        assert!(matches!(
            check(&config),
            Err(CliError::AwsSetting {
                setting: "credentials provider",
                ..
            })
        ));
    }
}
