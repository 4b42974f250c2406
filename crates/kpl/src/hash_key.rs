//! Effective hash keys: where Kinesis routes a record (or where a sub-record belongs).

use md5::{Digest, Md5};

use crate::KplError;

/// The hash key Kinesis routes by: the explicit hash key when given, else the MD5 of the
/// partition key's UTF-8 bytes read as a big-endian 128-bit number.
///
/// # Errors
///
/// [`KplError::HashKey`] when the explicit hash key is not a decimal number below 2^128.
///
/// # Examples
///
/// ```
/// use kinesis_kpl::effective_hash_key;
///
/// assert_eq!(effective_hash_key("any", Some("42")).unwrap(), 42);
/// let by_key = effective_hash_key("customer-1", None).unwrap();
/// assert_eq!(by_key, kinesis_kpl::partition_key_hash("customer-1"));
/// ```
pub fn effective_hash_key(
    partition_key: &str,
    explicit_hash_key: Option<&str>,
) -> Result<u128, KplError> {
    match explicit_hash_key {
        Some(value) => parse_hash_key(value),
        None => Ok(partition_key_hash(partition_key)),
    }
}

/// The MD5 of `partition_key` as a big-endian 128-bit number: the hash key Kinesis routes a
/// record without an explicit hash key by.
pub fn partition_key_hash(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// Parses a decimal explicit hash key.
///
/// # Errors
///
/// [`KplError::HashKey`] when `value` is not a decimal number below 2^128.
pub fn parse_hash_key(value: &str) -> Result<u128, KplError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(KplError::HashKey {
            value: value.to_owned(),
        });
    }
    value.parse().map_err(|_| KplError::HashKey {
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_of_the_partition_key_big_endian() {
        // MD5("a") = 0cc175b9c0f1b6a831c399e269772661
        assert_eq!(
            partition_key_hash("a"),
            0x0cc1_75b9_c0f1_b6a8_31c3_99e2_6977_2661
        );
    }

    #[test]
    fn explicit_keys_are_decimal_below_2_pow_128() {
        assert_eq!(parse_hash_key(&u128::MAX.to_string()).unwrap(), u128::MAX);
        for bad in [
            "",
            "-1",
            "1e3",
            "340282366920938463463374607431768211456",
            " 1",
        ] {
            assert!(
                matches!(parse_hash_key(bad), Err(KplError::HashKey { .. })),
                "{bad:?}"
            );
        }
    }
}
