//! The protobuf messages of the aggregated record format, as the KPL defines them (proto2).

/// The body of an aggregated record: two string tables and the sub-records that index them.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AggregatedRecord {
    /// Every partition key the sub-records use, once each.
    #[prost(string, repeated, tag = "1")]
    pub(crate) partition_key_table: Vec<String>,
    /// Every explicit hash key the sub-records use, once each (decimal strings).
    #[prost(string, repeated, tag = "2")]
    pub(crate) explicit_hash_key_table: Vec<String>,
    /// The sub-records, in the order they were added.
    #[prost(message, repeated, tag = "3")]
    pub(crate) records: Vec<SubRecordMessage>,
}

/// One sub-record: indexes into the tables, and its data.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SubRecordMessage {
    /// Index into `partition_key_table`.
    #[prost(uint64, required, tag = "1")]
    pub(crate) partition_key_index: u64,
    /// Index into `explicit_hash_key_table`, when the sub-record has an explicit hash key.
    #[prost(uint64, optional, tag = "2")]
    pub(crate) explicit_hash_key_index: Option<u64>,
    /// The user's data.
    #[prost(bytes = "bytes", required, tag = "3")]
    pub(crate) data: bytes::Bytes,
    /// Tags: part of the format, unused by the KPL itself; read past, never written.
    #[prost(message, repeated, tag = "4")]
    pub(crate) tags: Vec<Tag>,
}

/// A key/value tag of a sub-record.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Tag {
    /// The key.
    #[prost(string, required, tag = "1")]
    pub(crate) key: String,
    /// The value.
    #[prost(string, optional, tag = "2")]
    pub(crate) value: Option<String>,
}
