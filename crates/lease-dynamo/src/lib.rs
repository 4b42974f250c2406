//! `DynamoLeaseStore`: the kinesis-broker lease table on Amazon DynamoDB, shared by every
//! instance of a service.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
