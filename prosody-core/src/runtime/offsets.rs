//! Which offset of a partition may be committed.

use std::collections::VecDeque;

/// An offset arrived that is not above every offset seen before.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stale {
    pub(crate) offset: i64,
    pub(crate) next: i64,
}

/// Tracks the records of one partition between arrival and settlement.
///
/// Invariant: [`OffsetTracker::committable`] is the lowest unsettled offset,
/// or one past the highest tracked offset when none is unsettled; so a commit
/// of it never passes an unsettled record. Tracked offsets strictly increase.
#[derive(Debug, Default)]
pub(crate) struct OffsetTracker {
    /// Tracked offsets, ascending, with whether each has settled and its
    /// record's timestamp (milliseconds); the front is always unsettled.
    pending: VecDeque<(i64, bool, i64)>,
    /// One past the highest tracked offset.
    next: Option<i64>,
    unsettled: usize,
}

impl OffsetTracker {
    /// Starts tracking a record that just arrived.
    pub(crate) fn track(&mut self, offset: i64, at: i64) -> Result<(), Stale> {
        if let Some(next) = self.next
            && offset < next
        {
            return Err(Stale { offset, next });
        }
        self.pending.push_back((offset, false, at));
        self.next = Some(offset.saturating_add(1));
        self.unsettled += 1;
        Ok(())
    }

    /// Marks a tracked record settled; `false` if it was not tracked or had
    /// settled already.
    pub(crate) fn settle(&mut self, offset: i64) -> bool {
        let Ok(index) = self.pending.binary_search_by_key(&offset, |&(o, _, _)| o) else {
            return false;
        };
        let Some(entry) = self.pending.get_mut(index) else {
            return false;
        };
        if entry.1 {
            return false;
        }
        entry.1 = true;
        self.unsettled -= 1;
        while self.pending.front().is_some_and(|&(_, settled, _)| settled) {
            self.pending.pop_front();
        }
        true
    }

    /// The offset a commit may name now, if any record was tracked.
    pub(crate) fn committable(&self) -> Option<i64> {
        self.pending.front().map(|&(o, _, _)| o).or(self.next)
    }

    /// The timestamp of the oldest unsettled record, if any.
    pub(crate) fn oldest(&self) -> Option<i64> {
        self.pending.front().map(|&(_, _, at)| at)
    }

    /// How many tracked records have not settled.
    #[cfg(test)]
    pub(crate) fn unsettled(&self) -> usize {
        self.unsettled
    }
}

#[cfg(test)]
mod tests {
    use super::{OffsetTracker, Stale};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Over arrivals with gaps and settlements in any order, the
        /// committable offset is exactly the lowest unsettled one.
        #[test]
        fn committable_is_the_lowest_unsettled(
            gaps in proptest::collection::vec(1..4i64, 1..80),
            order in proptest::collection::vec(any::<prop::sample::Index>(), 1..80),
        ) {
            let mut tracker = OffsetTracker::default();
            let mut offset = 10;
            let mut unsettled = BTreeSet::new();
            for gap in &gaps {
                offset += gap;
                prop_assert!(tracker.track(offset, offset).is_ok());
                unsettled.insert(offset);
            }
            let highest = offset;
            for pick in order {
                if unsettled.is_empty() { break; }
                let chosen = *pick.get(&unsettled.iter().copied().collect::<Vec<_>>());
                prop_assert!(tracker.settle(chosen));
                prop_assert!(!tracker.settle(chosen), "settled twice");
                unsettled.remove(&chosen);
                let expected = unsettled.first().copied().unwrap_or(highest + 1);
                prop_assert_eq!(tracker.committable(), Some(expected));
                prop_assert_eq!(tracker.unsettled(), unsettled.len());
            }
        }
    }

    #[test]
    fn rejects_offsets_that_do_not_increase() {
        let mut tracker = OffsetTracker::default();
        assert_eq!(tracker.committable(), None);
        assert!(tracker.track(5, 0).is_ok());
        assert_eq!(tracker.track(5, 0), Err(Stale { offset: 5, next: 6 }));
        assert!(!tracker.settle(4));
        assert!(tracker.settle(5));
        assert_eq!(tracker.committable(), Some(6));
    }
}
