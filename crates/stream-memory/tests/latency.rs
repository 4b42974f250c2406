//! The latency model: a call of an operation given a latency answers that long after it was
//! made (on tokio's clock), other operations answer at once, and slow calls do not hold the
//! stream's lock (a put lands while a read waits).

use std::time::Duration;

use kinesis_stream_core::{KinesisApi, StartAt};
use kinesis_stream_memory::{MemoryStream, Op};
use tokio::time::Instant;

const STREAM: &str = "orders";

#[tokio::test(start_paused = true)]
async fn a_slow_operation_answers_late_and_the_others_at_once() {
    let kinesis = MemoryStream::new();
    kinesis.create_stream(STREAM, 1).unwrap();
    let shard = kinesis.shards(STREAM).unwrap()[0].id.clone();
    kinesis.set_latency(Op::GetRecords, Duration::from_millis(40));
    kinesis.set_latency(Op::ShardIterator, Duration::from_millis(15));

    let started = Instant::now();
    let it = kinesis
        .shard_iterator(STREAM, &shard, &StartAt::TrimHorizon)
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(15));

    // A read waits its latency; a put made meanwhile lands, and the read (acting after its
    // latency) sees it.
    let read = kinesis.get_records(STREAM, &shard, &it, 10);
    let put = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        kinesis.put(STREAM, "k", "late").unwrap();
    };
    let (page, ()) = tokio::join!(read, put);
    assert_eq!(started.elapsed(), Duration::from_millis(55));
    assert_eq!(page.unwrap().records.len(), 1);

    let listed_at = Instant::now();
    kinesis.list_shards(STREAM).await.unwrap();
    assert_eq!(listed_at.elapsed(), Duration::ZERO, "no latency given");

    kinesis.set_latency(Op::GetRecords, Duration::ZERO);
    assert_eq!(kinesis.latency(Op::GetRecords), Duration::ZERO);
    let again = Instant::now();
    let it = kinesis
        .shard_iterator(STREAM, &shard, &StartAt::TrimHorizon)
        .await
        .unwrap();
    kinesis.get_records(STREAM, &shard, &it, 10).await.unwrap();
    assert_eq!(again.elapsed(), Duration::from_millis(15));
}
