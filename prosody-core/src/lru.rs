//! A bounded map that evicts its least recently used entry; shared by the
//! dedup and monopolization layers and the record loader.

use crate::hash::FastMap;
use std::hash::Hash;
use std::num::NonZeroUsize;

/// No node: the end of the list.
const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    value: V,
    /// The next more recently used node.
    newer: usize,
    /// The next less recently used node.
    older: usize,
}

/// A map of at most `capacity` entries.
///
/// Invariant: `index` maps each key to its node in `nodes`, and the nodes
/// form one list from `newest` to `oldest` in order of use, so `oldest` is
/// the least recently used entry. Removal path: when an insert would exceed
/// the capacity, the oldest node is reused for the new key, dropping its
/// entry. Lookups, inserts and evictions cost `O(1)`.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    capacity: NonZeroUsize,
    index: FastMap<K, usize>,
    nodes: Vec<Node<K, V>>,
    newest: usize,
    oldest: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map that holds at most `capacity` entries.
    pub(crate) fn new(capacity: NonZeroUsize) -> Self {
        Self {
            capacity,
            index: FastMap::default(),
            nodes: Vec::new(),
            newest: NIL,
            oldest: NIL,
        }
    }

    /// The number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Takes node `at` out of the list.
    fn unlink(&mut self, at: usize) {
        let Some(node) = self.nodes.get(at) else {
            return;
        };
        let (newer, older) = (node.newer, node.older);
        match self.nodes.get_mut(newer) {
            Some(node) => node.older = older,
            None => self.newest = older,
        }
        match self.nodes.get_mut(older) {
            Some(node) => node.newer = newer,
            None => self.oldest = newer,
        }
    }

    /// Puts node `at` at the newest end of the list.
    fn link_newest(&mut self, at: usize) {
        let previous = self.newest;
        if let Some(node) = self.nodes.get_mut(at) {
            node.newer = NIL;
            node.older = previous;
        }
        match self.nodes.get_mut(previous) {
            Some(node) => node.newer = at,
            None => self.oldest = at,
        }
        self.newest = at;
    }

    /// Marks node `at` as the most recently used.
    fn promote(&mut self, at: usize) {
        if self.newest != at {
            self.unlink(at);
            self.link_newest(at);
        }
    }

    /// The entry of `key`, marked as the most recently used.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = *self.index.get(key)?;
        self.promote(at);
        self.nodes.get_mut(at).map(|node| &mut node.value)
    }

    /// Whether `key` has an entry; if so, it becomes the most recently used.
    pub(crate) fn touch(&mut self, key: &K) -> bool {
        self.get_mut(key).is_some()
    }

    /// The entry of `key`, made with `make` if there is none (evicting the
    /// least recently used entry when full); it becomes the most recently
    /// used. (Always `Some`; an `Option` so no path can panic.)
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: K,
        make: impl FnOnce() -> V,
    ) -> Option<&mut V> {
        let at = match self.index.get(&key) {
            Some(&at) => {
                self.promote(at);
                at
            }
            None => self.insert_new(key, make()),
        };
        self.nodes.get_mut(at).map(|node| &mut node.value)
    }

    /// Whether `key` has an entry, without marking it used.
    #[cfg(test)]
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// Adds an entry for a key without one, reusing the oldest node when
    /// full; returns its node.
    fn insert_new(&mut self, key: K, value: V) -> usize {
        if self.index.len() >= self.capacity.get() {
            let at = self.oldest;
            if let Some(node) = self.nodes.get_mut(at) {
                self.index.remove(&node.key);
                node.key = key.clone();
                node.value = value;
                self.promote(at);
                self.index.insert(key, at);
                return at;
            }
        }
        let at = self.nodes.len();
        self.nodes.push(Node {
            key: key.clone(),
            value,
            newer: NIL,
            older: NIL,
        });
        self.link_newest(at);
        self.index.insert(key, at);
        at
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
                    if let Some(count) = lru.get_or_insert_with(key, || 0u32) {
                        *count += 1;
                    }
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
                prop_assert_eq!(lru.contains(&key), model.contains(&key));
            }
        }
    }
}
