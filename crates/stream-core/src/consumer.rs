//! `StreamConsumer` and `ConsumerStatus`: an enhanced fan-out consumer as
//! DescribeStreamConsumer tells it.

/// Where a stream consumer is in its life (DescribeStreamConsumer's `ConsumerStatus`). Only an
/// `Active` consumer can be subscribed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerStatus {
    /// Registered, not usable yet: subscriptions are refused (ResourceInUse).
    Creating,
    /// Usable.
    Active,
    /// Deregistered and being deleted: it is still described, with its ARN, for a while, but
    /// subscriptions through it answer ResourceNotFound; once it is gone, registering the name
    /// again gives a consumer with a new ARN.
    Deleting,
}

/// An enhanced fan-out consumer registered on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamConsumer {
    /// The name it was registered with.
    pub name: String,
    /// Its ARN, which `subscribe_to_shard` takes. Kinesis puts the creation time in it: a
    /// consumer deleted and registered again has a new ARN.
    pub arn: String,
    /// True once it is `ACTIVE` (`status == ConsumerStatus::Active`): subscriptions are
    /// refused while it is `CREATING` or `DELETING`.
    pub active: bool,
    /// Its status.
    pub status: ConsumerStatus,
}

impl StreamConsumer {
    /// A consumer as a [`KinesisApi`](crate::KinesisApi) implementation describes it: `ACTIVE` if `active`, else
    /// `CREATING` (use [`with_status`](Self::with_status) for `DELETING`).
    pub fn new(name: impl Into<String>, arn: impl Into<String>, active: bool) -> Self {
        let status = if active {
            ConsumerStatus::Active
        } else {
            ConsumerStatus::Creating
        };
        Self::with_status(name, arn, status)
    }

    /// A consumer in `status`.
    pub fn with_status(
        name: impl Into<String>,
        arn: impl Into<String>,
        status: ConsumerStatus,
    ) -> Self {
        Self {
            name: name.into(),
            arn: arn.into(),
            active: status == ConsumerStatus::Active,
            status,
        }
    }
}
