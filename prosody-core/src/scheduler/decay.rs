//! Exponential decay of virtual time, and the seconds arithmetic the
//! scheduler shares.

use std::time::Duration;
use tokio::time::Instant;

/// Exponential decay with a fixed half-life: a value `v` recorded at `t0` is
/// worth `v * 2^(-(t - t0) / half_life)` at `t`.
///
/// The scheduler uses half of `scheduler_max_wait` (60 s at the defaults) as
/// the half-life, for two reasons. `max_wait` is the horizon within which the
/// scheduler promises to serve a call, so history older than it should
/// hardly decide who runs next: after `max_wait` a key's virtual time has
/// dropped to a quarter. And a key that runs back to back forever levels off
/// at `half_life / ln 2` of virtual time (87 s at the defaults), below the
/// full wait boost (`scheduler_wait_weight`, 200): a busy key's call that
/// has waited `max_wait` still overtakes a fresh call of an idle key, as the
/// seeds' starvation rule promises.
#[derive(Copy, Clone, Debug)]
pub(super) struct Decay {
    /// The decay rate per second: `ln 2 / half_life`.
    rate: f64,
}

impl Decay {
    /// Decay that halves a value every `half_life` (at least a microsecond).
    pub(super) fn with_half_life(half_life: Duration) -> Self {
        let seconds = half_life.as_secs_f64().max(1e-6);
        Self {
            rate: std::f64::consts::LN_2 / seconds,
        }
    }

    /// The decay rate per second.
    pub(super) fn rate(self) -> f64 {
        self.rate
    }

    /// What one unit is worth after `seconds`.
    pub(super) fn factor(self, seconds: f64) -> f64 {
        (-self.rate * seconds).exp()
    }
}

/// An instant read once, with its distance from the scheduler's epoch
/// worked out once: the class clocks and virtual times compute in
/// nanoseconds since the epoch, so a permit's return reads the clock once
/// and subtracts instants once.
#[derive(Copy, Clone, Debug)]
pub(super) struct Moment {
    /// The instant.
    pub(super) at: Instant,
    /// Nanoseconds from the epoch to it (zero if it is not later).
    pub(super) nanos: u128,
}

impl Moment {
    /// `at`, measured from `epoch`.
    pub(super) fn new(epoch: Instant, at: Instant) -> Self {
        Self {
            at,
            nanos: nanos(epoch, at),
        }
    }

    /// Seconds from the epoch.
    pub(super) fn seconds(self) -> f64 {
        nanos_to_seconds(self.nanos)
    }

    /// Seconds from `earlier` (nanoseconds since the epoch), zero if this
    /// moment is not later.
    pub(super) fn since(self, earlier: u128) -> f64 {
        nanos_to_seconds(self.nanos.saturating_sub(earlier))
    }
}

/// Seconds from `earlier` to `later`, zero if `later` is not later.
pub(super) fn seconds(earlier: Instant, later: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64()
}

/// Nanoseconds from `epoch` to `at`, zero if `at` is not later.
fn nanos(epoch: Instant, at: Instant) -> u128 {
    at.saturating_duration_since(epoch).as_nanos()
}

/// A count of nanoseconds as seconds.
pub(super) fn nanos_to_seconds(nanos: u128) -> f64 {
    u64::try_from(nanos).map_or(f64::MAX, |n| Duration::from_nanos(n).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::Decay;
    use std::time::Duration;

    #[test]
    fn halves_every_half_life() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        assert!((decay.factor(0.0) - 1.0).abs() < 1e-12);
        assert!((decay.factor(60.0) - 0.5).abs() < 1e-12);
        assert!((decay.factor(120.0) - 0.25).abs() < 1e-12);
    }
}
