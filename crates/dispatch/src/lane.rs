//! Lane routing for `workers(n).by_key()`: which lane a partition key belongs to.
//!
//! The lane of a key is SipHash-1-3 of the key's UTF-8 bytes, with the fixed keys
//! [`LANE_HASH_KEYS`], modulo the number of lanes. The keys are written here and never change,
//! so a key's lane is the same across Rust releases, processes and machines (std's
//! `DefaultHasher` promises none of that).

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// SipHash-1-3 keys (k0, k1): the ASCII of `kinesis_` and `broker!!`, little-endian.
pub const LANE_HASH_KEYS: (u64, u64) = (0x5f73_6973_656e_696b, 0x2121_7265_6b6f_7262);

/// The lane (0..lanes) of `partition_key`; 0 when `lanes` is 0.
///
/// # Examples
///
/// ```
/// use kinesis_dispatch::lane_of;
///
/// let lane = lane_of("customer-42", 8);
/// assert!(lane < 8);
/// assert_eq!(lane, lane_of("customer-42", 8), "stable");
/// ```
pub fn lane_of(partition_key: &str, lanes: usize) -> usize {
    if lanes == 0 {
        return 0;
    }
    let mut hasher = SipHasher13::new_with_keys(LANE_HASH_KEYS.0, LANE_HASH_KEYS.1);
    hasher.write(partition_key.as_bytes());
    (hasher.finish() % lanes as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spell_the_documented_words() {
        assert_eq!(&LANE_HASH_KEYS.0.to_le_bytes(), b"kinesis_");
        assert_eq!(&LANE_HASH_KEYS.1.to_le_bytes(), b"broker!!");
    }

    #[test]
    fn lanes_are_stable_and_spread() {
        // Pinned values: a change here changes the lanes of every deployed service.
        let pinned: Vec<usize> = ["a", "b", "customer-1", ""]
            .iter()
            .map(|k| lane_of(k, 16))
            .collect();
        assert_eq!(pinned, [0, 12, 4, 10]);
        let mut counts = [0usize; 8];
        for i in 0..8_000 {
            counts[lane_of(&format!("key-{i}"), 8)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
