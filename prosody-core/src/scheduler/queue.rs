//! The calls of one class waiting for a permit, and the priority that
//! orders them.

use super::decay::{Decay, seconds};
use crate::key::Key;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Past this much decay (in units of `ln`) since the queue's base, a new
/// waiter rebases the queue so scaled virtual times stay far from overflow.
const REBASE_AFTER: f64 = 20.0;

/// The fewest waiters at which a push sweeps out waiters whose call is gone.
const SWEEP_AT_LEAST: usize = 32;

/// The parameters of the wait boost.
#[derive(Copy, Clone, Debug)]
pub(super) struct Boost {
    /// The full boost, in seconds of virtual time.
    pub(super) wait_weight: f64,
    /// The wait, in seconds, at which the boost is full.
    pub(super) max_wait: f64,
}

/// The priority of a waiting call: lower runs first.
///
/// `virtual_time - wait_weight * min(wait / max_wait, 1)^2`: the key's
/// decayed virtual time (seconds of handler execution) minus a boost that
/// grows quadratically with the wait (seconds) and is full at `max_wait`.
pub(super) fn priority(virtual_time: f64, wait: f64, boost: Boost) -> f64 {
    let ratio = if boost.max_wait > 0.0 {
        (wait / boost.max_wait).min(1.0)
    } else {
        1.0
    };
    virtual_time - boost.wait_weight * ratio * ratio
}

/// One call waiting for a permit `T`.
#[derive(Debug)]
pub(super) struct Waiter<T> {
    /// The key of the call.
    pub(super) key: Key,
    /// When the call started waiting.
    arrived: Instant,
    /// The key's virtual time at arrival, scaled to the queue's base:
    /// `virtual_time * e^(rate * (arrived - base))`. Multiplying by
    /// `e^(-rate * (now - base))` gives the decayed value at `now`, so a scan
    /// needs one exponential, not one per waiter.
    scaled: f64,
    /// Where the permit goes; closed once the call is dropped.
    pub(super) sender: oneshot::Sender<T>,
}

/// The calls of one class waiting for a permit, in arrival order.
///
/// Invariant: holds every waiter pushed and not yet popped, except waiters
/// whose receiver was dropped, which a sweep may remove; a sweep runs when a
/// push doubles the length seen after the last sweep, so dead waiters cost
/// amortised constant time and their number stays below the live ones plus
/// [`SWEEP_AT_LEAST`].
#[derive(Debug)]
pub(super) struct Queue<T> {
    waiters: Vec<Waiter<T>>,
    /// The reference instant of the scaled virtual times.
    base: Instant,
    /// The length after the last sweep.
    swept: usize,
}

impl<T> Queue<T> {
    /// An empty queue.
    pub(super) fn new(now: Instant) -> Self {
        Self {
            waiters: Vec::new(),
            base: now,
            swept: 0,
        }
    }

    /// Whether no call waits (dead waiters count until they are removed).
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// How many waiters the queue holds, dead ones included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Adds a call of `key`, whose decayed virtual time now is
    /// `virtual_time`.
    pub(super) fn push(
        &mut self,
        key: Key,
        virtual_time: f64,
        now: Instant,
        decay: Decay,
        sender: oneshot::Sender<T>,
    ) {
        let elapsed = decay.rate() * seconds(self.base, now);
        if elapsed > REBASE_AFTER {
            let factor = (-elapsed).exp();
            for waiter in &mut self.waiters {
                waiter.scaled *= factor;
            }
            self.base = now;
        }
        let scaled = virtual_time * (decay.rate() * seconds(self.base, now)).exp();
        self.waiters.push(Waiter {
            key,
            arrived: now,
            scaled,
            sender,
        });
        if self.waiters.len() >= (2 * self.swept).max(SWEEP_AT_LEAST) {
            self.waiters.retain(|waiter| !waiter.sender.is_closed());
            self.swept = self.waiters.len();
        }
    }

