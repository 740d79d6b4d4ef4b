//! Monopolization: a key whose handler calls take too much of a window is
//! rejected with a transient error (pipeline mode), so the defer stage above
//! takes it out of the way of the other keys.
//!
//! Each tracked key (its topic and key) has a window of `window` length and
//! the handler time it used in that window: the duration, on tokio's clock,
//! of each call of the inner service (whatever its outcome), counted whole
//! in the window current when the call began. A window opens when a call of
//! the key arrives after the previous window ended, so a key's windows roll
//! over and an idle key starts afresh.
//!
//! Invariants:
//! - a call of a key whose used time in its current window exceeds
//!   `threshold * window` (the budget) is rejected with a transient
//!   [`Monopolized`] error before the inner service sees it; any other call
//!   passes;
//! - a rejection needs a budget overrun: only a key whose calls that began
//!   within the last `window` took longer than the budget can be rejected;
//! - calls of one key add up, whatever partitions they run in and whether
//!   or not they overlap: from its first call on, a key's calls share one
//!   tracker, which its first call puts in the cache. Only if two threads
//!   put a tracker in for the same key at the same moment (two first
//!   calls, or a call putting back a tracker the cache let go of) can one
//!   replace the other, and then the time of calls already ended with the
//!   replaced one is lost; a call still running with it adds it to the
//!   survivor when it ends;
//! - about `cache_size` keys are tracked (each shard of the cache at most
//!   its share, rounded up); removal path: `quick_cache` evicts by recency
//!   and frequency, and an evicted key's used time goes with it, so it
//!   starts afresh; the last call of it that was running then puts its
//!   tracker back when it ends or is dropped (or merges it into the one a
//!   later call put in), so eviction loses no time of a call that ran;
//! - disabled, the service is a pass-through.
//!
//! A call dropped before it completes is not counted.
//!
//! ```
//! use prosody_core::monopolization::{Monopolized, MonopolizationConfig, MonopolizationLayer};
//! use prosody_core::{Encoded, EventRequest, HandlerError};
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), HandlerError> {
//! // Each call takes six seconds; a key's budget is half of ten.
//! let slow = service_fn(|_: EventRequest<Encoded>| async {
//!     tokio::time::sleep(Duration::from_secs(6)).await;
//!     Ok::<_, HandlerError>(Some(()))
//! });
//! let config = MonopolizationConfig { threshold: 0.5, window: Duration::from_secs(10), ..MonopolizationConfig::default() };
//! let stack = ServiceBuilder::new().layer(MonopolizationLayer::new(&config)).service(slow);
//!
//! assert_eq!(stack.clone().oneshot(request("hot")).await?, Some(()));
//! let turned_away = stack.clone().oneshot(request("hot")).await;
//! assert!(turned_away.is_err_and(|error| error.source().is::<Monopolized>()));
//! assert_eq!(stack.oneshot(request("cold")).await?, Some(())); // other keys pass
//! # Ok(())
//! # }
//! ```

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{MonopolizationConfig, MonopolizationConfigError};
pub use future::ResponseFuture;
pub use layer::MonopolizationLayer;

use crate::error::HandlerError;
use crate::event::Topic;
use crate::handler::EventRequest;
use crate::handler::WaitMeter;
use crate::hash::{BoundedCache, bounded};
use crate::key::Key;
use crate::metrics::Action;
use quick_cache::Equivalent;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::Service;
use tracing::debug;

/// The error a rejected call fails with (transient): its key used more than
/// its budget of handler time in the current window.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "key {key} of topic {topic} monopolizes the handler: {used:?} in its {window:?} window, \
     over the budget of {budget:?}"
)]
pub struct Monopolized {
    /// The topic of the key.
    pub topic: Topic,
    /// The key.
    pub key: Key,
    /// Handler time used in the current window.
    pub used: Duration,
    /// Handler time allowed per window.
    pub budget: Duration,
    /// The window's length.
    pub window: Duration,
}

/// Handler time a key used in its current window.
#[derive(Copy, Clone, Debug)]
struct Usage {
    start: Instant,
    used: Duration,
}

impl Usage {
    /// Opens a new window at `at` if the current one ended by then.
    fn roll(&mut self, at: Instant, window: Duration) {
        if self.start.checked_add(window).is_some_and(|end| at >= end) {
            self.start = at;
            self.used = Duration::ZERO;
        }
    }

    /// Takes in `other`, the usage of a tracker of the same key that the
    /// cache let go of: if either window was still open when the other
    /// opened, they are one window, from the earlier start, and their times
    /// add up; otherwise the earlier window had ended, and the later one
    /// stands alone.
    fn merge(&mut self, other: Usage, window: Duration) {
        let (earlier, later) = if other.start < self.start {
            (other, *self)
        } else {
            (*self, other)
        };
        *self = if earlier
            .start
            .checked_add(window)
            .is_none_or(|end| later.start < end)
        {
            Usage {
                start: earlier.start,
                used: earlier.used.saturating_add(later.used),
            }
        } else {
            later
        };
    }
}

/// The handler time of one tracked key: what its calls add to when they
/// end, without looking the key up again. Calls of the key in other
/// partitions (a custom partitioner) share it, so their times add up.
#[derive(Debug)]
struct Tracker {
    /// The key it tracks, to put it back should the cache forget it while
    /// a call of it runs.
    tracked: (Topic, Key),
    usage: Mutex<Usage>,
    /// The key's calls' waits for scheduler permits, which are not its
    /// execution time. One per key serves the runtime, which runs one call
    /// of a key at a time.
    waited: WaitMeter,
}

