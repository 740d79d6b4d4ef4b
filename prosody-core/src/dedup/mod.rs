//! Dedup: a message whose payload `id` was already handled successfully for
//! its key (under the same idempotence version) is skipped.
//!
//! Two tiers: a bounded in-memory cache of [`DedupKey`]s shared by every
//! partition of the process (it lives in the layer, so it survives
//! reassignment within the process), in front of the partition's
//! [`DedupStore`](crate::store::DedupStore), reached through the event's unit of work (the stores its
//! commit writes to), that persists keys for `ttl` across restarts and
//! members. A store that can tell at once ([`DedupStore::contains_now`](crate::store::DedupStore::contains_now),
//! one in memory) is asked first and alone: a cache in front of it would
//! only repeat it.
//!
//! Invariants:
//! - a message with an `id` whose key is in the cache, or that the store
//!   reports present, is not passed to the inner service; it succeeds with
//!   `S::Response::default()`, so it settles;
//! - a key is recorded only when the inner service succeeded: in the store
//!   as a rider of the attempt's batch (written with the handler's own
//!   changes, by the handler service, or not at all), in the cache once the
//!   success comes back (unless the store tells at once: then the store
//!   alone answers, and the cache stays empty). A failed attempt leaves no
//!   record, so its retry is handled;
//! - messages without an `id`, timers and excises always pass;
//! - a store error never loses a message: a failed lookup counts as "not a
//!   duplicate" (at-least-once over at-most-once) and logs at `warn`; a
//!   failed batch fails the attempt, which the mode tries again;
//! - the cache holds about `cache_size` keys (each of its shards at most
//!   its share, rounded up); removal path: the oldest key leaves first
//!   (`quick_cache`, see `hash::recent`), and an evicted key is still
//!   found in the store.
//!
//! Allocation: the cache check (or a store's `contains_now`) is synchronous,
//! and a cache hit, a store that tells at once, or a message without `id`
//! allocates nothing. Only when the store must be consulted is its future
//! boxed (the client's stores answer with a boxed future; this box
//! holds an `async move` block owning the partition's stores around it),
//! once for the lookup.
//!
//! What counts as the same message is its [`DedupKey`]: the idempotence
//! version, the record's key and the payload's `id`.
//!
//! ```
//! use prosody_core::store::DedupKey;
//!
//! let first = DedupKey::new("1", "order-7", "payment-41");
//! assert_eq!(first, DedupKey::new("1", "order-7", "payment-41")); // a duplicate
//! assert_ne!(first, DedupKey::new("1", "order-8", "payment-41")); // another key
//! assert_ne!(first, DedupKey::new("2", "order-7", "payment-41")); // a new version forgets
//! ```

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{DedupConfig, DedupConfigError};
pub use future::ResponseFuture;
pub use layer::DedupLayer;

use crate::Settlement;
use crate::error::HandlerError;
use crate::event::Event;
use crate::handler::EventRequest;
use crate::hash::{BoundedCache, recent};
use crate::metrics::Action;
use crate::store::dedup::DedupKey;
use crate::work::UnitOfWork;
use std::fmt;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tower::Service;
use tracing::debug;

/// What every service of one layer shares: the cache.
pub(crate) struct Shared {
    version: String,
    ttl: Duration,
    cache: BoundedCache<DedupKey, ()>,
}

impl Shared {
    pub(crate) fn new(config: DedupConfig) -> Self {
        Self {
            version: config.version,
            ttl: config.ttl,
            cache: recent(config.cache_size),
        }
    }

    /// Whether the cache holds `key` (which counts as a use of it).
    fn cached(&self, key: DedupKey) -> bool {
        self.cache.get(&key).is_some()
    }

    /// Puts `key` in the cache, evicting another when full.
    fn remember(&self, key: DedupKey) {
        self.cache.insert(key, ());
    }

    /// The dedup key of an event: only messages with an `id` have one.
    fn key_of<P>(&self, event: &Event<P>) -> Option<DedupKey> {
        match event {
            Event::Message(message) => message
                .id
                .as_deref()
                .map(|id| DedupKey::new(&self.version, &message.key, id)),
            Event::Timer(_) | Event::Excise(_) => None,
        }
    }

    #[cfg(test)]
    fn cached_len(&self) -> usize {
        self.cache.len()
    }
}

/// The dedup service; see the module documentation.
pub struct DedupService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> DedupService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }
}

impl<S: Clone> Clone for DedupService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for DedupService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupService")
            .field("inner", &self.inner)
            .field("version", &self.shared.version)
            .finish_non_exhaustive()
    }
}

impl<S, P> Service<EventRequest<P>> for DedupService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError> + Clone,
    S::Response: Settlement,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S, P>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let Some(key) = self.shared.key_of(&request.event) else {
            return ResponseFuture::pass(self.inner.call(request));
        };
        let stores = request.context.work().map(UnitOfWork::stores);
        // A store that can tell at once needs no cache in front of it.
        match stores.and_then(|stores| stores.contains_now(key)) {
            Some(true) => {
                request.context.meter().count(Action::DedupHit);
                debug!(%key, "duplicate message skipped (store)");
                return ResponseFuture::duplicate();
            }
            Some(false) => {
                return ResponseFuture::unseen(&self.shared, key, &mut self.inner, request);
            }
            None => {}
        }
        if self.shared.cached(key) {
            request.context.meter().count(Action::DedupHit);
            debug!(%key, "duplicate message skipped (cache)");
            return ResponseFuture::duplicate();
        }
        let Some(stores) = stores.map(Arc::clone) else {
            let shared = Arc::clone(&self.shared);
            return ResponseFuture::uncached(shared, key, &mut self.inner, request);
        };
        // The ready service goes with the lookup and is called after it; a
        // fresh clone serves the next request.
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::lookup(Arc::clone(&self.shared), stores, key, ready, request)
    }
}
