//! A bounded map that evicts its least recently used entry; shared by the
//! dedup and monopolization layers.

use crate::hash::FastMap;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::num::NonZeroUsize;

/// A map of at most `capacity` entries.
///
/// Invariant: `entries` and `order` hold the same keys, each entry's stamp
/// is its key's position in `order`, and stamps grow with every use, so the
/// first entry of `order` is the least recently used. Removal path: when an
/// insert would exceed the capacity, [`Lru::evict_oldest`] drops the least
/// recently used entry first. Lookups and inserts cost `O(log n)`.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    capacity: NonZeroUsize,
    entries: FastMap<K, (u64, V)>,
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map that holds at most `capacity` entries.
    pub(crate) fn new(capacity: NonZeroUsize) -> Self {
        Self {
            capacity,
            entries: FastMap::default(),
            order: BTreeMap::new(),
            next: 0,
        }
    }

    fn stamp(&mut self) -> u64 {
        let stamp = self.next;
        self.next = self.next.wrapping_add(1);
        stamp
    }

    /// The number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry of `key`, marked as the most recently used.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let stamp = self.stamp();
        let (old, value) = self.entries.get_mut(key)?;
        self.order.remove(old);
        *old = stamp;
        self.order.insert(stamp, key.clone());
        Some(value)
    }

    /// Whether `key` has an entry; if so, it becomes the most recently used.
    pub(crate) fn touch(&mut self, key: &K) -> bool {
        self.get_mut(key).is_some()
    }

    /// The entry of `key`, made with `make` if there is none (evicting the
    /// least recently used entry when full); it becomes the most recently
    /// used.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity.get() {
            self.evict_oldest();
        }
        let stamp = self.stamp();
        let slot = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| (stamp, make()));
        self.order.remove(&slot.0);
        slot.0 = stamp;
        self.order.insert(stamp, key);
        &mut slot.1
    }

    /// Drops the least recently used entry.
    fn evict_oldest(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            self.entries.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;
    use proptest::prelude::*;
    use std::num::NonZeroUsize;

    proptest! {
        /// Against a model (a list in order of use): the map never holds
        /// more than its capacity, and holds exactly the `capacity` most
        /// recently used distinct keys.
        #[test]
        fn holds_the_most_recently_used_keys(
            capacity in 1usize..8,
            ops in proptest::collection::vec((any::<bool>(), 0u8..16), 0..200),
        ) {
            let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
            let mut lru = Lru::new(capacity);
            let mut model: Vec<u8> = Vec::new();
            for (insert, key) in ops {
                let present = model.contains(&key);
                if insert {
                    *lru.get_or_insert_with(key, || 0u32) += 1;
                } else {
                    prop_assert_eq!(lru.touch(&key), present);
                }
                if insert || present {
                    model.retain(|k| *k != key);
                    model.push(key);
                    if model.len() > capacity.get() {
                        model.remove(0);
                    }
                }
                prop_assert!(lru.len() <= capacity.get());
                prop_assert_eq!(lru.len(), model.len());
            }
            for key in 0u8..16 {
                prop_assert_eq!(lru.entries.contains_key(&key), model.contains(&key));
            }
        }
    }
}