impl Tracker {
    /// The lock never guards a half-done change (nothing under it panics),
    /// so a poisoned lock is still consistent.
    fn with<R>(&self, f: impl FnOnce(&mut Usage) -> R) -> R {
        f(&mut self.usage.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Counts a call that began at `begin` and ran for `ran` in the window
    /// current at `begin`: not at all if a later call has opened a newer
    /// window since.
    fn add(&self, begin: Instant, ran: Duration, window: Duration) {
        self.with(|usage| {
            usage.roll(begin, window);
            if begin >= usage.start {
                usage.used = usage.used.saturating_add(ran);
            }
        });
    }

    /// Takes in the usage of a tracker of the same key that the cache let
    /// go of.
    fn merge(&self, other: Usage, window: Duration) {
        self.with(|usage| usage.merge(other, window));
    }

    /// The time used in the window current at `now`.
    fn used(&self, now: Instant, window: Duration) -> Duration {
        self.with(|usage| {
            usage.roll(now, window);
            usage.used
        })
    }
}

/// A tracked key, borrowed: looks a key up without cloning it. Hashes as
/// the `(Topic, Key)` it stands for.
struct Tracked<'a>(&'a Topic, &'a Key);

impl Hash for Tracked<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.0, self.1).hash(state);
    }
}

impl Equivalent<(Topic, Key)> for Tracked<'_> {
    fn equivalent(&self, key: &(Topic, Key)) -> bool {
        *self.0 == key.0 && *self.1 == key.1
    }
}

/// What every service of one layer shares: the tracked keys.
pub(crate) struct Shared {
    window: Duration,
    budget: Duration,
    keys: BoundedCache<(Topic, Key), Arc<Tracker>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("window", &self.window)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(config: &MonopolizationConfig) -> Self {
        Self {
            window: config.window,
            budget: config.budget(),
            keys: bounded(config.cache_size),
        }
    }

    /// The tracker of `topic`/`key`, put in fresh (its window opening at
    /// `now`) if the cache does not know the key; or the time the key used
    /// in its current window, if that is over the budget.
    fn track(&self, topic: &Topic, key: &Key, now: Instant) -> Result<Arc<Tracker>, Duration> {
        if let Some(tracker) = self.keys.get(&Tracked(topic, key)) {
            let used = tracker.used(now, self.window);
            return if used > self.budget {
                Err(used)
            } else {
                Ok(tracker)
            };
        }
        let tracker = Arc::new(Tracker {
            tracked: (Arc::clone(topic), key.clone()),
            usage: Mutex::new(Usage {
                start: now,
                used: Duration::ZERO,
            }),
            waited: WaitMeter::default(),
        });
        self.keys
            .insert(tracker.tracked.clone(), Arc::clone(&tracker));
        Ok(tracker)
    }

    /// Counts a call of `tracker`'s key that began at `begin` and ran for
    /// `ran` (zero for a call dropped before it ended). Should the cache have let go of the tracker while the call
    /// ran (evicted, or replaced by another thread's for the same new key),
    /// the last call to let go of it too puts it back, or, if the cache
    /// holds another for the key, adds what it holds to that one. Exactly
    /// one call is the last, even when two end at once on two threads.
    fn record(&self, tracker: Arc<Tracker>, begin: Instant, ran: Duration) {
        tracker.add(begin, ran, self.window);
        let Some(Tracker {
            tracked,
            usage,
            waited,
        }) = Arc::into_inner(tracker)
        else {
            return;
        };
        let usage = usage.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = self.keys.get(&Tracked(&tracked.0, &tracked.1)) {
            current.merge(usage, self.window);
            return;
        }
        let usage = Mutex::new(usage);
        self.keys.insert(
            tracked.clone(),
            Arc::new(Tracker {
                tracked,
                usage,
                waited,
            }),
        );
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.keys.len()
    }

    /// Forgets a key, as an eviction does; whether it was tracked.
    #[cfg(test)]
    fn forget(&self, topic: &str, key: &str) -> bool {
        self.keys
            .remove(&Tracked(&Topic::from(topic), &Key::from(key)))
            .is_some()
    }
}

/// The monopolization service; see the module documentation.
#[derive(Clone, Debug)]
pub struct MonopolizationService<S> {
    inner: S,
    /// `None` when detection is disabled.
    shared: Option<Arc<Shared>>,
}

impl<S> MonopolizationService<S> {
    pub(crate) fn new(inner: S, shared: Option<Arc<Shared>>) -> Self {
        Self { inner, shared }
    }
}

impl<S, P> Service<EventRequest<P>> for MonopolizationService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: EventRequest<P>) -> Self::Future {
        let Some(shared) = &self.shared else {
            return ResponseFuture::passing(self.inner.call(request));
        };
        let now = Instant::now();
        let context = &request.context;
        let tracker = match shared.track(context.topic(), context.key(), now) {
            Ok(tracker) => tracker,
            Err(used) => {
                let error = Monopolized {
                    topic: Arc::clone(context.topic()),
                    key: context.key().clone(),
                    used,
                    budget: shared.budget,
                    window: shared.window,
                };
                debug!(%error, "rejecting a hot key");
                context.meter().count(Action::Rejected);
                return ResponseFuture::rejected(HandlerError::transient(error));
            }
        };
        // A stage above may have set a meter; else the key's meters the
        // call.
        let wait = if let Some(wait) = request.wait_meter() {
            wait.clone()
        } else {
            let wait = tracker.waited.clone();
            request.set_wait_meter(wait.clone());
            wait
        };
        let waited = wait.waited();
        let inner = self.inner.call(request);
        ResponseFuture::measured(inner, Arc::clone(shared), tracker, now, (wait, waited))
    }
}
