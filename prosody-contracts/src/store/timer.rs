//! The timer store: the persistent timers of each partition's keys, grouped
//! in time slabs.
//!
//! A timer is a (partition, key, time) with second precision: every read
//! and write rounds the times it is given with [`round_to_second`], so
//! scheduling 12:00:00.4 and 12:00:00.0 gives one timer, at 12:00:00.
//! Timers are written only in a [`Batch`](super::Batch)
//! ([`TimerChange`](super::TimerChange)), with the attempt that made them.
//! Backends keep the timers of a partition in slabs of [`SlabSize`] (an
//! hour by default), so a node loads only the slabs near now, plus an index
//! by key for [`TimerStore::scheduled`] and [`TimerChange::Clear`].
//!
//! [`TimerChange::Clear`]: super::TimerChange::Clear

use super::StoreError;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
pub use crate::event::TimerKind;
use crate::key::Key;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

/// The earliest whole second a [`Timestamp`] can hold.
const MIN_SECONDS: i64 = i64::MIN / 1000;

/// The latest whole second a [`Timestamp`] can hold.
const MAX_SECONDS: i64 = i64::MAX / 1000;

/// `time` in whole seconds since the epoch, rounded to the nearest second
/// (halves round up, to the later second): the form stores persist. Times
/// beyond the whole seconds a [`Timestamp`] can hold (about 292 million
/// years from the epoch) saturate to the last one.
#[must_use]
pub fn to_seconds(time: Timestamp) -> i64 {
    time.as_millis()
        .saturating_add(500)
        .div_euclid(1000)
        .clamp(MIN_SECONDS, MAX_SECONDS)
}

/// The timestamp of whole `seconds` since the epoch, saturating like
/// [`to_seconds`]; `from_seconds(to_seconds(t)) == round_to_second(t)`.
#[must_use]
pub fn from_seconds(seconds: i64) -> Timestamp {
    // The clamp keeps the product within `i64`.
    Timestamp::from_millis(seconds.clamp(MIN_SECONDS, MAX_SECONDS) * 1000)
}

/// `time` rounded to the nearest second, halves up: the precision of
/// timers.
#[must_use]
pub fn round_to_second(time: Timestamp) -> Timestamp {
    from_seconds(to_seconds(time))
}

/// The span of time one slab of a partition's timers covers.
///
/// Invariant: a whole number of seconds, at least one. Slab `n` holds the
/// timers whose time `t` (in seconds, after [`round_to_second`]) has
/// `floor(t / size) == n`, so slabs tile time without gaps or overlap and a
/// range of times lies in a contiguous run of slabs ([`SlabSize::slabs`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlabSize(i64);

impl SlabSize {
    /// The default: one hour.
    pub const DEFAULT: Self = Self(3600);

    /// A slab of `size`, in whole seconds (sub-second parts are dropped) and
    /// at least one.
    #[must_use]
    pub fn new(size: Duration) -> Self {
        Self(i64::try_from(size.as_secs()).unwrap_or(i64::MAX).max(1))
    }

    /// The size as a duration.
    #[must_use]
    pub fn as_duration(self) -> Duration {
        Duration::from_secs(self.0.unsigned_abs())
    }

    /// The slab of a time in whole seconds (as [`to_seconds`] gives).
    #[must_use]
    pub fn slab_of_seconds(self, seconds: i64) -> i64 {
        seconds.div_euclid(self.0)
    }

    /// The slab holding timers at `time`.
    #[must_use]
    pub fn slab_of(self, time: Timestamp) -> i64 {
        self.slab_of_seconds(to_seconds(time))
    }

    /// The slabs holding the timers with `from <= time < until` (both
    /// rounded): every slab such a timer can be in, and no other, first to
    /// last. `None` when the range holds no time.
    #[must_use]
    pub fn slabs(self, from: Timestamp, until: Timestamp) -> Option<RangeInclusive<i64>> {
        let (from, until) = (to_seconds(from), to_seconds(until));
        // `until > from >= MIN_SECONDS`, so `until - 1` does not overflow.
        (from < until).then(|| self.slab_of_seconds(from)..=self.slab_of_seconds(until - 1))
    }
}

