//! The timers of one partition that are due soon, in memory.

use super::Due;
use crate::hash::FastMap;
use crate::key::Key;
use crate::store::timer::TimerKind;
use std::collections::BTreeSet;

/// Timers of a partition up to its loading horizon, by time and by key.
///
/// Invariant: `by_time` and `by_key` hold the same timers. Removal path: a
/// timer leaves when it is taken to fire, unscheduled or cleared; a key
/// leaves with its last timer. Only timers before the horizon are held
/// (later ones stay in the store until the horizon moves), so memory
/// follows the timers due within about one slab.
#[derive(Debug, Default)]
pub(crate) struct DueQueue {
    by_time: BTreeSet<Due>,
    by_key: FastMap<Key, BTreeSet<(TimerKind, i64)>>,
}

impl DueQueue {
    pub(crate) fn insert(&mut self, due: Due) {
        let (kind, second) = (due.kind, due.second);
        let key = due.key.clone();
        // `replace`: scheduled again, a timer takes the newer trace.
        if self.by_time.replace(due).is_none() {
            self.by_key.entry(key).or_default().insert((kind, second));
        }
    }

    pub(crate) fn remove(&mut self, due: &Due) {
        if self.by_time.remove(due)
            && let Some(times) = self.by_key.get_mut(&due.key)
        {
            times.remove(&(due.kind, due.second));
            if times.is_empty() {
                self.by_key.remove(&due.key);
            }
        }
    }

    /// Removes the key's timers of `kind`.
    pub(crate) fn clear(&mut self, key: &Key, kind: TimerKind) {
        let Some(times) = self.by_key.get_mut(key) else {
            return;
        };
        let of_kind: Vec<(TimerKind, i64)> = times
            .range((kind, i64::MIN)..=(kind, i64::MAX))
            .copied()
            .collect();
        for entry in &of_kind {
            times.remove(entry);
        }
        if times.is_empty() {
            self.by_key.remove(key);
        }
        for (kind, second) in of_kind {
            self.by_time.remove(&Due::new(second, key.clone(), kind));
        }
    }

    /// The second of the earliest timer.
    pub(crate) fn next(&self) -> Option<i64> {
        self.by_time.first().map(|due| due.second)
    }

    /// Takes the earliest timer if it is due at `now_second`.
    pub(crate) fn pop_due(&mut self, now_second: i64) -> Option<Due> {
        let due = self.by_time.first().cloned()?;
        if due.second > now_second {
            return None;
        }
        self.remove(&due);
        Some(due)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_time.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Due, DueQueue};
    use crate::key::Key;
    use crate::store::timer::TimerKind;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_timer_scheduled_again_takes_the_newer_trace() {
        let mut queue = DueQueue::default();
        let traced = |trace: &str| Due {
            trace: Some(trace.into()),
            ..Due::new(5, Key::from("k"), TimerKind::Application)
        };
        queue.insert(traced("old"));
        queue.insert(traced("new"));
        assert_eq!(queue.len(), 1);
        let fired = queue.pop_due(5).map(|due| due.trace);
        assert_eq!(fired, Some(Some("new".into())));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, i64, bool),
        Remove(u8, i64, bool),
        Clear(u8, bool),
        Pop(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u8, 0..20i64, any::<bool>()).prop_map(|(k, s, d)| Op::Insert(k, s, d)),
            (0..4u8, 0..20i64, any::<bool>()).prop_map(|(k, s, d)| Op::Remove(k, s, d)),
            (0..4u8, any::<bool>()).prop_map(|(k, d)| Op::Clear(k, d)),
            (0..25i64).prop_map(Op::Pop),
        ]
    }

    fn kind(defer: bool) -> TimerKind {
        if defer {
            TimerKind::Defer
        } else {
            TimerKind::Application
        }
    }

    proptest! {
        /// Against a model set: timers pop in time order, only once due,
        /// kinds stay apart, and both indexes agree after every step.
        #[test]
        fn pops_due_timers_in_order(ops in proptest::collection::vec(op(), 1..120)) {
            let mut queue = DueQueue::default();
            let mut model: BTreeSet<(i64, u8, TimerKind)> = BTreeSet::new();
            let due = |k: u8, second: i64, kind: TimerKind| Due::new(second, Key::from(format!("k{k}")), kind);
            for op in ops {
                match op {
                    Op::Insert(k, s, d) => { queue.insert(due(k, s, kind(d))); model.insert((s, k, kind(d))); }
                    Op::Remove(k, s, d) => { queue.remove(&due(k, s, kind(d))); model.remove(&(s, k, kind(d))); }
                    Op::Clear(k, d) => {
                        queue.clear(&Key::from(format!("k{k}")), kind(d));
                        model.retain(|&(_, m, c)| m != k || c != kind(d));
                    }
                    Op::Pop(now) => {
                        let expected = model.iter().next().copied().filter(|&(s, _, _)| s <= now);
                        if let Some(entry) = expected { model.remove(&entry); }
                        prop_assert_eq!(queue.pop_due(now), expected.map(|(s, k, c)| due(k, s, c)));
                    }
                }
                prop_assert_eq!(queue.len(), model.len());
                prop_assert_eq!(queue.next(), model.iter().next().map(|&(s, _, _)| s));
                prop_assert_eq!(queue.by_key.values().map(BTreeSet::len).sum::<usize>(), model.len());
            }
        }
    }
}
