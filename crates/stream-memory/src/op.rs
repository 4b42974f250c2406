//! `Op`: the operations of a `MemoryStream`, to inject faults into and count. Apart from the
//! fault methods so the stream's state can keep its counters without importing them.

/// The operations of a [`MemoryStream`](crate::MemoryStream), to inject faults into and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// ListShards.
    ListShards,
    /// GetShardIterator.
    ShardIterator,
    /// GetRecords.
    GetRecords,
    /// PutRecords.
    PutRecords,
    /// SubscribeToShard (the subscribe call; events are cut with
    /// [`MemoryStream::cut_subscriptions`](crate::MemoryStream::cut_subscriptions)).
    SubscribeToShard,
    /// RegisterStreamConsumer and DescribeStreamConsumer.
    Consumers,
}

/// The Kinesis name of `op`, for errors.
pub(crate) fn op_name(op: Op) -> &'static str {
    match op {
        Op::ListShards => "ListShards",
        Op::ShardIterator => "GetShardIterator",
        Op::GetRecords => "GetRecords",
        Op::PutRecords => "PutRecords",
        Op::SubscribeToShard => "SubscribeToShard",
        Op::Consumers => "RegisterStreamConsumer",
    }
}
