//! Per-key virtual time in a bounded cache.

use super::decay::{Decay, Moment};
use crate::hash::FastMap;
use crate::key::Key;
use std::num::NonZeroUsize;

/// The virtual time of each key: the seconds its handler calls ran,
/// decaying with [`Decay`]. A key not in the cache has virtual time zero.
///
/// A key's value is kept as a level whose order never changes as time
/// passes: `level = ln(virtual_time) + rate * (t - epoch)` for the value at
/// any `t`, where `epoch` is the scheduler's: every [`Moment`] passed in is
/// measured from it. Every value decays by the same factor, so comparing
/// levels compares the current values without touching them, and a charge
/// updates its key in place.
///
/// Invariant (bounded memory): holds at most `capacity` keys. When a new
/// key would exceed it, the half of the keys with the LOWEST current
/// virtual time (possibly the new key) is evicted in one pass in place, so
/// a charge costs amortized constant time even when every charge brings a
/// new key. Forgetting a key counts it as zero, and each key forgotten had
/// no more virtual time than any key kept: the busy keys, which fairness is
/// about, are the ones the cache keeps.
#[derive(Debug)]
pub(super) struct VirtualTimes {
    capacity: NonZeroUsize,
    decay: Decay,
    levels: FastMap<Key, f64>,
    /// The levels of an eviction, kept to spare an allocation each time.
    scratch: Vec<f64>,
}

impl VirtualTimes {
    /// An empty cache of at most `capacity` keys.
    pub(super) fn new(capacity: NonZeroUsize, decay: Decay) -> Self {
        Self {
            capacity,
            decay,
            levels: FastMap::default(),
            scratch: Vec::new(),
        }
    }

    /// The level that all values share at `now`.
    fn offset(&self, now: Moment) -> f64 {
        self.decay.rate() * now.seconds()
    }

    /// The virtual time of `key` at `now`, in seconds.
    pub(super) fn get(&self, key: &Key, now: Moment) -> f64 {
        self.levels
            .get(key)
            .map_or(0.0, |level| (level - self.offset(now)).exp())
    }

    /// Adds `ran` seconds of execution to `key` at `now`, evicting the keys
    /// of lowest virtual time if the cache is over capacity.
    pub(super) fn charge(&mut self, key: &Key, ran: f64, now: Moment) {
        let offset = self.offset(now);
        let ran = ran.max(0.0);
        let Some(level) = self.levels.get_mut(key) else {
            if ran > 0.0 && ran.is_finite() {
                self.levels.insert(key.clone(), ran.ln() + offset);
                if self.levels.len() > self.capacity.get() {
                    self.evict();
                }
            }
            return;
        };
        let total = (*level - offset).exp() + ran;
        if total > 0.0 && total.is_finite() {
            *level = total.ln() + offset;
        } else {
            self.levels.remove(key);
        }
    }

    /// Drops the keys of the lower half by level (keys level with the
    /// median go too), and at least the excess over capacity.
    fn evict(&mut self) {
        let len = self.levels.len();
        let drop = (len / 2)
            .max(len.saturating_sub(self.capacity.get()))
            .max(1);
        self.scratch.clear();
        self.scratch.extend(self.levels.values().copied());
        let (_, threshold, _) = self
            .scratch
            .select_nth_unstable_by(drop - 1, f64::total_cmp);
        let threshold = *threshold;
        // Ties at the threshold go too: none of them is above a key kept.
        self.levels.retain(|_, level| *level > threshold);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.levels.len()
    }
}

#[cfg(test)]
mod tests {
    use super::VirtualTimes;
    use crate::key::Key;
    use crate::scheduler::decay::{Decay, Moment};
    use std::num::NonZeroUsize;
    use std::time::Duration;
    use tokio::time::{Instant, advance};

    fn cache(capacity: usize) -> VirtualTimes {
        VirtualTimes::new(
            NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            Decay::with_half_life(Duration::from_secs(60)),
        )
    }

