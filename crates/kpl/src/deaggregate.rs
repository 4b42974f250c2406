//! De-aggregation: one Kinesis record in, its sub-records out.
//!
//! A record is aggregated when it starts with the four magic bytes and is long enough for the
//! 16-byte MD5 trailer. Its body must then match the trailer and decode as an
//! `AggregatedRecord` whose sub-records name existing table entries; anything else is an error,
//! and the caller delivers the record as it is (as the KCL does), so a producer that happens
//! to write the magic bytes loses nothing.

use bytes::Bytes;
use md5::{Digest, Md5};
use prost::Message;

use crate::message::AggregatedRecord;
use crate::{KplError, DIGEST_LEN, MAGIC};

/// One user record unpacked from an aggregated record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubRecord {
    /// Its partition key.
    pub partition_key: String,
    /// Its explicit hash key (decimal), if the producer gave one.
    pub explicit_hash_key: Option<String>,
    /// Its data (shares the aggregated record's buffer).
    pub data: Bytes,
}

/// True when `data` starts with the aggregated-record magic and has room for a trailer: what
/// de-aggregation checks first.
pub fn is_aggregated(data: &[u8]) -> bool {
    data.len() >= MAGIC.len() + DIGEST_LEN && data.starts_with(&MAGIC)
}

/// Unpacks an aggregated record into its sub-records, in order (their subsequence numbers are
/// their positions). `Ok(None)`: not an aggregated record (no magic), deliver it as it is.
///
/// # Errors
///
/// The record has the magic but is malformed: [`KplError::Digest`], [`KplError::Protobuf`],
/// [`KplError::TableIndex`] or [`KplError::Empty`]. Deliver it as it is, and report it.
///
/// # Examples
///
/// ```
/// use bytes::Bytes;
/// use kinesis_kpl::{deaggregate, Aggregator};
///
/// let mut agg = Aggregator::new();
/// agg.push("customer-1", None, Bytes::from_static(b"order #1"))?;
/// agg.push("customer-2", None, Bytes::from_static(b"order #2"))?;
/// let record = agg.finish().unwrap();
///
/// let subs = deaggregate(&record.data)?.expect("aggregated");
/// assert_eq!(subs[1].partition_key, "customer-2");
/// assert_eq!(subs[1].data, "order #2");
/// assert_eq!(deaggregate(&Bytes::from_static(b"plain"))?, None);
/// # Ok::<(), kinesis_kpl::KplError>(())
/// ```
pub fn deaggregate(data: &Bytes) -> Result<Option<Vec<SubRecord>>, KplError> {
    if !is_aggregated(data) {
        return Ok(None);
    }
    let body_end = data.len() - DIGEST_LEN;
    let body = data.slice(MAGIC.len()..body_end);
    let digest: [u8; DIGEST_LEN] = Md5::digest(&body).into();
    if digest[..] != data[body_end..] {
        return Err(KplError::Digest { bytes: data.len() });
    }
    let aggregate = AggregatedRecord::decode(body).map_err(KplError::Protobuf)?;
    if aggregate.records.is_empty() {
        return Err(KplError::Empty);
    }
    let keys = &aggregate.partition_key_table;
    let hash_keys = &aggregate.explicit_hash_key_table;
    let mut out = Vec::with_capacity(aggregate.records.len());
    for (position, record) in aggregate.records.into_iter().enumerate() {
        let partition_key = lookup(keys, record.partition_key_index, "partition key", position)?;
        let explicit_hash_key = record
            .explicit_hash_key_index
            .map(|index| lookup(hash_keys, index, "explicit hash key", position))
            .transpose()?;
        out.push(SubRecord {
            partition_key: partition_key.clone(),
            explicit_hash_key: explicit_hash_key.cloned(),
            data: record.data,
        });
    }
    Ok(Some(out))
}

fn lookup<'t>(
    table: &'t [String],
    index: u64,
    name: &'static str,
    sub_record: usize,
) -> Result<&'t String, KplError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .ok_or(KplError::TableIndex {
            table: name,
            sub_record,
            index,
            len: table.len(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::SubRecordMessage;

    fn framed(body: &[u8]) -> Bytes {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(body);
        out.extend_from_slice(&Md5::digest(body));
        Bytes::from(out)
    }

    fn body(aggregate: &AggregatedRecord) -> Vec<u8> {
        aggregate.encode_to_vec()
    }

    #[test]
    fn plain_records_are_not_aggregated() {
        assert_eq!(deaggregate(&Bytes::from_static(b"")).unwrap(), None);
        assert_eq!(deaggregate(&Bytes::from_static(b"hello")).unwrap(), None);
        // The magic alone, too short for a trailer.
        assert_eq!(deaggregate(&Bytes::copy_from_slice(&MAGIC)).unwrap(), None);
    }

    #[test]
    fn a_bad_trailer_is_an_error() {
        let mut data = framed(&body(&AggregatedRecord {
            partition_key_table: vec!["k".into()],
            explicit_hash_key_table: vec![],
            records: vec![SubRecordMessage {
                partition_key_index: 0,
                explicit_hash_key_index: None,
                data: Bytes::from_static(b"x"),
                tags: vec![],
            }],
        }))
        .to_vec();
        let last = data.len() - 1;
        data[last] ^= 1;
        assert!(matches!(
            deaggregate(&Bytes::from(data)),
            Err(KplError::Digest { .. })
        ));
    }

    #[test]
    fn a_bad_body_is_an_error() {
        assert!(matches!(
            deaggregate(&framed(&[0xff, 0xff, 0xff])),
            Err(KplError::Protobuf(_))
        ));
    }

    #[test]
    fn an_index_past_the_table_is_an_error() {
        let data = framed(&body(&AggregatedRecord {
            partition_key_table: vec!["k".into()],
            explicit_hash_key_table: vec![],
            records: vec![SubRecordMessage {
                partition_key_index: 0,
                explicit_hash_key_index: Some(3),
                data: Bytes::from_static(b"x"),
                tags: vec![],
            }],
        }));
        assert!(matches!(
            deaggregate(&data),
            Err(KplError::TableIndex {
                table: "explicit hash key",
                index: 3,
                ..
            })
        ));
    }

    #[test]
    fn an_empty_aggregate_is_an_error() {
        assert!(matches!(
            deaggregate(&framed(&body(&AggregatedRecord::default()))),
            Err(KplError::Empty)
        ));
    }

    #[test]
    fn tags_are_read_past() {
        let data = framed(&body(&AggregatedRecord {
            partition_key_table: vec!["a".into(), "b".into()],
            explicit_hash_key_table: vec!["7".into()],
            records: vec![
                SubRecordMessage {
                    partition_key_index: 1,
                    explicit_hash_key_index: Some(0),
                    data: Bytes::from_static(b"one"),
                    tags: vec![crate::message::Tag {
                        key: "t".into(),
                        value: None,
                    }],
                },
                SubRecordMessage {
                    partition_key_index: 0,
                    explicit_hash_key_index: None,
                    data: Bytes::from_static(b"two"),
                    tags: vec![],
                },
            ],
        }));
        let subs = deaggregate(&data).unwrap().unwrap();
        assert_eq!(
            subs,
            vec![
                SubRecord {
                    partition_key: "b".into(),
                    explicit_hash_key: Some("7".into()),
                    data: Bytes::from_static(b"one"),
                },
                SubRecord {
                    partition_key: "a".into(),
                    explicit_hash_key: None,
                    data: Bytes::from_static(b"two"),
                },
            ]
        );
    }
}