impl Default for SlabSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One timer of a partition: a key, a time and a kind.
///
/// Invariant: entries a store returns have whole-second times (see
/// [`round_to_second`]); the times a batch schedules may be any and are
/// rounded by the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerEntry {
    /// The key the timer belongs to.
    pub key: Key,
    /// When the timer fires.
    pub time: Timestamp,
    /// Who the timer is for.
    pub kind: TimerKind,
    /// The W3C `traceparent` of the span that scheduled the timer, if any,
    /// so the span that handles it can link to that one (`follows_from`).
    pub trace: Option<Arc<str>>,
}

impl TimerEntry {
    /// An application timer for `key` at `time`, with no trace.
    #[must_use]
    pub fn new(key: impl Into<Key>, time: Timestamp) -> Self {
        Self {
            key: key.into(),
            time,
            kind: TimerKind::Application,
            trace: None,
        }
    }

    /// The same timer, of `kind`.
    #[must_use]
    pub fn with_kind(mut self, kind: TimerKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same timer, scheduled by the span with W3C `traceparent` `trace`.
    #[must_use]
    pub fn with_trace(mut self, trace: impl Into<Arc<str>>) -> Self {
        self.trace = Some(trace.into());
        self
    }
}

/// The reads of a persistent store of timers, per partition and key, with
/// second precision. Timers are written by [`Stores::commit`] alone.
///
/// Contract (checked by the conformance suite,
/// `prosody_conformance::store::timer`), for the [`TimerChange`]s a commit writes
/// and the reads here: every time is rounded with [`round_to_second`]; a
/// partition holds at most one timer per (key, kind, time), so scheduling
/// one twice leaves one (with the trace of the last schedule);
/// [`Unschedule`](super::TimerChange::Unschedule) removes that one timer and
/// [`Clear`](super::TimerChange::Clear) every timer of the key and kind, both
/// succeeding when there is nothing to remove; [`scheduled`](Self::scheduled)
/// and [`load`](Self::load) always agree with each other and with the
/// commits that completed before them; partitions (and topics) are
/// independent of each other. Clones share the same timers.
///
/// [`Stores::commit`]: super::Stores::commit
/// [`TimerChange`]: super::TimerChange
pub trait TimerStore: Clone + Send + Sync + 'static {
    /// The times of the key's timers of `kind`, ascending.
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send;

    /// Every timer of the partition with `from <= time < until`, of every
    /// kind, ordered by (time, key, kind). Implementations read only the slabs the range touches
    /// ([`SlabSize::slabs`]).
    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::{SlabSize, from_seconds, round_to_second, to_seconds};
    use crate::clock::Timestamp;
    use proptest::prelude::*;
    use std::time::Duration;

    fn ms(millis: i64) -> Timestamp {
        Timestamp::from_millis(millis)
    }

    #[test]
    fn rounds_to_the_nearest_second_halves_up() {
        for (millis, rounded) in [
            (12_000, 12_000),
            (12_400, 12_000),
            (12_499, 12_000),
            (12_500, 13_000),
            (12_999, 13_000),
            (-400, 0),
            (-500, 0),
            (-501, -1000),
            (-1_500, -1_000),
        ] {
            assert_eq!(round_to_second(ms(millis)), ms(rounded), "{millis} ms");
        }
    }

    #[test]
    fn the_extremes_saturate_to_whole_seconds() {
        let max = round_to_second(ms(i64::MAX));
        assert_eq!(max.as_millis() % 1000, 0);
        assert!(i64::MAX - max.as_millis() < 1000);
        let min = round_to_second(ms(i64::MIN));
        assert_eq!(min.as_millis() % 1000, 0);
        assert!(min.as_millis() - i64::MIN < 1000);
        assert_eq!(from_seconds(i64::MAX), max);
        assert_eq!(from_seconds(i64::MIN), min);
    }

