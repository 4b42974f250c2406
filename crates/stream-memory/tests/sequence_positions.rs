//! Iterators and subscriptions at a sequence number: a `MemoryStream` opens them only at a
//! number its shard holds, and refuses any other as Kinesis does (InvalidArgumentException,
//! `ReaderError::Refused`), so a checkpoint that names no record of its shard is seen as
//! unreadable in tests too.

use kinesis_lease_core::{ErrorChain, SequenceNumber};
use kinesis_stream_core::{KinesisApi, ReaderError, StartAt};
use kinesis_stream_memory::MemoryStream;

const STREAM: &str = "orders";

fn seq(number: &str, subsequence: Option<u64>) -> SequenceNumber {
    SequenceNumber::new(number, subsequence).unwrap()
}

/// A stream of two shards with three records on each; the sequence numbers by shard.
fn two_shards() -> (MemoryStream, Vec<(String, Vec<String>)>) {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 2).unwrap();
    let shards = kinesis.shards(STREAM).unwrap();
    let mut by_shard: Vec<(String, Vec<String>)> =
        shards.iter().map(|s| (s.id.clone(), Vec::new())).collect();
    let mut key = 0;
    while by_shard.iter().any(|(_, seqs)| seqs.len() < 3) {
        let stored = kinesis
            .put(STREAM, &format!("key-{key}"), format!("r{key}"))
            .unwrap();
        key += 1;
        let (_, seqs) = by_shard
            .iter_mut()
            .find(|(id, _)| *id == stored.shard)
            .unwrap();
        if seqs.len() < 3 {
            seqs.push(stored.sequence);
        }
    }
    (kinesis, by_shard)
}

async fn first_payload(kinesis: &MemoryStream, shard: &str, at: &StartAt) -> Option<String> {
    let it = kinesis.shard_iterator(STREAM, shard, at).await.unwrap();
    let page = kinesis.get_records(STREAM, shard, &it, 10).await.unwrap();
    page.records
        .first()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
}

#[tokio::test]
async fn an_iterator_at_a_sequence_number_of_the_shard_opens_there() {
    let (kinesis, shards) = two_shards();
    let (shard, seqs) = &shards[0];
    let it = kinesis
        .shard_iterator(STREAM, shard, &StartAt::AtSequence(seq(&seqs[1], None)))
        .await
        .unwrap();
    let page = kinesis.get_records(STREAM, shard, &it, 10).await.unwrap();
    let read: Vec<&str> = page.records.iter().map(|r| r.sequence.number()).collect();
    assert_eq!(read, [seqs[1].as_str(), seqs[2].as_str()]);
    let after = StartAt::AfterSequence(seq(&seqs[1], None));
    let it = kinesis.shard_iterator(STREAM, shard, &after).await.unwrap();
    let page = kinesis.get_records(STREAM, shard, &it, 10).await.unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].sequence.number(), seqs[2]);
    // Inside an aggregate: the subsequence does not change which record it names.
    let inside = StartAt::AtSequence(seq(&seqs[2], Some(3)));
    assert!(first_payload(&kinesis, shard, &inside).await.is_some());
    // After the last record: an iterator at the tip.
    let last = StartAt::AfterSequence(seq(&seqs[2], None));
    assert_eq!(first_payload(&kinesis, shard, &last).await, None);
}

#[tokio::test]
async fn an_iterator_at_a_sequence_number_of_another_shard_is_refused() {
    let (kinesis, shards) = two_shards();
    let (shard, _) = &shards[0];
    let (other, theirs) = &shards[1];
    for at in [
        StartAt::AtSequence(seq(&theirs[0], None)),
        StartAt::AfterSequence(seq(&theirs[1], None)),
        StartAt::AtSequence(seq(&theirs[2], Some(0))),
    ] {
        match kinesis.shard_iterator(STREAM, shard, &at).await {
            Err(
                error @ ReaderError::Refused {
                    operation: "GetShardIterator",
                    ..
                },
            ) => {
                let text = ErrorChain(&error).to_string();
                assert!(
                    text.contains("InvalidArgumentException") && text.contains(shard.as_str()),
                    "{text}"
                );
            }
            other => panic!("{at:?} on {shard}: {other:?}"),
        }
        // Control: the shard the number belongs to opens it.
        assert!(kinesis.shard_iterator(STREAM, other, &at).await.is_ok());
    }
}

#[tokio::test]
async fn an_iterator_at_a_number_no_record_carries_is_refused() {
    let (kinesis, shards) = two_shards();
    let (shard, _) = &shards[0];
    for number in ["999999", "123456789012345678901234567890"] {
        for at in [
            StartAt::AtSequence(seq(number, None)),
            StartAt::AfterSequence(seq(number, None)),
        ] {
            assert!(
                matches!(
                    kinesis.shard_iterator(STREAM, shard, &at).await,
                    Err(ReaderError::Refused { .. })
                ),
                "{at:?}"
            );
        }
    }
    // An empty shard holds no sequence number at all.
    let empty = MemoryStream::new();
    empty.create_stream(STREAM, 1).unwrap();
    let only = &empty.shards(STREAM).unwrap()[0].id;
    assert!(matches!(
        empty
            .shard_iterator(STREAM, only, &StartAt::AtSequence(seq("1", None)))
            .await,
        Err(ReaderError::Refused { .. })
    ));
    // Control: the other positions need no record.
    for at in [StartAt::TrimHorizon, StartAt::Latest, StartAt::at_millis(0)] {
        assert!(empty.shard_iterator(STREAM, only, &at).await.is_ok());
    }
}

#[tokio::test]
async fn a_closed_shard_opens_at_its_ending_sequence_number() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let parent = kinesis.shards(STREAM).unwrap()[0].id.clone();
    kinesis.split_evenly(STREAM, &parent).unwrap();
    let closed = kinesis
        .shards(STREAM)
        .unwrap()
        .into_iter()
        .find(|s| s.id == parent)
        .unwrap();
    let ending = closed.ending_sequence.expect("closed");
    // ListShards names it as the shard's own, though no record carries it.
    let at = StartAt::AfterSequence(seq(&ending, None));
    assert!(kinesis.shard_iterator(STREAM, &parent, &at).await.is_ok());
}

#[tokio::test]
async fn a_subscription_at_a_sequence_number_of_another_shard_is_refused() {
    let (kinesis, shards) = two_shards();
    kinesis.register_consumer(STREAM, "app").await.unwrap();
    // CREATING the first time it is described, ACTIVE from then on.
    let _ = kinesis.describe_consumer(STREAM, "app").await.unwrap();
    let active = kinesis.describe_consumer(STREAM, "app").await.unwrap();
    assert!(active.active, "{active:?}");
    let (shard, ours) = &shards[0];
    let (_, theirs) = &shards[1];
    let foreign = StartAt::AtSequence(seq(&theirs[0], None));
    assert!(matches!(
        kinesis
            .subscribe_to_shard(STREAM, &active.arn, shard, &foreign)
            .await,
        Err(ReaderError::Refused {
            operation: "SubscribeToShard",
            ..
        })
    ));
    let own = StartAt::AtSequence(seq(&ours[0], None));
    assert!(kinesis
        .subscribe_to_shard(STREAM, &active.arn, shard, &own)
        .await
        .is_ok());
}
