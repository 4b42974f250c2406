//! The row layout: attribute names and the conversion between items and `Lease`.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_lease_core::{Checkpoint, Lease, LeaseError, LeaseKey, Load};

pub(crate) const KEY: &str = "lease_key";
pub(crate) const OWNER: &str = "lease_owner";
pub(crate) const EXPIRY: &str = "lease_expiry";
pub(crate) const COUNTER: &str = "lease_counter";
pub(crate) const CHECKPOINT: &str = "checkpoint";
pub(crate) const SUBSEQUENCE: &str = "checkpoint_subsequence";
pub(crate) const PARENTS: &str = "parent_shards";
pub(crate) const WANTED_BY: &str = "lease_wanted_by";
pub(crate) const TOKEN: &str = "lease_token";
pub(crate) const REPOSITIONED: &str = "repositioned";
/// A random id each write stamps, so a retried write whose first attempt landed recognises
/// its own write in the item a failed condition returns.
pub(crate) const WRITE_ID: &str = "write_id";
/// A member row's poke count (see `LeaseStore::poke`); absent until the first poke.
pub(crate) const POKES: &str = "lease_pokes";
/// A member row's last poke's row (its shard id; see `Lease::poked`), set with the count.
pub(crate) const POKED: &str = "lease_poked";
/// The count that poke left (see `Lease::poked_at`).
pub(crate) const POKED_AT: &str = "lease_poked_at";
/// A row's published load (see `Lease::load`): records handled per minute.
pub(crate) const LOAD_RECORDS: &str = "load_records";
/// Payload bytes handled per minute.
pub(crate) const LOAD_BYTES: &str = "load_bytes";
/// Milliseconds of handler time per minute.
pub(crate) const LOAD_BUSY_MS: &str = "load_busy_ms";
/// On a member row: the instance's capacity in thousandths of the default.
pub(crate) const CAPACITY_MILLI: &str = "capacity_milli";
/// On a member row: how many shards the instance holds.
pub(crate) const LOAD_SHARDS: &str = "load_shards";
/// On a member row balancing by load: how many of its pokes the instance had acted on.
pub(crate) const LOAD_POKES: &str = "load_pokes_seen";
/// The epoch row's counter.
pub(crate) const EPOCH: &str = "epoch";
/// A stream's epoch row's count of its roster's bumps (see `LeaseStore::epochs`); absent
/// until the first bump by a release that counts them.
pub(crate) const ROSTER_EPOCH: &str = "roster_epoch";
/// A page's set of shard ids (and a legacy header's, see `pages`).
pub(crate) const SHARDS: &str = "shards";
/// The index header's set of page names.
pub(crate) const PAGES: &str = "pages";
/// The index header's format (absent before paged indexes; see `pages`).
pub(crate) const FORMAT: &str = "index_format";

pub(crate) type Item = HashMap<String, AttributeValue>;

/// The key of a stream's index header.
pub(crate) fn index_key(stream: &str) -> String {
    format!("{stream}:*")
}

/// The key of a stream's epoch row: a small item of its own, so reading the epoch costs one
/// read unit however many shards the index lists.
pub(crate) fn epoch_key(stream: &str) -> String {
    format!("{stream}:*epoch")
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Reads an item back as a lease row.
pub(crate) fn to_lease(table: &str, item: &Item) -> Result<Lease, LeaseError> {
    let raw_key = match item.get(KEY) {
        Some(AttributeValue::S(k)) => k.clone(),
        _ => return Err(corrupt(table, "?", format!("no string `{KEY}`"))),
    };
    let bad = |reason: String| corrupt(table, &raw_key, reason);
    let key: LeaseKey = raw_key.parse().map_err(|e| bad(format!("{e}")))?;
    let string = |name: &str| -> Result<Option<String>, LeaseError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(_) => Err(bad(format!("`{name}` is not a string"))),
        }
    };
    let owner = string(OWNER)?;
    let wanted_by = string(WANTED_BY)?;
    let token = string(TOKEN)?;
    let repositioned = string(REPOSITIONED)?;
    let poked = string(POKED)?;
    let number = |name: &str| -> Result<Option<u64>, LeaseError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| bad(format!("`{name}` = {v} is not a u64"))),
            Some(_) => Err(bad(format!("`{name}` is not a number"))),
        }
    };
    let expiry_ms = number(EXPIRY)?.unwrap_or(0);
    let counter = number(COUNTER)?.unwrap_or(0);
    let pokes = number(POKES)?.unwrap_or(0);
    let poked_at = number(POKED_AT)?.unwrap_or(0);
    let subsequence = number(SUBSEQUENCE)?;
    let checkpoint = match item.get(CHECKPOINT) {
        None => None,
        Some(AttributeValue::S(cp)) => {
            Some(Checkpoint::from_stored(cp, subsequence).map_err(|e| bad(format!("{e}")))?)
        }
        Some(_) => return Err(bad(format!("`{CHECKPOINT}` is not a string"))),
    };
    // Written together by `renew_with_load`: a row has all three or none. Read leniently: a
    // load is advice, and a row whose load another release wrote otherwise (a fraction, say)
    // must still be read, or every write that returns it would fail.
    let lenient = |name: &str| number(name).ok().flatten();
    let load = match (
        lenient(LOAD_RECORDS),
        lenient(LOAD_BYTES),
        lenient(LOAD_BUSY_MS),
    ) {
        (Some(records), Some(bytes), Some(busy)) => {
            let mut load = Load::new(records, bytes, busy);
            load.capacity_milli = lenient(CAPACITY_MILLI);
            load.shards = lenient(LOAD_SHARDS);
            load.pokes_seen = lenient(LOAD_POKES);
            Some(load)
        }
        _ => None,
    };
    let parents = match item.get(PARENTS) {
        None => Vec::new(),
        Some(AttributeValue::Ss(p)) => p.clone(),
        Some(_) => return Err(bad(format!("`{PARENTS}` is not a string set"))),
    };
    Ok(Lease {
        key,
        owner,
        expiry_ms,
        counter,
        checkpoint,
        parents,
        wanted_by,
        token,
        repositioned,
        pokes,
        poked,
        poked_at,
        load,
    })
}

