//! `Shard`: one shard as ListShards describes it, with its place among parents and children.

/// One shard as ListShards describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shard {
    /// `shardId-000000000000`.
    pub id: String,
    /// The shard it was split from, or the first of the two merged into it.
    pub parent: Option<String>,
    /// The second parent of a merge.
    pub adjacent_parent: Option<String>,
    /// Its hash key range, inclusive.
    pub hash_range: (u128, u128),
    /// Set once the shard is closed (split or merged); never comparable with real sequence
    /// numbers on some emulators, so readers detect the end by a missing next iterator.
    pub ending_sequence: Option<String>,
}

impl Shard {
    /// An open shard without parents over `hash_range` (inclusive); set the other fields on
    /// the value.
    pub fn new(id: impl Into<String>, hash_range: (u128, u128)) -> Self {
        Self {
            id: id.into(),
            parent: None,
            adjacent_parent: None,
            hash_range,
            ending_sequence: None,
        }
    }

    /// The parents (zero, one or two).
    pub fn parents(&self) -> Vec<String> {
        self.parent
            .iter()
            .chain(self.adjacent_parent.iter())
            .cloned()
            .collect()
    }
}
