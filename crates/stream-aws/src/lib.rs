//! `AwsKinesis`: the Kinesis contract (`kinesis-stream-core`) over `aws-sdk-kinesis`, polling
//! (ListShards, GetShardIterator, GetRecords, PutRecords) and enhanced fan-out (stream
//! consumers, SubscribeToShard).
//!
//! Its own crate so that what is written against the contract (readers, the fleet, the
//! publisher, a source of your own) builds without the AWS SDK, and the SDK's build cost is
//! paid only by what talks to AWS. The facade re-exports [`AwsKinesis`].
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod aws_kinesis;
mod fan_out;

pub use aws_kinesis::AwsKinesis;