    /// Removes and returns the waiter of lowest [`priority`] at `now`; of
    /// equal priorities, the one that arrived first.
    pub(super) fn pop_best(
        &mut self,
        now: Instant,
        decay: Decay,
        boost: Boost,
    ) -> Option<Waiter<T>> {
        let factor = decay.factor(seconds(self.base, now));
        let mut best: Option<(usize, f64)> = None;
        for (index, waiter) in self.waiters.iter().enumerate() {
            let value = priority(waiter.scaled * factor, seconds(waiter.arrived, now), boost);
            if best.is_none_or(|(_, lowest)| value < lowest) {
                best = Some((index, value));
            }
        }
        let (index, _) = best?;
        let waiter = self.waiters.remove(index);
        self.swept = self.swept.min(self.waiters.len());
        Some(waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::{Boost, Queue, priority};
    use crate::scheduler::decay::Decay;
    use std::time::Duration;
    use tokio::sync::oneshot;
    use tokio::time::{Instant, advance};

    const BOOST: Boost = Boost {
        wait_weight: 200.0,
        max_wait: 120.0,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn priority_is_virtual_time_minus_a_quadratic_capped_boost() {
        assert!(close(priority(5.0, 0.0, BOOST), 5.0));
        assert!(close(priority(5.0, 60.0, BOOST), 5.0 - 50.0));
        assert!(close(priority(5.0, 120.0, BOOST), 5.0 - 200.0));
        assert!(close(priority(5.0, 1_000.0, BOOST), 5.0 - 200.0));
        let no_boost = Boost {
            wait_weight: 0.0,
            ..BOOST
        };
        assert!(close(priority(5.0, 1_000.0, no_boost), 5.0));
    }

    fn push(queue: &mut Queue<u32>, key: &str, vt: f64, decay: Decay) -> oneshot::Receiver<u32> {
        let (sender, receiver) = oneshot::channel();
        queue.push(key.into(), vt, Instant::now(), decay, sender);
        receiver
    }

    fn order(queue: &mut Queue<u32>, decay: Decay, boost: Boost) -> Vec<String> {
        std::iter::from_fn(|| queue.pop_best(Instant::now(), decay, boost))
            .map(|w| w.key.to_string())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn lowest_virtual_time_first_then_arrival() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let mut queue = Queue::new(Instant::now());
        let _r = [
            push(&mut queue, "hot", 30.0, decay),
            push(&mut queue, "cold", 0.0, decay),
            push(&mut queue, "warm", 10.0, decay),
            push(&mut queue, "cold2", 0.0, decay),
        ];
        assert_eq!(
            order(&mut queue, decay, BOOST),
            ["cold", "cold2", "warm", "hot"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_overtakes_a_lower_virtual_time() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let mut queue = Queue::new(Instant::now());
        let _old = push(&mut queue, "busy", 40.0, decay);
        advance(Duration::from_secs(60)).await;
        // busy: 40 * 2^-1 - 200 * (60/120)^2 = 20 - 50 = -30; fresh: 10.
        let _new = push(&mut queue, "fresh", 10.0, decay);
        assert_eq!(order(&mut queue, decay, BOOST), ["busy", "fresh"]);
    }

    #[tokio::test(start_paused = true)]
    async fn virtual_time_decays_while_waiting_and_across_rebases() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let no_boost = Boost {
            wait_weight: 0.0,
            ..BOOST
        };
        let mut queue = Queue::new(Instant::now());
        let _a = push(&mut queue, "a", 1_000.0, decay);
        // Thirty half-lives: the next push rebases the queue, rescaling `a`.
        advance(Duration::from_secs(30 * 60)).await;
        let a_now = 1_000.0 * 2_f64.powi(-30);
        let _b = push(&mut queue, "b", 2.0 * a_now, decay);
        let _c = push(&mut queue, "c", 0.5 * a_now, decay);
        assert_eq!(order(&mut queue, decay, no_boost), ["c", "a", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn dead_waiters_are_swept_on_growth() {
        let decay = Decay::with_half_life(Duration::from_secs(60));
        let mut queue = Queue::new(Instant::now());
        for i in 0..100 {
            drop(push(&mut queue, &format!("gone-{i}"), 0.0, decay));
        }
        let _live = push(&mut queue, "live", 0.0, decay);
        assert!(queue.len() < 40, "dead waiters kept: {}", queue.len());
    }
}
