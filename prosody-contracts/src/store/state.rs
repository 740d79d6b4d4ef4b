//! The keyed-state store: per key, the cells of each collection.
//!
//! Every collection kind is stored as cells: a (collection, key) holds an
//! ordered set of items, each a byte string with a byte-string value. A
//! value is one item (the empty one), a map entry is an item named by its
//! key, a deque slot is an item named by its position. Reads are point
//! reads and ordered pages; writes arrive only in a
//! [`Batch`](super::Batch), with the attempt that made them.

use super::StoreError;
use crate::broker::TopicPartition;
use crate::key::Key;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Which way an ordered read runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Ascending.
    #[default]
    Forward,
    /// Descending.
    Backward,
}

/// The items `from <= item < until` (no upper end when `until` is `None`),
/// in byte order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ItemRange {
    /// The first item in range.
    pub from: Bytes,
    /// The first item past the range.
    pub until: Option<Bytes>,
}

impl ItemRange {
    /// Every item.
    #[must_use]
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether `item` is in range.
    #[must_use]
    pub fn contains(&self, item: &[u8]) -> bool {
        item >= self.from.as_ref()
            && self
                .until
                .as_ref()
                .is_none_or(|until| item < until.as_ref())
    }
}

/// A change to the cells of one (collection, key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateChange {
    /// Sets `item` to `value`.
    Put {
        /// The item.
        item: Bytes,
        /// Its new value.
        value: Bytes,
    },
    /// Removes `item`.
    Delete {
        /// The item.
        item: Bytes,
    },
    /// Removes every item.
    Clear,
}

/// A change to a key's state.
///
/// Invariant: absolute, so applying it twice leaves what applying it once
/// does; a batch that failed partway can be written again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateWrite {
    /// The collection's durable name.
    pub collection: Arc<str>,
    /// The key.
    pub key: Key,
    /// The change.
    pub change: StateChange,
    /// How long a written cell lives after this write (`None`: until
    /// removed). A backend enforces it: reads never see an expired cell.
    pub ttl: Option<Duration>,
}

/// The reads of the keyed state of one consumer group. Cells are written
/// by [`Stores::commit`] alone, as [`StateWrite`]s.
///
/// Contract (checked by `prosody_conformance::store::state`, run by every backend):
/// - reads see every write of each committed batch, in its order (a clear
///   then a put of one (collection, key) keeps the put);
/// - [`cells`](Self::cells) returns at most `limit` items of the range, the
///   first ones in `direction`, in that order;
/// - an expired cell is never read;
/// - two groups, or two partitions, or two collections, or two keys, never
///   see each other's cells;
/// - [`identify`](Self::identify) keeps the first identity recorded for a
///   name, for the group, across restarts.
///
/// [`Stores::commit`]: super::Stores::commit
pub trait StateStore: Send + Sync {
    /// Records `identity` (kind and payload) for the collection `name`
    /// unless one is recorded already, and returns the recorded one. The
    /// one write outside [`Stores::commit`](super::Stores::commit): a
    /// client calls it once per collection when it connects, before it
    /// owns any partition, so it belongs to no attempt and no partition.
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// The value of one item.
    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send;

    /// Up to `limit` items of `range`, the first ones in `direction`.
    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send;
}
