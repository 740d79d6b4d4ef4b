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
//! - about `cache_size` keys are tracked (each shard of the cache at most
//!   its share, rounded up); removal path: `quick_cache` evicts by recency
//!   and frequency, and an evicted key's used time goes with it, so it
//!   starts afresh;
//! - disabled, the service is a pass-through.
//!
//! A call dropped before it completes is not counted.

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{MonopolizationConfig, MonopolizationConfigError};
pub use future::ResponseFuture;
pub use layer::MonopolizationLayer;

use crate::context::WaitMeter;
use crate::error::HandlerError;
use crate::event::Topic;
use crate::handler::EventRequest;
use crate::hash::{BoundedCache, bounded};
use crate::key::Key;
use quick_cache::Equivalent;
use quick_cache::sync::{EntryAction, EntryResult};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
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

/// What the cache knew of a key when its call began.
enum Seen {
    /// Not tracked (new, or forgotten).
    Unknown,
    /// Within its budget.
    Within,
    /// Over its budget, having used this much.
    Over(Duration),
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
    keys: BoundedCache<(Topic, Key), Usage>,
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

    /// What the cache knows of `topic`/`key` at `now`.
    fn seen(&self, topic: &Topic, key: &Key, now: Instant) -> Seen {
        let Some(mut usage) = self.keys.get(&Tracked(topic, key)) else {
            return Seen::Unknown;
        };
        usage.roll(now, self.window);
        if usage.used > self.budget {
            Seen::Over(usage.used)
        } else {
            Seen::Within
        }
    }

    /// Counts a call of `topic`/`key` that ran from `begin` to `end`, less
    /// the time it `waited` for a scheduler permit: in place, under the
    /// cache shard's lock, so calls of the key in other partitions (a
    /// custom partitioner) add up too. A key another call is just adding
    /// is not waited for: that call's time counts, this one's does not. A
    /// key the cache did not know when the call began (`known` false) is
    /// put in as this call's time alone, without taking the shard's slot
    /// for a new key: should a call of it in another partition end at the
    /// same moment, one of the two counts.
    fn record(
        &self,
        (topic, key): (Topic, Key),
        (begin, end): (Instant, Instant),
        waited: Duration,
        known: bool,
    ) {
        let ran = end.saturating_duration_since(begin).saturating_sub(waited);
        let add = |usage: &mut Usage| {
            usage.roll(begin, self.window);
            usage.used = usage.used.saturating_add(ran);
        };
        let tracked = (topic, key);
        if !known {
            let mut usage = Usage {
                start: begin,
                used: Duration::ZERO,
            };
            add(&mut usage);
            self.keys.insert(tracked, usage);
            return;
        }
        let entry = self.keys.entry(&tracked, Some(Duration::ZERO), |_, usage| {
            add(usage);
            EntryAction::Retain(())
        });
        if let EntryResult::Vacant(guard) = entry {
            let mut usage = Usage {
                start: begin,
                used: Duration::ZERO,
            };
            add(&mut usage);
            let _ = guard.insert(usage);
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.keys.len()
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

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let Some(shared) = &self.shared else {
            return ResponseFuture::passing(self.inner.call(request));
        };
        let now = Instant::now();
        let topic = request.context.topic().clone();
        let key = request.context.key().clone();
        let seen = shared.seen(&topic, &key, now);
        if let Seen::Over(used) = seen {
            let error = Monopolized {
                topic,
                key,
                used,
                budget: shared.budget,
                window: shared.window,
            };
            debug!(%error, "rejecting a hot key");
            return ResponseFuture::rejected(HandlerError::transient(error));
        }
        // The runtime's contexts meter their event already; another gets a
        // meter of its own.
        let EventRequest { event, context } = request;
        let (context, wait) = if let Some(wait) = context.wait_meter() {
            (context, wait)
        } else {
            let wait = WaitMeter::default();
            (context.with_wait_meter(wait.clone()), wait)
        };
        let waited = wait.waited();
        let inner = self.inner.call(EventRequest { event, context });
        let known = matches!(seen, Seen::Within);
        ResponseFuture::measured(
            inner,
            Arc::clone(shared),
            (topic, key, known),
            now,
            (wait, waited),
        )
    }
}
