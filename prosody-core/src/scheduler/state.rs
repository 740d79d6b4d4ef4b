//! The state every service of one scheduler layer shares: free permits,
//! waiting calls, and the virtual times that order them.

use super::cache::VirtualTimes;
use super::class::{ClassClock, PerClass, other};
use super::config::SchedulerConfig;
use super::decay::{Decay, Moment};
use super::queue::{Boost, Queue};
use crate::context::Demand;
use crate::key::Key;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The right to run one inner call, until it completes or its handler
/// succeeded.
///
/// Invariant: every permit that goes out comes back exactly once, when it is
/// dropped, whatever drops it (completion, cancellation, a panic unwinding
/// the call, or a receiver dropped with the permit still in it); only the
/// scheduler itself defuses a permit it could not deliver, under its lock.
#[derive(Debug)]
pub(super) struct Permit {
    /// `None` once defused.
    shared: Option<Arc<Shared>>,
    key: Key,
    class: Demand,
    /// When the permit went out, in nanoseconds since the scheduler's
    /// epoch; the call is charged from here.
    started: u128,
}

impl Permit {
    /// Drops the permit without returning it (the caller already did).
    fn defuse(mut self) {
        self.shared = None;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.release(&self.key, self.class, self.started);
        }
    }
}

/// What a new call gets.
pub(super) enum Admission {
    /// A free permit: run now.
    Run(Permit),
    /// Wait for a permit on this channel.
    Wait(oneshot::Receiver<Permit>),
    /// No free permit, and the call may not wait.
    Refused,
}

/// The configuration in the form the scheduler computes with.
#[derive(Copy, Clone, Debug)]
struct Settings {
    boost: Boost,
    decay: Decay,
}

/// Shared by every service cloned from one layer.
#[derive(Debug)]
pub(super) struct Shared {
    settings: Settings,
    state: Mutex<State>,
}

/// Invariant: `available` permits are free only while no live call waits:
/// a returned permit goes to a waiter if there is one, and a call waits only
/// when `available` is zero. So `available` plus the permits out is always
/// `max_concurrency`.
#[derive(Debug)]
struct State {
    epoch: Instant,
    available: usize,
    queues: PerClass<Queue<Permit>>,
    classes: PerClass<ClassClock>,
    keys: VirtualTimes,
}

impl Shared {
    /// The state for `config` (values that fail validation take their
    /// defaults).
    pub(super) fn new(config: SchedulerConfig) -> Self {
        let config = config.sanitized();
        let now = Instant::now();
        let decay = Decay::with_half_life(config.max_wait / 2);
        Self {
            settings: Settings {
                boost: Boost {
                    wait_weight: config.wait_weight,
                    max_wait: config.max_wait.as_secs_f64(),
                },
                decay,
            },
            state: Mutex::new(State {
                epoch: now,
                available: config.max_concurrency.get(),
                queues: PerClass {
                    normal: Queue::new(now),
                    failure: Queue::new(now),
                },
                classes: PerClass {
                    normal: ClassClock::new(1.0 - config.failure_weight),
                    failure: ClassClock::new(config.failure_weight),
                },
                keys: VirtualTimes::new(config.cache_size, decay),
            }),
        }
    }

    /// The lock never guards a half-done change (nothing in it panics), so a
    /// poisoned lock is still consistent.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a call of `key` in `class`: a free permit, or a place in the
    /// queue if `may_wait`.
    pub(super) fn admit(self: &Arc<Self>, key: &Key, class: Demand, may_wait: bool) -> Admission {
        let now = Instant::now();
        let mut state = self.lock();
        let now = Moment::new(state.epoch, now);
        if let Some(left) = state.available.checked_sub(1) {
            state.available = left;
            state.classes.get_mut(class).start(now.nanos);
            return Admission::Run(Permit {
                shared: Some(Arc::clone(self)),
                key: key.clone(),
                class,
                started: now.nanos,
            });
        }
        if !may_wait {
            return Admission::Refused;
        }
        let (sender, receiver) = oneshot::channel();
        state.enqueue(key, class, now, self.settings, sender);
        Admission::Wait(receiver)
    }

    /// A permit of `key` in `class`, out since `started`, came back: charge
    /// the key and the class, and pass the permit on.
    fn release(self: &Arc<Self>, key: &Key, class: Demand, started: u128) {
        let now = Instant::now();
        let settings = self.settings;
        let mut state = self.lock();
        let now = Moment::new(state.epoch, now);
        state.keys.charge(key, now.since(started), now);
        state
            .classes
            .get_mut(class)
            .finish(settings.decay, started, now);
        state.hand_over(self, settings, now);
    }

    /// How many permits are free.
    #[cfg(test)]
    pub(super) fn available(&self) -> usize {
        self.lock().available
    }

    /// The virtual time of `key` now.
    #[cfg(test)]
    pub(super) fn virtual_time(&self, key: &Key) -> f64 {
        let state = self.lock();
        state
            .keys
            .get(key, Moment::new(state.epoch, Instant::now()))
    }
}

impl State {
    fn enqueue(
        &mut self,
        key: &Key,
        class: Demand,
        now: Moment,
        settings: Settings,
        sender: oneshot::Sender<Permit>,
    ) {
        if self.queues.get(class).is_empty() && self.classes.get(class).is_idle() {
            let level = self.classes.get(other(class)).share(settings.decay, now);
            self.classes
                .get_mut(class)
                .catch_up(level, settings.decay, now);
        }
        let virtual_time = self.keys.get(key, now);
        self.queues
            .get_mut(class)
            .push(key.clone(), virtual_time, now.at, settings.decay, sender);
    }

    /// The class to serve next: the only one with waiters, or of two, the
    /// one that received less execution time per unit of weight (normal on
    /// a tie).
    fn next_class(&self, settings: Settings, now: Moment) -> Option<Demand> {
        match (
            self.queues.normal.is_empty(),
            self.queues.failure.is_empty(),
        ) {
            (true, true) => None,
            (false, true) => Some(Demand::Normal),
            (true, false) => Some(Demand::Failure),
            (false, false) => {
                let normal = self.classes.normal.share(settings.decay, now);
                let failure = self.classes.failure.share(settings.decay, now);
                Some(if failure < normal {
                    Demand::Failure
                } else {
                    Demand::Normal
                })
            }
        }
    }

    /// Gives a free permit to the best live waiter, or back to `available`.
    fn hand_over(&mut self, shared: &Arc<Shared>, settings: Settings, now: Moment) {
        while let Some(class) = self.next_class(settings, now) {
            let Some(waiter) =
                self.queues
                    .get_mut(class)
                    .pop_best(now.at, settings.decay, settings.boost)
            else {
                break;
            };
            self.classes.get_mut(class).start(now.nanos);
            let permit = Permit {
                shared: Some(Arc::clone(shared)),
                key: waiter.key,
                class,
                started: now.nanos,
            };
            match waiter.sender.send(permit) {
                Ok(()) => return,
                Err(permit) => {
                    // The call was dropped while it waited: skip it.
                    self.classes.get_mut(class).cancel(now.nanos);
                    permit.defuse();
                }
            }
        }
        self.available = self.available.saturating_add(1);
    }
}
