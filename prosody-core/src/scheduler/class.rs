//! The execution time each class (normal, failure) received, which decides
//! the split between them.

use super::decay::{Decay, nanos, nanos_to_seconds, seconds};
use crate::context::Demand;
use tokio::time::Instant;

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
    updated: Instant,
    /// Permits of this class that are out.
    running: usize,
    /// The sum of their start instants, in nanoseconds since the epoch.
    started: u128,
}

impl ClassClock {
    /// A class with `weight` that has received nothing.
    pub(super) fn new(weight: f64, now: Instant) -> Self {
        Self {
            weight,
            completed: 0.0,
            updated: now,
            running: 0,
            started: 0,
        }
    }

    /// Whether no permit of this class is out.
    pub(super) fn is_idle(&self) -> bool {
        self.running == 0
    }

    fn received(&self, decay: Decay, epoch: Instant, now: Instant) -> f64 {
        let completed = self.completed * decay.factor(seconds(self.updated, now));
        let count = u128::try_from(self.running).unwrap_or(u128::MAX);
        let in_flight = nanos(epoch, now)
            .saturating_mul(count)
            .saturating_sub(self.started);
        completed + nanos_to_seconds(in_flight)
    }

    /// The execution time received per unit of weight; a class of weight 0
    /// is always behind the other (it runs only when the other has nobody
    /// waiting).
    pub(super) fn share(&self, decay: Decay, epoch: Instant, now: Instant) -> f64 {
        if self.weight > 0.0 {
            self.received(decay, epoch, now) / self.weight
        } else {
            f64::INFINITY
        }
    }

    /// A permit of this class went out at `at`.
    pub(super) fn start(&mut self, epoch: Instant, at: Instant) {
        self.running = self.running.saturating_add(1);
        self.started = self.started.saturating_add(nanos(epoch, at));
    }

    /// The permit that went out at `at` was never used (its call was gone):
    /// undo [`ClassClock::start`] without charging.
    pub(super) fn cancel(&mut self, epoch: Instant, at: Instant) {
        self.running = self.running.saturating_sub(1);
        self.started = self.started.saturating_sub(nanos(epoch, at));
    }

    /// The permit that went out at `at` came back at `now`: its time moves
    /// from running to completed.
    pub(super) fn finish(&mut self, decay: Decay, epoch: Instant, at: Instant, now: Instant) {
        self.cancel(epoch, at);
        self.completed =
            self.completed * decay.factor(seconds(self.updated, now)) + seconds(at, now);
        self.updated = now;
    }

    /// Raises an idle class to `share` per unit of weight, so a class that
    /// had nothing to run banks no credit: when it comes back it starts level
    /// with the other class, not ahead of it by its whole absence.
    pub(super) fn catch_up(&mut self, share: f64, decay: Decay, epoch: Instant, now: Instant) {
        if !self.is_idle() || !share.is_finite() || self.weight <= 0.0 {
            return;
        }
        let floor = share * self.weight;
        if self.received(decay, epoch, now) < floor {
            self.completed = floor;
            self.updated = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClassClock;
    use crate::scheduler::decay::Decay;
    use std::time::Duration;
    use tokio::time::{Instant, advance};

    #[tokio::test(start_paused = true)]
    async fn counts_running_and_completed_time() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let epoch = Instant::now();
        let mut clock = ClassClock::new(0.5, epoch);
        advance(Duration::from_secs(10)).await;
        let first = Instant::now();
        clock.start(epoch, first);
        clock.start(epoch, first);
        advance(Duration::from_secs(3)).await;
        // Two calls running for 3 s: 6 s received, 12 per unit of weight.
        assert!((clock.share(decay, epoch, Instant::now()) - 12.0).abs() < 1e-9);
        clock.finish(decay, epoch, first, Instant::now());
        clock.cancel(epoch, first);
        assert!(clock.is_idle());
        advance(Duration::from_secs(60)).await;
        assert!((clock.share(decay, epoch, Instant::now()) - 3.0).abs() < 1e-9);
        clock.catch_up(100.0, decay, epoch, Instant::now());
        assert!((clock.share(decay, epoch, Instant::now()) - 100.0).abs() < 1e-9);
        let idle_weightless = ClassClock::new(0.0, epoch);
        assert!(
            idle_weightless
                .share(decay, epoch, Instant::now())
                .is_infinite()
        );
    }
}
