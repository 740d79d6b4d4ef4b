//! The execution time each class (normal, failure) received, which decides
//! the split between them.

use super::decay::{Decay, Moment, nanos_to_seconds};
use crate::context::Demand;

/// A value per scheduling class.
#[derive(Debug)]
pub(super) struct PerClass<T> {
    pub(super) normal: T,
    pub(super) failure: T,
}

impl<T> PerClass<T> {
    /// The value of `class`.
    pub(super) fn get(&self, class: Demand) -> &T {
        match class {
            Demand::Normal => &self.normal,
            Demand::Failure => &self.failure,
        }
    }

    /// The value of `class`, mutably.
    pub(super) fn get_mut(&mut self, class: Demand) -> &mut T {
        match class {
            Demand::Normal => &mut self.normal,
            Demand::Failure => &mut self.failure,
        }
    }
}

/// The other class.
pub(super) fn other(class: Demand) -> Demand {
    match class {
        Demand::Normal => Demand::Failure,
        Demand::Failure => Demand::Normal,
    }
}

/// The virtual-time pool of one class: the execution time (permit-held
/// seconds) its calls received, completed calls decaying with [`Decay`] and
/// running calls counted up to now.
///
/// Invariant: `running` and `started` describe exactly the permits of the
/// class that are out (granted and not yet returned), so the running time is
/// exact integer arithmetic however long the process lives.
#[derive(Debug)]
pub(super) struct ClassClock {
    /// The class's weight (its target share of execution time).
    weight: f64,
    /// Decayed seconds of completed calls, as of `updated`.
    completed: f64,
    /// When `completed` was last brought up to date, in nanoseconds since
    /// the epoch.
    updated: u128,
    /// Permits of this class that are out.
    running: usize,
    /// The sum of their start instants, in nanoseconds since the epoch.
    started: u128,
}

impl ClassClock {
    /// A class with `weight` that has received nothing, at the epoch.
    pub(super) fn new(weight: f64) -> Self {
        Self {
            weight,
            completed: 0.0,
            updated: 0,
            running: 0,
            started: 0,
        }
    }

    /// Whether no permit of this class is out.
    pub(super) fn is_idle(&self) -> bool {
        self.running == 0
    }

    fn received(&self, decay: Decay, now: Moment) -> f64 {
        let completed = self.completed * decay.factor(now.since(self.updated));
        let count = u128::try_from(self.running).unwrap_or(u128::MAX);
        let in_flight = now.nanos.saturating_mul(count).saturating_sub(self.started);
        completed + nanos_to_seconds(in_flight)
    }

    /// The execution time received per unit of weight; a class of weight 0
    /// is always behind the other (it runs only when the other has nobody
    /// waiting).
    pub(super) fn share(&self, decay: Decay, now: Moment) -> f64 {
        if self.weight > 0.0 {
            self.received(decay, now) / self.weight
        } else {
            f64::INFINITY
        }
    }

    /// A permit of this class went out at `at` (nanoseconds since the
    /// epoch).
    pub(super) fn start(&mut self, at: u128) {
        self.running = self.running.saturating_add(1);
        self.started = self.started.saturating_add(at);
    }

    /// The permit that went out at `at` was never used (its call was gone):
    /// undo [`ClassClock::start`] without charging.
    pub(super) fn cancel(&mut self, at: u128) {
        self.running = self.running.saturating_sub(1);
        self.started = self.started.saturating_sub(at);
    }

    /// The permit that went out at `at` came back at `now`: its time moves
    /// from running to completed.
    pub(super) fn finish(&mut self, decay: Decay, at: u128, now: Moment) {
        self.cancel(at);
        self.completed = self.completed * decay.factor(now.since(self.updated)) + now.since(at);
        self.updated = now.nanos;
    }

    /// Raises an idle class to `share` per unit of weight, so a class that
    /// had nothing to run banks no credit: when it comes back it starts level
    /// with the other class, not ahead of it by its whole absence.
    pub(super) fn catch_up(&mut self, share: f64, decay: Decay, now: Moment) {
        if !self.is_idle() || !share.is_finite() || self.weight <= 0.0 {
            return;
        }
        let floor = share * self.weight;
        if self.received(decay, now) < floor {
            self.completed = floor;
            self.updated = now.nanos;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClassClock;
    use crate::scheduler::decay::{Decay, Moment};
    use std::time::Duration;
    use tokio::time::{Instant, advance};

    #[tokio::test(start_paused = true)]
    async fn counts_running_and_completed_time() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let epoch = Instant::now();
        let now = || Moment::new(epoch, Instant::now());
        let mut clock = ClassClock::new(0.5);
        advance(Duration::from_secs(10)).await;
        let first = now().nanos;
        clock.start(first);
        clock.start(first);
        advance(Duration::from_secs(3)).await;
        // Two calls running for 3 s: 6 s received, 12 per unit of weight.
        assert!((clock.share(decay, now()) - 12.0).abs() < 1e-9);
        clock.finish(decay, first, now());
        clock.cancel(first);
        assert!(clock.is_idle());
        advance(Duration::from_secs(60)).await;
        assert!((clock.share(decay, now()) - 3.0).abs() < 1e-9);
        clock.catch_up(100.0, decay, now());
        assert!((clock.share(decay, now()) - 100.0).abs() < 1e-9);
        let idle_weightless = ClassClock::new(0.0);
        assert!(idle_weightless.share(decay, now()).is_infinite());
    }
}
