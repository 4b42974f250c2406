//! Turns leases into reading: finds a stream's shards, takes their leases, reads each owned
//! shard into the subscription's channel, renews, checkpoints and lets go.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