    #[test]
    fn slab_sizes_are_whole_seconds_and_at_least_one() {
        assert_eq!(SlabSize::default().as_duration(), Duration::from_secs(3600));
        assert_eq!(
            SlabSize::new(Duration::from_millis(1500)).as_duration(),
            Duration::from_secs(1)
        );
        assert_eq!(
            SlabSize::new(Duration::ZERO).as_duration(),
            Duration::from_secs(1)
        );
        assert_eq!(SlabSize::new(Duration::MAX).slab_of(ms(i64::MAX)), 0);
    }

    #[test]
    fn slabs_floor_divide_the_rounded_time() {
        let hour = SlabSize::DEFAULT;
        assert_eq!(hour.slab_of(ms(0)), 0);
        assert_eq!(hour.slab_of(ms(3_599_499)), 0);
        // Rounds up into the next slab.
        assert_eq!(hour.slab_of(ms(3_599_500)), 1);
        assert_eq!(hour.slab_of(ms(3_600_000)), 1);
        assert_eq!(hour.slab_of(ms(-1_000)), -1);
        assert_eq!(hour.slab_of(ms(-3_600_000)), -1);
        assert_eq!(hour.slab_of(ms(-3_601_000)), -2);
    }

    #[test]
    fn the_slabs_of_a_range_end_before_its_end() {
        let hour = SlabSize::DEFAULT;
        let h = 3_600_000;
        assert_eq!(hour.slabs(ms(0), ms(h)), Some(0..=0));
        assert_eq!(hour.slabs(ms(0), ms(h + 1000)), Some(0..=1));
        assert_eq!(hour.slabs(ms(h - 1000), ms(3 * h)), Some(0..=2));
        assert_eq!(hour.slabs(ms(-1000), ms(1000)), Some(-1..=0));
        assert_eq!(hour.slabs(ms(h), ms(h)), None);
        assert_eq!(hour.slabs(ms(h), ms(0)), None);
        // Both ends round: [1 s, 1 s) is empty.
        assert_eq!(hour.slabs(ms(600), ms(1400)), None);
    }

    proptest! {
        /// Every time in a range is in one of the range's slabs, and
        /// every one of those slabs holds a time of the range.
        #[test]
        fn a_range_lies_in_exactly_its_slabs(
            size in 1u64..5000,
            from in -20_000_000i64..20_000_000,
            len in 0i64..20_000_000,
            probe in 0i64..20_000_000,
        ) {
            let slab = SlabSize::new(Duration::from_secs(size));
            let (from, until) = (ms(from), ms(from + len));
            let slabs = slab.slabs(from, until);
            let (first, last) = (to_seconds(from), to_seconds(until));
            let t = first + probe % (last - first).max(1);
            match slabs {
                Some(slabs) => {
                    prop_assert!(t < last);
                    prop_assert!(slabs.contains(&slab.slab_of(from_seconds(t))));
                    prop_assert_eq!(*slabs.start(), slab.slab_of_seconds(first));
                    prop_assert_eq!(*slabs.end(), slab.slab_of_seconds(last - 1));
                }
                None => prop_assert!(first >= last),
            }
        }

        #[test]
        fn rounding_is_idempotent_and_within_half_a_second(millis in any::<i64>()) {
            let rounded = round_to_second(ms(millis));
            prop_assert_eq!(round_to_second(rounded), rounded);
            prop_assert_eq!(rounded.as_millis().rem_euclid(1000), 0);
            let within_range = (i64::MIN + 1000..i64::MAX - 1000).contains(&millis);
            if within_range {
                let diff = rounded.as_millis() - millis;
                prop_assert!((-499..=500).contains(&diff), "{} -> {}", millis, rounded.as_millis());
            }
        }
    }
}
