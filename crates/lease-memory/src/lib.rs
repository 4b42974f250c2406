//! `MemoryLeaseStore`: a lease table in process memory.
//!
//! It is the default store: correct for the brokers of **one process**, and empty after a
//! restart (every checkpoint is forgotten, so a restarted service starts each shard from its
//! start position again). Use a durable store such as `DynamoLeaseStore` when instances run in
//! several processes or must resume after a restart.
//!
//! Several stores can open one shared [`MemoryLeaseTable`], the way instances of a service
//! share one DynamoDB table: tests run several brokers in one process that way, each with its
//! own store (and a store belongs to one broker).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod store;
mod table;

pub use store::MemoryLeaseStore;
pub use table::MemoryLeaseTable;
