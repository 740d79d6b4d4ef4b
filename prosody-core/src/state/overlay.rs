//! One collection's pending changes for one key, and how they cover what
//! the store holds.

use crate::key::Key;
use crate::store::{Direction, ItemRange, StateChange, StateWrite};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the pending changes say of one item.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing: the store decides.
    Unknown,
    /// Set to a value, or removed (`None`).
    Known(Option<Bytes>),
}

/// A collection's changes since its last commit.
///
/// Invariant: what a read sees is the store's cells under these changes:
/// after a clear, no stored cell; an item written here, its written value
/// (`None`: removed). The writes it becomes ([`Pending::writes`]) leave
/// the store as that view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) cleared: bool,
    pub(crate) items: BTreeMap<Bytes, Option<Bytes>>,
}

impl Pending {
    pub(crate) fn seen(&self, item: &[u8]) -> Seen {
        match self.items.get(item) {
            Some(value) => Seen::Known(value.clone()),
            None if self.cleared => Seen::Known(None),
            None => Seen::Unknown,
        }
    }

    pub(crate) fn put(&mut self, item: Bytes, value: Option<Bytes>) {
        self.items.insert(item, value);
    }

    pub(crate) fn clear(&mut self) {
        self.cleared = true;
        self.items.clear();
    }

    /// `self` over `older`: what both leave, in one.
    pub(crate) fn over(self, mut older: Self) -> Self {
        if self.cleared {
            return self;
        }
        older.items.extend(self.items);
        older
    }

    /// The writes that make the store look as this view says.
    pub(crate) fn writes(
        self,
        collection: &Arc<str>,
        key: &Key,
        ttl: Option<Duration>,
    ) -> Vec<StateWrite> {
        let write = |change| StateWrite {
            collection: Arc::clone(collection),
            key: key.clone(),
            change,
            ttl,
        };
        let mut writes = Vec::with_capacity(self.items.len() + 1);
        if self.cleared {
            writes.push(write(StateChange::Clear));
        }
        for (item, value) in self.items {
            match value {
                Some(value) => writes.push(write(StateChange::Put { item, value })),
                // After a clear the item is gone already.
                None if self.cleared => {}
                None => writes.push(write(StateChange::Delete { item })),
            }
        }
        writes
    }

    /// The pending items of `range`, in `direction`.
    pub(crate) fn range(
        &self,
        range: &ItemRange,
        direction: Direction,
    ) -> Vec<(Bytes, Option<Bytes>)> {
        let inside = self
            .items
            .iter()
            .filter(|(item, _)| range.contains(item))
            .map(|(item, value)| (item.clone(), value.clone()));
        match direction {
            Direction::Forward => inside.collect(),
            Direction::Backward => inside.rev().collect(),
        }
    }
}

/// Merges a page of stored items with the pending items it covers, both in
/// `direction`: a pending item replaces the stored one, and a removed one
/// is left out.
pub(crate) fn merge(
    stored: Vec<(Bytes, Bytes)>,
    pending: Vec<(Bytes, Option<Bytes>)>,
    direction: Direction,
) -> Vec<(Bytes, Bytes)> {
    let before = |a: &Bytes, b: &Bytes| match direction {
        Direction::Forward => a < b,
        Direction::Backward => a > b,
    };
    let mut merged = Vec::with_capacity(stored.len() + pending.len());
    let mut stored = stored.into_iter().peekable();
    let mut pending = pending.into_iter().peekable();
    loop {
        match (stored.peek(), pending.peek()) {
            (None, None) => break,
            (Some(_), None) => merged.extend(stored.next()),
            (Some((s, _)), Some((p, _))) if before(s, p) => merged.extend(stored.next()),
            (Some((s, _)), Some((p, _))) => {
                if s == p {
                    stored.next();
                }
                if let Some((item, Some(value))) = pending.next() {
                    merged.push((item, value));
                }
            }
            (None, Some(_)) => {
                if let Some((item, Some(value))) = pending.next() {
                    merged.push((item, value));
                }
            }
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::{Direction, merge};
    use bytes::Bytes;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn items() -> impl Strategy<Value = BTreeMap<u8, u8>> {
        proptest::collection::btree_map(0u8..16, any::<u8>(), 0..10)
    }

    proptest! {
        /// A merged page is the stored items under the pending ones, in
        /// order, whichever way it runs.
        #[test]
        fn a_merge_is_the_store_under_the_changes(
            stored in items(),
            pending in proptest::collection::btree_map(0u8..16, proptest::option::of(any::<u8>()), 0..10),
            backward in any::<bool>(),
        ) {
            let direction = if backward { Direction::Backward } else { Direction::Forward };
            let b = |n: u8| Bytes::from(vec![n]);
            let mut expected = stored.clone();
            for (item, value) in &pending {
                match value {
                    Some(value) => { expected.insert(*item, *value); }
                    None => { expected.remove(item); }
                }
            }
            let mut expected: Vec<_> = expected.into_iter().map(|(i, v)| (b(i), b(v))).collect();
            let mut stored: Vec<_> = stored.into_iter().map(|(i, v)| (b(i), b(v))).collect();
            let mut pending: Vec<_> = pending.into_iter().map(|(i, v)| (b(i), v.map(b))).collect();
            if backward {
                expected.reverse();
                stored.reverse();
                pending.reverse();
            }
            prop_assert_eq!(merge(stored, pending, direction), expected);
        }
    }
}
