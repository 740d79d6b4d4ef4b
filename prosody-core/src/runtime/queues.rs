//! Per-key queues: one running event per key, the rest waiting in order.

use crate::hash::FastMap;
use crate::key::Key;
use std::collections::VecDeque;
use std::collections::hash_map::Entry;

/// The keys of one partition that have work.
///
/// Invariant: a key is present exactly while one of its events runs; its
/// queue holds the events that arrived behind the running one, in arrival
/// (offset) order. A key is removed when its running event completes with
/// nothing waiting, so the map never holds more keys than there are
/// unsettled events, which backpressure bounds.
#[derive(Debug)]
pub(crate) struct KeyQueues<T> {
    keys: FastMap<Key, VecDeque<T>>,
    /// Events queued behind a running one, over all keys.
    waiting: usize,
}

impl<T> Default for KeyQueues<T> {
    fn default() -> Self {
        Self {
            keys: FastMap::default(),
            waiting: 0,
        }
    }
}

impl<T> KeyQueues<T> {
    /// An event arrives; it is returned when its key is idle and it must run
    /// now, and queued otherwise.
    #[must_use]
    pub(crate) fn arrive(&mut self, key: Key, item: T) -> Option<T> {
        match self.keys.entry(key) {
            Entry::Occupied(mut waiting) => {
                waiting.get_mut().push_back(item);
                self.waiting += 1;
                None
            }
            Entry::Vacant(idle) => {
                idle.insert(VecDeque::new());
                Some(item)
            }
        }
    }

    /// The running event of `key` completed: returns the next one to run, or
    /// removes the key when nothing waits.
    #[must_use]
    pub(crate) fn complete(&mut self, key: &Key) -> Option<T> {
        let waiting = self.keys.get_mut(key)?;
        let next = waiting.pop_front();
        if next.is_none() {
            self.keys.remove(key);
        } else {
            self.waiting -= 1;
        }
        next
    }

    /// Drops every waiting event (the keys stay, their running events still
    /// to complete); returns how many events were dropped. Used when the
    /// partition stops dispatching.
    pub(crate) fn drop_waiting(&mut self) -> usize {
        self.waiting = 0;
        self.keys
            .values_mut()
            .map(|w| std::mem::take(w).len())
            .sum()
    }

    /// How many keys have a running event.
    pub(crate) fn busy(&self) -> usize {
        self.keys.len()
    }

    /// How many events wait behind a running one.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::KeyQueues;
    use crate::key::Key;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Step {
        Arrive(u8),
        CompleteOne(prop::sample::Index),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..6u8).prop_map(Step::Arrive),
            2 => any::<prop::sample::Index>().prop_map(Step::CompleteOne),
        ]
    }

    proptest! {
        /// Over random arrivals on few (so duplicate) keys and completions in
        /// any order: at most one event per key runs, each key runs its events
        /// in arrival order, and nothing is lost.
        #[test]
        fn one_running_per_key_in_arrival_order(steps in proptest::collection::vec(step(), 1..200)) {
            let mut queues = KeyQueues::default();
            let mut running: HashMap<Key, u32> = HashMap::new();
            let mut ran: HashMap<Key, Vec<u32>> = HashMap::new();
            let mut arrived: HashMap<Key, Vec<u32>> = HashMap::new();
            for (seq, step) in (0u32..).zip(steps) {
                match step {
                    Step::Arrive(k) => {
                        let key = Key::from(format!("k{k}"));
                        arrived.entry(key.clone()).or_default().push(seq);
                        if let Some(item) = queues.arrive(key.clone(), seq) {
                            prop_assert!(running.insert(key.clone(), item).is_none(), "two running for {key}");
                            ran.entry(key).or_default().push(item);
                        }
                    }
                    Step::CompleteOne(pick) => {
                        let keys: Vec<Key> = running.keys().cloned().collect();
                        if keys.is_empty() { continue; }
                        let key = pick.get(&keys).clone();
                        running.remove(&key);
                        if let Some(item) = queues.complete(&key) {
                            running.insert(key.clone(), item);
                            ran.entry(key).or_default().push(item);
                        }
                    }
                }
                prop_assert_eq!(queues.busy(), running.len());
            }
            // Drain everything left.
            while let Some(key) = running.keys().next().cloned() {
                running.remove(&key);
                if let Some(item) = queues.complete(&key) {
                    running.insert(key.clone(), item);
                    ran.entry(key).or_default().push(item);
                }
            }
            prop_assert_eq!(queues.busy(), 0);
            prop_assert_eq!(ran, arrived);
        }
    }
}
