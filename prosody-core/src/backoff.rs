//! Exponential backoff, the one rule of every wait before trying again:
//! the runtime's last-resort retries, the retry stage, the defer stage
//! and the opening of a partition's stores.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// Delays that double from `base` up to `max`.
///
/// Invariant: [`delay`](Self::delay) of attempt 1 is `min(base, max)`, and
/// delays never decrease as the attempt grows, up to `max`, which none
/// exceeds. A jittered delay ([`jittered`](Self::jittered)) is within a
/// quarter of the plain one and never above `max`: below the cap it is
/// stretched by up to a quarter, so jittered delays below the cap never
/// decrease either (doubling outgrows the stretch); at the cap it is
/// shortened by up to a quarter, but never below `base`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// Delays from `base`, doubling, capped at `max`.
    #[must_use]
    pub const fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The first delay.
    #[must_use]
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest delay.
    #[must_use]
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The delay before try number `attempt` after the first (from 1):
    /// `base * 2^(attempt-1)`, capped at `max`.
    #[must_use]
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// [`delay`](Self::delay) moved by `jitter` (in `0..1`): stretched by
    /// up to a quarter below the cap, never above `max`; at the cap, `max`
    /// shortened by up to a quarter, never below `base`, so keys failing
    /// together in a long outage do not try again in lockstep.
    #[must_use]
    pub fn jittered(&self, attempt: u32, jitter: f64) -> Duration {
        let jitter = jitter.clamp(0.0, 1.0);
        let delay = self.delay(attempt);
        if delay >= self.max {
            return scaled(self.max, 1.0 - 0.25 * jitter).max(self.base.min(self.max));
        }
        scaled(delay, 1.0 + 0.25 * jitter).min(self.max)
    }

    /// A jitter in `0..1` that differs across keys and attempts, and is
    /// the same for the same key and attempt.
    #[must_use]
    pub fn jitter(key: &str, attempt: u32) -> f64 {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        attempt.hash(&mut hasher);
        #[allow(clippy::cast_precision_loss, reason = "a fraction needs no precision")]
        let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
        fraction
    }
}

/// `duration * factor`, saturating rather than panicking.
fn scaled(duration: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(duration.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// Delays start at the base (or the cap), never decrease, never pass
        /// the cap; jitter keeps them ordered below the cap and within a
        /// quarter of the plain delay.
        #[test]
        fn delays_double_up_to_the_cap_jittered_or_not(
            base in 1u64..10_000,
            max in 1u64..1_000_000,
            attempt in 1u32..40,
            jitter in 0.0f64..1.0,
            other in 0.0f64..1.0,
        ) {
            let backoff = Backoff::new(Duration::from_millis(base), Duration::from_millis(max));
            let (base, max) = (backoff.base(), backoff.max());
            prop_assert_eq!(backoff.delay(1), base.min(max));
            let delay = backoff.delay(attempt);
            prop_assert!(delay <= max);
            prop_assert!(backoff.delay(attempt + 1) >= delay);
            let jittered = backoff.jittered(attempt, jitter);
            prop_assert!(jittered <= max);
            prop_assert!(jittered >= base.min(max));
            if delay < max {
                prop_assert!(jittered >= delay);
                prop_assert!(jittered.as_secs_f64() <= delay.as_secs_f64() * 1.25 + 1e-9);
                if backoff.delay(attempt + 1) < max {
                    let next = backoff.jittered(attempt + 1, other);
                    prop_assert!(next >= jittered, "{next:?} < {jittered:?}");
                }
            } else {
                prop_assert!(jittered.as_secs_f64() >= max.as_secs_f64() * 0.75 - 1e-9);
            }
        }
    }

    #[test]
    #[allow(clippy::float_cmp, reason = "the same inputs give the same bits")]
    fn the_jitter_is_a_fraction_that_depends_on_key_and_attempt() {
        let a = Backoff::jitter("k", 1);
        assert!((0.0..1.0).contains(&a));
        assert_eq!(a, Backoff::jitter("k", 1));
        assert_ne!(a, Backoff::jitter("k", 2));
        assert_ne!(a, Backoff::jitter("j", 1));
    }

    #[test]
    fn huge_delays_saturate_instead_of_panicking() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::MAX);
        assert!(backoff.delay(200) >= backoff.delay(32));
        assert!(backoff.jittered(200, 1.0) >= backoff.delay(200));
    }
}