fn corrupt(table: &str, key: &str, reason: String) -> LeaseError {
    LeaseError::CorruptRow {
        table: table.to_owned(),
        key: key.to_owned(),
        reason,
    }
}

/// Counter and owner of an old image, for `Lost`.
pub(crate) fn lost_from(item: Option<&Item>) -> kinesis_lease_core::Lost {
    let holder = item.and_then(|i| match i.get(OWNER) {
        Some(AttributeValue::S(o)) => Some(o.clone()),
        _ => None,
    });
    let counter = item
        .and_then(|i| match i.get(COUNTER) {
            Some(AttributeValue::N(v)) => v.parse().ok(),
            _ => None,
        })
        .unwrap_or(0);
    kinesis_lease_core::Lost { holder, counter }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(load: &[(&str, AttributeValue)]) -> Item {
        let mut item: Item = [
            (KEY.to_owned(), s("s:shardId-1")),
            (COUNTER.to_owned(), n(3)),
            (OWNER.to_owned(), s("a")),
        ]
        .into();
        item.extend(load.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        item
    }

    #[test]
    fn a_load_is_read_whole_with_its_capacity() {
        let row = to_lease(
            "t",
            &item(&[
                (LOAD_RECORDS, n(600)),
                (LOAD_BYTES, n(60_000)),
                (LOAD_BUSY_MS, n(12_000)),
                (CAPACITY_MILLI, n(2_000)),
                (LOAD_SHARDS, n(4)),
                (LOAD_POKES, n(7)),
            ]),
        )
        .unwrap();
        let mut want = Load::new(600, 60_000, 12_000).with_capacity(2_000);
        want.shards = Some(4);
        want.pokes_seen = Some(7);
        assert_eq!(row.load, Some(want));
    }

    /// A load is advice: a row whose load is partial, or written otherwise by another release,
    /// is still read (every write returns its row: failing to read it would fail the write).
    #[test]
    fn a_load_written_otherwise_reads_as_none_and_the_row_still_reads() {
        for load in [
            vec![(LOAD_RECORDS, n(600))],
            vec![
                (LOAD_RECORDS, n(600)),
                (LOAD_BYTES, n(60_000)),
                (LOAD_BUSY_MS, AttributeValue::N("12000.5".into())),
            ],
            vec![
                (LOAD_RECORDS, s("600")),
                (LOAD_BYTES, n(60_000)),
                (LOAD_BUSY_MS, n(12_000)),
            ],
        ] {
            let row = to_lease("t", &item(&load)).unwrap();
            assert_eq!((row.load, row.counter), (None, 3), "{load:?}");
        }
        let odd_capacity = to_lease(
            "t",
            &item(&[
                (LOAD_RECORDS, n(6)),
                (LOAD_BYTES, n(60)),
                (LOAD_BUSY_MS, n(12)),
                (CAPACITY_MILLI, s("two")),
            ]),
        )
        .unwrap();
        assert_eq!(odd_capacity.load, Some(Load::new(6, 60, 12)));
    }
}
