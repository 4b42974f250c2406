//! One lease store instance belongs to one broker: a process-wide registry of mounted stores.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kinesis_lease_core::LeaseStore;

use crate::BrokerError;

fn registry() -> &'static Mutex<HashMap<usize, String>> {
    static MOUNTED: OnceLock<Mutex<HashMap<usize, String>>> = OnceLock::new();
    MOUNTED.get_or_init(Mutex::default)
}

/// Holds a store mounted on one broker until dropped.
#[derive(Debug)]
pub(crate) struct Mount {
    address: usize,
}

impl Mount {
    /// Mounts `store` for `owner`, or names the broker that has it.
    pub(crate) fn new(store: &Arc<dyn LeaseStore>, owner: &str) -> Result<Self, BrokerError> {
        let address = Arc::as_ptr(store).cast::<()>() as usize;
        let mut mounted = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(holder) = mounted.get(&address) {
            return Err(BrokerError::StoreAlreadyMounted {
                owner: holder.clone(),
            });
        }
        mounted.insert(address, owner.to_owned());
        Ok(Self { address })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        registry()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.address);
    }
}
