//! What a partition's owner knows of its keys' state cells without a read.

use super::overlay::Seen;
use crate::key::Key;
use crate::store::{StateChange, StateWrite};
use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::unsync::Cache;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

/// The most cells one partition's cache holds.
pub(crate) const CELLS_PER_PARTITION: u64 = 4096;

/// One (collection, key).
type Slot = (Arc<str>, Key);

/// A cell as known: its value and expiry, or absent.
type Cell = Option<(Bytes, Option<Instant>)>;

/// What is known of one (collection, key): some cells, or (after a clear)
/// every cell.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Whether a cell not in `cells` is absent (the slot was cleared).
    complete: bool,
    cells: BTreeMap<Bytes, Cell>,
}

#[derive(Clone)]
struct ByCells;

impl Weighter<Slot, Known> for ByCells {
    fn weight(&self, _: &Slot, known: &Known) -> u64 {
        u64::try_from(known.cells.len()).unwrap_or(u64::MAX).max(1)
    }
}

/// The state cells a partition's owner wrote since it took the partition,
/// and those it found absent; bounded by [`CELLS_PER_PARTITION`] (the
/// least recently used go first).
///
/// Invariant: an answer equals what the store holds, because the owner is
/// the only writer while it owns the partition and every one of its
/// commits passes here: a landed commit updates the cells it wrote, and a
/// commit that failed or was cut short (it may have landed in part)
/// forgets them. A value read from the store is not kept (its remaining
/// TTL is not known); an absence is, since only a write ends it. The cache
/// lives with the partition's store access, so a partition taken again
/// starts empty.
pub(crate) struct OwnerCache {
    slots: Mutex<Cache<Slot, Known, ByCells>>,
}

impl Default for OwnerCache {
    fn default() -> Self {
        Self {
            slots: Mutex::new(Cache::with_weighter(1024, CELLS_PER_PARTITION, ByCells)),
        }
    }
}

impl OwnerCache {
    fn lock(&self) -> MutexGuard<'_, Cache<Slot, Known, ByCells>> {
        // Nothing panics while holding it: a poisoned cache is consistent.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What is known of the cell.
    pub(crate) fn get(&self, collection: &str, key: &Key, item: &[u8]) -> Seen {
        let slots = self.lock();
        let Some(known) = slots.get(&(Arc::from(collection), key.clone())) else {
            return Seen::Unknown;
        };
        match known.cells.get(item) {
            Some(Some((value, expiry))) => {
                let live = expiry.is_none_or(|at| Instant::now() < at);
                Seen::Known(live.then(|| value.clone()))
            }
            Some(None) => Seen::Known(None),
            None if known.complete => Seen::Known(None),
            None => Seen::Unknown,
        }
    }

    /// The store holds no such cell.
    pub(crate) fn absent(&self, collection: &str, key: &Key, item: &[u8]) {
        self.update(Arc::from(collection), key, |known| {
            known.cells.insert(Bytes::copy_from_slice(item), None);
        });
    }

    /// A commit of `writes`, sent at `sent`, landed. Expiries count from
    /// `sent`: no later than the store's own.
    pub(crate) fn landed(&self, writes: &[StateWrite], sent: Instant) {
        let now = sent;
        for write in writes {
            self.update(
                Arc::clone(&write.collection),
                &write.key,
                |known| match &write.change {
                    StateChange::Put { item, value } => {
                        let expiry = write.ttl.and_then(|ttl| now.checked_add(ttl));
                        known
                            .cells
                            .insert(item.clone(), Some((value.clone(), expiry)));
                    }
                    StateChange::Delete { item } => {
                        known.cells.insert(item.clone(), None);
                    }
                    StateChange::Clear => {
                        known.cells.clear();
                        known.complete = true;
                    }
                },
            );
        }
    }

    /// A commit of `writes` may have landed in part: what it touched is no
    /// longer known.
    pub(crate) fn forget(&self, writes: &[StateWrite]) {
        let mut slots = self.lock();
        for write in writes {
            slots.remove(&(Arc::clone(&write.collection), write.key.clone()));
        }
    }

    fn update(&self, collection: Arc<str>, key: &Key, f: impl FnOnce(&mut Known)) {
        let mut slots = self.lock();
        let slot = (collection, key.clone());
        let mut known = slots
            .remove(&slot)
            .map(|(_, known)| known)
            .unwrap_or_default();
        f(&mut known);
        slots.insert(slot, known);
    }
}

#[cfg(test)]
mod tests {
    use super::{OwnerCache, Seen};
    use crate::key::Key;
    use crate::store::{StateChange, StateWrite};
    use bytes::Bytes;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    fn write(change: StateChange, ttl: Option<Duration>) -> StateWrite {
        StateWrite {
            collection: Arc::from("c"),
            key: Key::from("k"),
            change,
            ttl,
        }
    }

    /// The cache answers what the owner's landed writes left, absences it
    /// read, and nothing for a commit that may have landed in part; an
    /// expired write reads absent.
    #[tokio::test(start_paused = true)]
    async fn answers_follow_landed_writes() {
        let cache = OwnerCache::default();
        let k = Key::from("k");
        assert_eq!(cache.get("c", &k, b"a"), Seen::Unknown, "nothing known");
        cache.absent("c", &k, b"a");
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Known(None),
            "a read absence"
        );
        let put = |item: &'static [u8], value: &'static [u8]| StateChange::Put {
            item: Bytes::from_static(item),
            value: Bytes::from_static(value),
        };
        let ttl = Some(Duration::from_secs(5));
        cache.landed(
            &[write(put(b"a", b"1"), None), write(put(b"b", b"2"), ttl)],
            Instant::now(),
        );
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Known(Some(Bytes::from_static(b"1")))
        );
        assert_eq!(
            cache.get("c", &k, b"x"),
            Seen::Unknown,
            "an item never seen"
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(cache.get("c", &k, b"b"), Seen::Known(None), "past its TTL");
        cache.landed(&[write(StateChange::Clear, None)], Instant::now());
        assert_eq!(
            cache.get("c", &k, b"x"),
            Seen::Known(None),
            "after a clear, every item"
        );
        cache.forget(&[write(put(b"a", b"3"), None)]);
        assert_eq!(
            cache.get("c", &k, b"a"),
            Seen::Unknown,
            "after an unsure commit"
        );
    }
}
