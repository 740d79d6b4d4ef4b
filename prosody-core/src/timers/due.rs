//! The timers of one partition that are due soon, in memory.

use crate::hash::FastMap;
use crate::key::Key;
use std::collections::BTreeSet;

/// Timers of a partition up to its loading horizon, by time and by key.
///
/// Invariant: `by_time` and `by_key` hold the same (second, key) pairs.
/// Removal path: a timer leaves when it is taken to fire, unscheduled or
/// cleared; a key leaves with its last timer. Only timers before the
/// horizon are held (later ones stay in the store until the horizon moves),
/// so memory follows the timers due within about one slab.
#[derive(Debug, Default)]
pub(crate) struct DueQueue {
    by_time: BTreeSet<(i64, Key)>,
    by_key: FastMap<Key, BTreeSet<i64>>,
}

impl DueQueue {
    pub(crate) fn insert(&mut self, key: Key, second: i64) {
        if self.by_time.insert((second, key.clone())) {
            self.by_key.entry(key).or_default().insert(second);
        }
    }

    pub(crate) fn remove(&mut self, key: &Key, second: i64) {
        if self.by_time.remove(&(second, key.clone())) {
            if let Some(seconds) = self.by_key.get_mut(key) {
                seconds.remove(&second);
                if seconds.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
    }

    pub(crate) fn clear(&mut self, key: &Key) {
        if let Some(seconds) = self.by_key.remove(key) {
            for second in seconds {
                self.by_time.remove(&(second, key.clone()));
            }
        }
    }

    /// The second of the earliest timer.
    pub(crate) fn next(&self) -> Option<i64> {
        self.by_time.first().map(|(second, _)| *second)
    }

    /// Takes the earliest timer if it is due at `now_second`.
    pub(crate) fn pop_due(&mut self, now_second: i64) -> Option<(Key, i64)> {
        let (second, key) = self.by_time.first().cloned()?;
        if second > now_second {
            return None;
        }
        self.remove(&key, second);
        Some((key, second))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_time.len()
    }
}

#[cfg(test)]
mod tests {
    use super::DueQueue;
    use crate::key::Key;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, i64),
        Remove(u8, i64),
        Clear(u8),
        Pop(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u8, 0..20i64).prop_map(|(k, s)| Op::Insert(k, s)),
            (0..4u8, 0..20i64).prop_map(|(k, s)| Op::Remove(k, s)),
            (0..4u8).prop_map(Op::Clear),
            (0..25i64).prop_map(Op::Pop),
        ]
    }

    proptest! {
        /// Against a model set: timers pop in time order, only once due,
        /// and both indexes agree after every step.
        #[test]
        fn pops_due_timers_in_order(ops in proptest::collection::vec(op(), 1..120)) {
            let mut queue = DueQueue::default();
            let mut model: BTreeSet<(i64, u8)> = BTreeSet::new();
            let key = |k: u8| Key::from(format!("k{k}"));
            for op in ops {
                match op {
                    Op::Insert(k, s) => { queue.insert(key(k), s); model.insert((s, k)); }
                    Op::Remove(k, s) => { queue.remove(&key(k), s); model.remove(&(s, k)); }
                    Op::Clear(k) => { queue.clear(&key(k)); model.retain(|&(_, m)| m != k); }
                    Op::Pop(now) => {
                        let expected = model.iter().next().copied().filter(|&(s, _)| s <= now);
                        if let Some(entry) = expected { model.remove(&entry); }
                        prop_assert_eq!(queue.pop_due(now), expected.map(|(s, k)| (key(k), s)));
                    }
                }
                prop_assert_eq!(queue.len(), model.len());
                prop_assert_eq!(queue.next(), model.iter().next().map(|&(s, _)| s));
                prop_assert_eq!(queue.by_key.values().map(BTreeSet::len).sum::<usize>(), model.len());
            }
        }
    }
}
