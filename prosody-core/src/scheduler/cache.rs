//! Per-key virtual time in a bounded cache.

use super::decay::{Decay, seconds};
use crate::hash::FastMap;
use crate::key::Key;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use tokio::time::Instant;

/// A key's virtual time in a form whose order never changes as time passes:
/// `level = ln(virtual_time) + rate * (t - epoch)` for the value at any `t`.
/// Every value decays by the same factor, so comparing levels compares the
/// current values without touching them.
#[derive(Copy, Clone, Debug)]
struct Rank {
    level: f64,
    /// Tells equal levels apart.
    seq: u64,
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        self.level
            .total_cmp(&other.level)
            .then(self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Rank {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Rank {}

/// The virtual time of each key: the seconds its handler calls ran,
/// decaying with [`Decay`]. A key not in the cache has virtual time zero.
///
/// Invariant (bounded memory): holds at most `capacity` keys. When a charge
/// would exceed it, the key with the LOWEST current virtual time is evicted
/// (possibly the charged key itself). Forgetting a key counts it as zero, so
/// evicting the lowest value loses the least: no remembered key is
/// under-counted by more than the smallest value the cache holds. The busy
/// keys, which fairness is about, are the ones it keeps.
#[derive(Debug)]
pub(super) struct VirtualTimes {
    capacity: NonZeroUsize,
    decay: Decay,
    epoch: Instant,
    by_key: FastMap<Key, Rank>,
    by_rank: BTreeMap<Rank, Key>,
    next_seq: u64,
}

impl VirtualTimes {
    /// An empty cache of at most `capacity` keys.
    pub(super) fn new(capacity: NonZeroUsize, decay: Decay, epoch: Instant) -> Self {
        Self {
            capacity,
            decay,
            epoch,
            by_key: FastMap::default(),
            by_rank: BTreeMap::new(),
            next_seq: 0,
        }
    }

    fn value(&self, rank: Rank, now: Instant) -> f64 {
        (rank.level - self.decay.rate() * seconds(self.epoch, now)).exp()
    }

    /// The virtual time of `key` at `now`, in seconds.
    pub(super) fn get(&self, key: &Key, now: Instant) -> f64 {
        self.by_key
            .get(key)
            .map_or(0.0, |rank| self.value(*rank, now))
    }

    /// Adds `ran` seconds of execution to `key` at `now`, evicting the key
    /// of lowest virtual time if the cache is over capacity.
    pub(super) fn charge(&mut self, key: &Key, ran: f64, now: Instant) {
        let current = match self.by_key.remove(key) {
            Some(rank) => {
                self.by_rank.remove(&rank);
                self.value(rank, now)
            }
            None => 0.0,
        };
        let total = current + ran.max(0.0);
        if total <= 0.0 || !total.is_finite() {
            return;
        }
        let rank = Rank {
            level: total.ln() + self.decay.rate() * seconds(self.epoch, now),
            seq: self.next_seq,
        };
        self.next_seq = self.next_seq.wrapping_add(1);
        self.by_key.insert(key.clone(), rank);
        self.by_rank.insert(rank, key.clone());
        while self.by_key.len() > self.capacity.get() {
            let Some((_, victim)) = self.by_rank.pop_first() else {
                break;
            };
            self.by_key.remove(&victim);
        }
    }

    /// How many keys the cache holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        debug_assert_eq!(self.by_key.len(), self.by_rank.len());
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::VirtualTimes;
    use crate::key::Key;
    use crate::scheduler::decay::Decay;
    use std::num::NonZeroUsize;
    use std::time::Duration;
    use tokio::time::{Instant, advance};

    fn cache(capacity: usize) -> VirtualTimes {
        VirtualTimes::new(
            NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            Decay::with_half_life(Duration::from_secs(60)),
            Instant::now(),
        )
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[tokio::test(start_paused = true)]
    async fn accumulates_and_halves_every_half_life() {
        let mut times = cache(4);
        let key = Key::from("k");
        times.charge(&key, 3.0, Instant::now());
        times.charge(&key, 5.0, Instant::now());
        assert!(close(times.get(&key, Instant::now()), 8.0));
        advance(Duration::from_secs(60)).await;
        assert!(close(times.get(&key, Instant::now()), 4.0));
        times.charge(&key, 1.0, Instant::now());
        advance(Duration::from_secs(120)).await;
        assert!(close(times.get(&key, Instant::now()), 1.25));
        assert!(close(times.get(&Key::from("never"), Instant::now()), 0.0));
    }

    #[tokio::test(start_paused = true)]
    async fn stays_within_capacity_by_evicting_the_lowest_virtual_time() {
        let mut times = cache(8);
        // Keys 1..=8 with virtual time equal to their number.
        for i in 1..=8_u32 {
            times.charge(&Key::from(i.to_string()), f64::from(i), Instant::now());
        }
        advance(Duration::from_secs(30)).await;
        // Key 1 is the lowest (decay does not change the order): it goes.
        times.charge(&Key::from("big"), 100.0, Instant::now());
        assert_eq!(times.len(), 8);
        assert!(close(times.get(&Key::from("1"), Instant::now()), 0.0));
        assert!(times.get(&Key::from("2"), Instant::now()) > 0.0);
        assert!(times.get(&Key::from("big"), Instant::now()) > 50.0);
        // A new key lower than everything is the one evicted.
        times.charge(&Key::from("tiny"), 0.001, Instant::now());
        assert_eq!(times.len(), 8);
        assert!(close(times.get(&Key::from("tiny"), Instant::now()), 0.0));
        assert!(times.get(&Key::from("2"), Instant::now()) > 0.0);
        // Many keys: never above capacity.
        for i in 0..1_000_u32 {
            times.charge(
                &Key::from(format!("x{i}")),
                f64::from(i % 17),
                Instant::now(),
            );
            assert!(times.len() <= 8);
        }
        assert!(times.get(&Key::from("big"), Instant::now()) > 50.0);
    }
}