    /// The time on tokio's clock, from an epoch at the first call.
    fn clock() -> impl Fn() -> Moment {
        let epoch = Instant::now();
        move || Moment::new(epoch, Instant::now())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[tokio::test(start_paused = true)]
    async fn accumulates_and_halves_every_half_life() {
        let now = clock();
        let mut times = cache(4);
        let key = Key::from("k");
        times.charge(&key, 3.0, now());
        times.charge(&key, 5.0, now());
        assert!(close(times.get(&key, now()), 8.0));
        advance(Duration::from_secs(60)).await;
        assert!(close(times.get(&key, now()), 4.0));
        times.charge(&key, 1.0, now());
        advance(Duration::from_secs(120)).await;
        assert!(close(times.get(&key, now()), 1.25));
        assert!(close(times.get(&Key::from("never"), now()), 0.0));
    }

    #[tokio::test(start_paused = true)]
    async fn stays_within_capacity_by_evicting_the_lowest_virtual_time() {
        let now = clock();
        let mut times = cache(8);
        // Keys 1..=8 with virtual time equal to their number.
        for i in 1..=8_u32 {
            times.charge(&Key::from(i.to_string()), f64::from(i), now());
        }
        advance(Duration::from_secs(30)).await;
        // Over capacity: the lower half goes, and with nine keys that is
        // four (decay does not change the order): keys 1 to 4.
        times.charge(&Key::from("big"), 100.0, now());
        assert_eq!(times.len(), 5);
        for gone in ["1", "2", "3", "4"] {
            assert!(close(times.get(&Key::from(gone), now()), 0.0));
        }
        assert!(times.get(&Key::from("5"), now()) > 0.0);
        assert!(times.get(&Key::from("big"), now()) > 50.0);
        // Room again: a new key is kept until the cache fills.
        for i in 1..=3_u32 {
            times.charge(&Key::from(format!("new{i}")), 0.001, now());
        }
        assert_eq!(times.len(), 8);
        // A new key lower than everything is among those evicted.
        times.charge(&Key::from("tiny"), 0.0001, now());
        assert_eq!(times.len(), 5);
        assert!(close(times.get(&Key::from("tiny"), now()), 0.0));
        assert!(times.get(&Key::from("big"), now()) > 50.0);
        // Many keys: never above capacity.
        for i in 0..1_000_u32 {
            times.charge(&Key::from(format!("x{i}")), f64::from(i % 17), now());
            assert!(times.len() <= 8);
        }
        assert!(times.get(&Key::from("big"), now()) > 50.0);
    }

    proptest::proptest! {
        /// Charges at one instant (so values are plain sums) over duplicate
        /// keys, into a cache of 16: it never holds more than 16 keys, what
        /// it remembers is exact, and every key it forgot was charged no
        /// more, in total, than each key it kept when it forgot it.
        #[test]
        fn evicts_only_the_lowest_and_stays_bounded(
            charges in proptest::collection::vec((0..64u8, 1..1000u32), 1..400)
        ) {
            let epoch = Instant::now();
            let now = Moment::new(epoch, epoch);
            let mut times = VirtualTimes::new(
                NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN),
                Decay::with_half_life(Duration::from_secs(60)),
            );
            let mut totals = std::collections::HashMap::<u8, f64>::new();
            for (key, amount) in charges {
                let name = Key::from(key.to_string());
                let kept = times.get(&name, now);
                let total = kept + f64::from(amount);
                times.charge(&name, f64::from(amount), now);
                totals.insert(key, total);
                proptest::prop_assert!(times.len() <= 16);
                let remembered: Vec<(u8, f64)> = totals
                    .keys()
                    .map(|k| (*k, times.get(&Key::from(k.to_string()), now)))
                    .collect();
                let lowest_kept = remembered
                    .iter()
                    .filter(|(_, v)| *v > 0.0)
                    .map(|(_, v)| *v)
                    .fold(f64::INFINITY, f64::min);
                for (k, value) in remembered {
                    if value > 0.0 {
                        proptest::prop_assert!((value - totals[&k]).abs() < 1e-6 * totals[&k]);
                    } else {
                        // Forgotten: it never comes back above a kept key.
                        proptest::prop_assert!(totals[&k] <= lowest_kept * (1.0 + 1e-9));
                        totals.insert(k, 0.0);
                    }
                }
            }
        }
    }
}
