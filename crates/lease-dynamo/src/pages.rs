//! The paged index's layout: which page lists a shard, the keys of a stream's index header and
//! pages, and the header's format. Pure: the reads and writes are in `index`.
//!
//! # Why pages
//!
//! The first index was one item per stream, `stream:*`, whose `shards` set named every shard
//! row. DynamoDB refuses items over 400 KB, and bills every write of an item by its whole size:
//! at 10,000 live shards that item was 200 KB (200 WCU per create or delete), and a little past
//! 20,000 live shards no shard could be added at all. Now the header `stream:*` names *pages*
//! (`stream:*p<page>`), and each page names the shards of a Kinesis stream by the number in
//! the shard id, [`SHARDS_PER_PAGE`] numbers a page (so a stream's pages fill one after the
//! other and a page of live shards is about 3 KB: one read unit), or, for ids that are not Kinesis shard ids (the roster's
//! owner ids), one of [`HASH_PAGES`] pages by a SipHash of the id. A page, once named in the
//! header, stays named: a writer that saw it named adds shards to it without touching the
//! header again, so taking a name out could leave a shard no listing reads.
//!
//! # Formats
//!
//! A header written by a release before pages has no `index_format` and lists the shards itself
//! (`shards`). On such a header ([`Format::Legacy`]) this release writes both: each shard into
//! its page and into `shards`, so a process of the previous release, which reads `shards` only,
//! still lists every row during a rolling deploy. A header this release creates is
//! [`Format::Paged`] (`index_format = 2`) and has no `shards`; so is a legacy header after
//! `kinesis-broker migrate-index` (or once its `shards` no longer fits in an item: the previous
//! release could not have added to it either). Listing always reads the union of `shards` and
//! the pages, so rows listed by either release are found by this one.

use std::collections::HashSet;
use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// How many shards of a Kinesis stream one page lists (by the number in the shard id): 128
/// ids of 20 bytes make an item of about 2.7 KB, one read unit.
pub(crate) const SHARDS_PER_PAGE: u64 = 128;

/// How many pages hold Kinesis shard ids: page `n<(k / 128) % 1024>` for shard number `k`. A
/// page, once named, stays named, and resharding gives every child a new, higher number: without
/// the modulo a stream resharded daily would name a new page every few days for ever, and every
/// listing read them all. With it the header names at most 1,024 + 64 pages (about 6 KB).
pub(crate) const NUMBERED_PAGES: u64 = 1_024;

/// How many pages hold ids that are not Kinesis shard ids (`shardId-` and digits), by a hash:
/// the roster's owner ids. 10,000 instances of 40-byte ids fill each about 6 KB.
pub(crate) const HASH_PAGES: u64 = 64;

/// The `index_format` a header of this release carries.
pub(crate) const PAGED_FORMAT: u64 = 2;

/// How a stream's index header is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Written by a release before pages (no `index_format`): shards go into `shards` too.
    Legacy,
    /// `index_format = 2`: pages only.
    Paged,
}

impl Format {
    /// The format a header's `index_format` says (absent: legacy).
    pub(crate) fn of(format: Option<u64>) -> Self {
        match format {
            Some(f) if f >= PAGED_FORMAT => Format::Paged,
            _ => Format::Legacy,
        }
    }
}

/// What a process knows of a stream's index header: its format, and pages it has seen named
/// there (a page, once named, stays named).
#[derive(Debug, Default)]
pub(crate) struct Known {
    pub(crate) format: Option<Format>,
    pub(crate) pages: HashSet<String>,
}

/// The page that lists `shard`: `n<k>` for the shards numbered `k * 128 ..` of a Kinesis
/// stream (modulo [`NUMBERED_PAGES`]), `h<k>` for any other id.
pub(crate) fn page_of(shard: &str) -> String {
    match kinesis_number(shard) {
        Some(number) => format!("n{}", (number / SHARDS_PER_PAGE) % NUMBERED_PAGES),
        None => {
            // Fixed keys: every process, of every release, must place an id in the same page.
            let mut hasher = SipHasher13::new_with_keys(0, 0);
            hasher.write(shard.as_bytes());
            format!("h{}", hasher.finish() % HASH_PAGES)
        }
    }
}

/// The number in a Kinesis shard id (`shardId-000000000042` is 42).
fn kinesis_number(shard: &str) -> Option<u64> {
    let digits = shard.strip_prefix("shardId-")?;
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The key of `stream`'s page `page`.
pub(crate) fn page_key(stream: &str, page: &str) -> String {
    format!("{stream}:*p{page}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinesis_shards_fill_pages_in_order() {
        assert_eq!(page_of("shardId-000000000000"), "n0");
        assert_eq!(page_of("shardId-000000000127"), "n0");
        assert_eq!(page_of("shardId-000000000128"), "n1");
        assert_eq!(page_of("shardId-000000099999"), "n781");
        // Past 131,072 numbers the pages come round again: the header stays bounded.
        assert_eq!(page_of("shardId-000000131072"), "n0");
        assert_eq!(page_of("shardId-000001000000"), "n644");
    }

    #[test]
    fn other_ids_are_hashed_into_a_fixed_number_of_pages() {
        // Pinned values: a page is found by every release from the id alone, so the hash
        // may never change.
        assert_eq!(page_of("host-a-1"), page_of("host-a-1"));
        let pages: std::collections::HashSet<String> = (0..10_000)
            .map(|i| page_of(&format!("owner-{i}")))
            .collect();
        assert_eq!(pages.len() as u64, HASH_PAGES);
        assert!(pages.iter().all(|p| p.starts_with('h')));
        for odd in [
            "shardId-",
            "shardId-12a",
            "shardId-99999999999999999999",
            "0001",
            "",
        ] {
            assert!(page_of(odd).starts_with('h'), "{odd}");
        }
    }

    #[test]
    fn the_hash_is_stable_across_releases() {
        // Pinned: a hashed id must land in the same page in every release, or a process of
        // the next release would look for it where no one put it.
        let pinned: Vec<String> = ["owner-1", "host-a-1", "ip-10-0-0-7.ec2.internal-4242"]
            .iter()
            .map(|id| page_of(id))
            .collect();
        assert_eq!(pinned, ["h62", "h13", "h62"]);
    }

    #[test]
    fn a_page_of_kinesis_ids_stays_within_one_read_unit() {
        let ids: usize = (0..SHARDS_PER_PAGE)
            .map(|i| format!("shardId-{i:012}").len())
            .sum();
        assert!(ids + "shards".len() + page_key("a-stream-name", "n0").len() < 4_096);
    }

    #[test]
    fn formats() {
        assert_eq!(Format::of(None), Format::Legacy);
        assert_eq!(Format::of(Some(1)), Format::Legacy);
        assert_eq!(Format::of(Some(2)), Format::Paged);
        assert_eq!(page_key("orders", "n3"), "orders:*pn3");
    }
}
