//! Aggregate, then de-aggregate, over random keys, hash keys and payload sizes up to the
//! limits: every record comes back, in order, and no aggregate passes Kinesis' limit.

use bytes::Bytes;
use kinesis_kpl::{
    deaggregate, effective_hash_key, Aggregator, KplError, Pushed, SubRecord, MAX_RECORD_BYTES,
};
use proptest::prelude::*;

fn entry() -> impl Strategy<Value = SubRecord> {
    let key = prop_oneof![
        "[a-z0-9]{1,8}", // few distinct keys: tables shared
        "\\PC{1,256}",   // any characters, up to the 256 Kinesis takes
    ];
    let hash = proptest::option::weighted(0.3, any::<u128>().prop_map(|h| h.to_string()));
    let size = prop_oneof![
        8 => 0usize..2_000,
        1 => 0usize..70_000,
        1 => (MAX_RECORD_BYTES - 2_000)..MAX_RECORD_BYTES, // around the limit
    ];
    (key, hash, size, any::<u8>()).prop_map(|(partition_key, explicit_hash_key, size, fill)| {
        SubRecord {
            partition_key,
            explicit_hash_key,
            data: Bytes::from(vec![fill; size]),
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn aggregate_then_deaggregate(entries in proptest::collection::vec(entry(), 1..120)) {
        let mut agg = Aggregator::new();
        let mut records = Vec::new();
        let mut expected = Vec::new();
        for e in &entries {
            let push = |agg: &mut Aggregator| {
                agg.push(&e.partition_key, e.explicit_hash_key.as_deref(), e.data.clone())
            };
            match push(&mut agg) {
                Ok(Pushed::Added) => expected.push(e.clone()),
                Ok(Pushed::Full) => {
                    records.extend(agg.finish());
                    match push(&mut agg) {
                        Ok(Pushed::Added) => expected.push(e.clone()),
                        Err(KplError::TooLarge { .. }) => {}
                        other => prop_assert!(false, "into an empty aggregator: {other:?}"),
                    }
                }
                // Only a record too large to go alone is refused.
                Err(KplError::TooLarge { bytes, .. }) => {
                    prop_assert!(agg.is_empty());
                    prop_assert!(bytes > MAX_RECORD_BYTES);
                    // Framing: magic, trailer, the key in the table and as the record's own
                    // partition key, and a few protobuf tags and lengths.
                    prop_assert!(e.data.len() + 2 * e.partition_key.len() + 64 > MAX_RECORD_BYTES);
                }
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
        records.extend(agg.finish());
        let mut back = Vec::new();
        for record in &records {
            prop_assert!(record.size() <= MAX_RECORD_BYTES, "{} bytes", record.size());
            let subs = deaggregate(&record.data).unwrap().unwrap();
            prop_assert_eq!(subs.len(), record.sub_records);
            let first = &subs[0];
            prop_assert_eq!(&record.partition_key, &first.partition_key);
            prop_assert_eq!(
                record.explicit_hash_key,
                effective_hash_key(&first.partition_key, first.explicit_hash_key.as_deref()).unwrap()
            );
            back.extend(subs);
        }
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn any_bytes_deaggregate_or_fail_without_panic(mut data in proptest::collection::vec(any::<u8>(), 0..512)) {
        if data.len() >= 4 {
            data[..4].copy_from_slice(&kinesis_kpl::MAGIC);
        }
        let _ = deaggregate(&Bytes::from(data));
    }
}
