//! An in-memory [`StateStore`] on tokio's clock.

use bytes::Bytes;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Direction, ItemRange, StateChange, StateStore, StateWrite, StoreError,
};
use std::collections::{BTreeMap, HashMap};
use std::future::{Future, ready};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

/// One (partition, collection, key): its items, each with its expiry.
type Slot = (TopicPartition, Arc<str>, Key);
type Items = BTreeMap<Bytes, (Bytes, Option<Instant>)>;

#[derive(Debug, Default)]
struct Cells {
    slots: HashMap<Slot, Items, foldhash::fast::RandomState>,
    identities: HashMap<String, String>,
}

/// A group's keyed state in memory; clones share it.
///
/// Invariant: a read never returns a cell past its expiry (by tokio's
/// clock, so a paused test clock expires cells too). Removal path: an
/// expired cell is dropped when a write to its (collection, key) finds it,
/// and a (collection, key) with no cell left is dropped with it.
#[derive(Clone, Debug, Default)]
pub struct MemoryStateStore {
    cells: Arc<Mutex<Cells>>,
}

impl MemoryStateStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Cells> {
        // Nothing panics while holding it: a poisoned map is consistent.
        self.cells.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many (partition, collection, key) hold cells.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether no cell is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot(partition: &TopicPartition, collection: &str, key: &Key) -> Slot {
        (partition.clone(), Arc::from(collection), key.clone())
    }

    /// Applies one change: what a commit's [`StateWrite`] does.
    pub fn write(&self, partition: &TopicPartition, write: StateWrite) {
        let now = Instant::now();
        let mut cells = self.lock();
        let slot = (partition.clone(), write.collection, write.key);
        let items = cells.slots.entry(slot.clone()).or_default();
        items.retain(|_, (_, expiry)| expiry.is_none_or(|at| now < at));
        match write.change {
            StateChange::Put { item, value } => {
                let expiry = write.ttl.and_then(|ttl| now.checked_add(ttl));
                items.insert(item, (value, expiry));
            }
            StateChange::Delete { item } => {
                items.remove(&item);
            }
            StateChange::Clear => items.clear(),
        }
        if items.is_empty() {
            cells.slots.remove(&slot);
        }
    }
}

fn live(now: Instant) -> impl Fn(&(Bytes, Option<Instant>)) -> bool {
    move |(_, expiry)| expiry.is_none_or(|at| now < at)
}

impl StateStore for MemoryStateStore {
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        let mut cells = self.lock();
        let stored = cells
            .identities
            .entry(name.to_owned())
            .or_insert_with(|| identity.to_owned())
            .clone();
        ready(Ok(stored))
    }

    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        let now = Instant::now();
        let cells = self.lock();
        let found = cells
            .slots
            .get(&Self::slot(partition, collection, key))
            .and_then(|items| items.get(item))
            .filter(|cell| live(now)(cell))
            .map(|(value, _)| value.clone());
        ready(Ok(found))
    }

    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        let now = Instant::now();
        let cells = self.lock();
        if range
            .until
            .as_ref()
            .is_some_and(|until| *until <= range.from)
        {
            return ready(Ok(Vec::new()));
        }
        let page = cells
            .slots
            .get(&Self::slot(partition, collection, key))
            .map(|items| {
                let until = range
                    .until
                    .as_ref()
                    .map_or(Bound::Unbounded, |until| Bound::Excluded(until.clone()));
                let inside = items
                    .range((Bound::Included(range.from.clone()), until))
                    .filter(|(_, cell)| live(now)(cell))
                    .map(|(item, (value, _))| (item.clone(), value.clone()));
                match direction {
                    Direction::Forward => inside.take(limit).collect(),
                    Direction::Backward => inside.rev().take(limit).collect(),
                }
            })
            .unwrap_or_default();
        ready(Ok(page))
    }
}
