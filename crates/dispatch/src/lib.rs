//! Where records meet handlers: the subscription's shared channel, its lanes and batches, and
//! the settlement that tells each shard how far it may checkpoint. Knows nothing of AWS.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
