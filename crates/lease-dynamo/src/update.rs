//! The update expressions of lease writes: SET and REMOVE clauses with their values, and the
//! counter every write bumps (`ADD counter :one`).

use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_lease_core::{Checkpoint, Load};

use crate::item::{
    n, s, CAPACITY_MILLI, CHECKPOINT, COUNTER, LOAD_BUSY_MS, LOAD_BYTES, LOAD_POKES, LOAD_RECORDS,
    LOAD_SHARDS, SUBSEQUENCE,
};

/// An update expression under construction: SET and REMOVE clauses plus values.
#[derive(Default)]
pub(crate) struct Expr {
    set: Vec<String>,
    remove: Vec<&'static str>,
    pub(crate) values: Vec<(&'static str, AttributeValue)>,
}

impl Expr {
    pub(crate) fn set(mut self, attr: &str, name: &'static str, value: AttributeValue) -> Self {
        self.set.push(format!("{attr} = {name}"));
        self.values.push((name, value));
        self
    }

    pub(crate) fn remove(mut self, attr: &'static str) -> Self {
        self.remove.push(attr);
        self
    }

    pub(crate) fn checkpoint(self, cp: Option<&Checkpoint>) -> Self {
        match cp {
            None => self,
            Some(cp) => {
                let with = self.set(CHECKPOINT, ":cp", s(cp.stored()));
                match cp.subsequence() {
                    Some(sub) => with.set(SUBSEQUENCE, ":sub", n(sub)),
                    None => with.remove(SUBSEQUENCE),
                }
            }
        }
    }

    /// Sets the row's published load, when given (and its capacity, or removes the one
    /// stored when it has none).
    pub(crate) fn load(self, load: Option<&Load>) -> Self {
        let Some(load) = load else {
            return self;
        };
        let with = self
            .set(LOAD_RECORDS, ":load_records", n(load.records_per_min))
            .set(LOAD_BYTES, ":load_bytes", n(load.bytes_per_min))
            .set(LOAD_BUSY_MS, ":load_busy", n(load.busy_ms_per_min));
        let with = match load.capacity_milli {
            Some(capacity) => with.set(CAPACITY_MILLI, ":capacity", n(capacity)),
            None => with.remove(CAPACITY_MILLI),
        };
        let with = match load.shards {
            Some(shards) => with.set(LOAD_SHARDS, ":load_shards", n(shards)),
            None => with.remove(LOAD_SHARDS),
        };
        match load.pokes_seen {
            Some(pokes) => with.set(LOAD_POKES, ":load_pokes", n(pokes)),
            None => with.remove(LOAD_POKES),
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        if !self.set.is_empty() {
            out.push_str("SET ");
            out.push_str(&self.set.join(", "));
            out.push(' ');
        }
        if !self.remove.is_empty() {
            out.push_str("REMOVE ");
            out.push_str(&self.remove.join(", "));
            out.push(' ');
        }
        out.push_str(&format!("ADD {COUNTER} :one"));
        out
    }
}
