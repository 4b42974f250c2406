//! The update expressions of lease writes: SET and REMOVE clauses with their values, and the
//! counter every write bumps (`ADD counter :one`).

use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_lease_core::Checkpoint;

use crate::item::{n, s, CHECKPOINT, COUNTER, SUBSEQUENCE};

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
