//! Defer: in pipeline mode, a message that fails transiently is set aside
//! and retried later by a timer, so its partition keeps advancing and other
//! keys keep flowing.
//!
//! On a transient failure of a message (or excise), the stage schedules a
//! [`TimerKind::Defer`] timer for the key at `defer_base` from now, stores
//! the message's offset in the partition's
//! [`DeferStore`](crate::store::DeferStore) (reached through the event's
//! unit of work, so the stage reads and writes the stores its attempts
//! commit to), and settles the event. While the key has deferred offsets,
//! its later messages are stored behind them without being handled. When the timer fires, the stage reads the head
//! offset back through its [`Loader`], handles it, and on success moves on
//! to the next, which has not run yet and is tried at once as fresh work;
//! on failure it counts the failure and schedules the timer again,
//! `defer_base` doubling with each failure up to `defer_max_delay`. A failing
//! application timer is put off the same way: it stays stored and runs again
//! after the delay.
//!
//! Invariants:
//! - order: while a key has deferred offsets, none of its messages reaches
//!   the inner service except the head, retried by its timer; offsets leave
//!   the queue head first;
//! - nothing lost: an event is settled by deferral only after its offset
//!   is stored, and a key with deferred offsets always has a defer timer
//!   (it is written before the first offset, and the next one before a
//!   firing one is removed). A store error fails the event transiently, so
//!   the retry stage tries again;
//! - the failure-rate gate: a new transient failure is deferred only when
//!   `defer_enabled` and at most `defer_failure_threshold` of the events of
//!   the last `defer_failure_window` failed (see the internal `Gate`);
//!   otherwise it goes to the retry stage, which holds the partition. Keys
//!   already deferred keep draining either way;
//! - a failure during shutdown is not deferred: the event stays unsettled
//!   for the partition's next owner.
//!
//! Allocation: a message of a key the store can [`peek`](crate::store::DeferStore::peek)
//! as clear, and any timer of the handler, cost no allocation beyond the
//! inner call. Deferring, store lookups and retries box one future each.
//!
//! The delays, from the defaults (`defer_base` 1 s, `defer_max_delay` 24 h):
//!
//! ```
//! use prosody_core::defer::DeferConfig;
//! use std::time::Duration;
//!
//! let config = DeferConfig::default();
//! let backoff = config.backoff();
//! assert_eq!(backoff.delay(1), Duration::from_secs(1));
//! assert_eq!(backoff.delay(4), Duration::from_secs(8));
//! assert_eq!(backoff.delay(30), Duration::from_secs(24 * 3600));
//! assert!(DeferConfig { failure_threshold: 1.5, ..config }.validate().is_err());
//! ```

mod backlog;
mod config;
mod decide;
mod future;
mod gate;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{DeferConfig, DeferConfigError};
pub use future::ResponseFuture;
pub use layer::DeferLayer;

use crate::Settlement;
use crate::broker::TopicPartition;
use crate::context::Context;
use crate::error::HandlerError;
use crate::event::{Encoded, Event};
use crate::handler::EventRequest;
use crate::key::Key;
use crate::loader::Loader;
use crate::store::timer::TimerKind;
use gate::Gate;
use std::fmt;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// What every service of one layer shares.
pub(crate) struct Shared<L> {
    config: DeferConfig,
    loader: L,
    gate: Gate,
}

impl<L> Shared<L> {
    fn new(config: DeferConfig, loader: L) -> Self {
        let gate = Gate::new(config.failure_window, config.failure_threshold);
        Self {
            config,
            loader,
            gate,
        }
    }

    /// Counts a handled event; returns whether a failure may be deferred.
    fn record(&self, failed: bool) -> bool {
        let open = self.gate.record(failed);
        self.config.enabled && open
    }
}

/// Where an event handled by the inner service came from, to defer it if it
/// fails.
pub(crate) enum Origin {
    /// A message or excise at `offset`.
    Record {
        partition: TopicPartition,
        key: Key,
        offset: i64,
        context: Context,
    },
    /// An application timer, put off `deferrals` times already.
    Timer { context: Context, deferrals: u32 },
}

impl Origin {
    fn context(&self) -> &Context {
        match self {
            Self::Record { context, .. } | Self::Timer { context, .. } => context,
        }
    }
}

/// The defer service; see the module documentation. `inner` handles new
/// events; `drain` (the inner service behind the layer's drain layer)
/// handles the records a backlog retries. The drain stack is shared, so a
/// clone of the service costs `inner`'s clone and two counts; a drain takes
/// a clone of it.
pub struct DeferService<S, R, L> {
    inner: S,
    drain: Arc<R>,
    shared: Arc<Shared<L>>,
}

impl<S: Clone, R: Clone, L> Clone for DeferService<S, R, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            drain: Arc::clone(&self.drain),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, R, L> fmt::Debug for DeferService<S, R, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferService")
            .field("inner", &self.inner)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S, R, L> Service<EventRequest<Encoded>> for DeferService<S, R, L>
where
    S: Service<EventRequest<Encoded>, Error = HandlerError> + Clone + Send + 'static,
    S::Response: Settlement + Send,
    S::Future: Send,
    R: Service<EventRequest<Encoded>, Response = S::Response, Error = HandlerError>
        + Clone
        + Send
        + 'static,
    R::Future: Send,
    L: Loader,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future, S::Response, L>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<Encoded>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let context = request.context.clone();
        let (key, offset) = match &request.event {
            Event::Timer(timer) if timer.kind == TimerKind::Defer => {
                let drain = R::clone(&self.drain);
                return ResponseFuture::boxed(backlog::drain(shared, drain, request));
            }
            Event::Timer(_) => {
                let deferrals = request.deferrals();
                let future = self.inner.call(request);
                let origin = Origin::Timer { context, deferrals };
                return ResponseFuture::calling(future, shared, origin);
            }
            Event::Message(message) => (message.key.clone(), message.offset),
            Event::Excise(excise) => (excise.key.clone(), excise.offset),
        };
        let partition = TopicPartition::new(Arc::clone(context.topic()), context.partition());
        let origin = Origin::Record {
            partition,
            key,
            offset,
            context,
        };
        // Outside the runtime there are no stores, so no backlog.
        let peeked = match (&origin, origin.context().work()) {
            (Origin::Record { key, .. }, Some(work)) => work.stores().peek(key),
            (Origin::Record { .. } | Origin::Timer { .. }, _) => Some(false),
        };
        match peeked {
            Some(false) => {
                let future = self.inner.call(request);
                return ResponseFuture::calling(future, shared, origin);
            }
            Some(true) => return ResponseFuture::boxed(backlog::defer_behind(origin)),
            None => {}
        }
        // The ready service goes with the lookup; a fresh clone serves the
        // next request.
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::boxed(backlog::lookup(shared, ready, request, origin))
    }
}
