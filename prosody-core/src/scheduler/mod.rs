//! Fair scheduling: a global limit on running handler calls, shared by every
//! partition of a client, and an order for the calls that wait.
//!
//! A call holds its permit while its handler runs. Once the library's
//! handler service reports that the handler succeeded, the permit goes
//! back, and the attempt's commit waits on the stores without one; a call
//! whose request has no unit of work, or that reaches no handler service
//! of the library, holds it until it completes. So in-flight commits are
//! bounded by `max_uncommitted` per partition, not by `max_concurrency`.
//! Layers placed below the scheduler must call their inner service at
//! most once per call (a retry or hedging layer belongs above it, as in
//! every preset): a second call after a success would run without a
//! permit.
//!
//! # How the next call is chosen
//!
//! When a permit frees and calls wait:
//!
//! 1. **Class.** Normal calls and failure calls
//!    ([`Demand`](crate::context::Demand)) each have a pool of the execution
//!    time they received (permit-held seconds, decaying as below; running
//!    calls count up to now). If both classes
//!    wait, the one with the lower `pool / weight` goes, the weights being
//!    `1 - failure_weight` and `failure_weight`: under saturation failures get
//!    about `failure_weight` (30%) of execution time and fresh work the rest.
//!    A class that had nothing waiting or running banks no credit: when it
//!    comes back its pool is raised level with the other class's.
//! 2. **Call.** Within the class, the call of lowest priority
//!    `virtual_time(key) - wait_weight * min(wait / max_wait, 1)^2` goes
//!    (the earliest on a tie). A key's virtual time is the seconds its calls
//!    ran, decaying exponentially with a half-life of `max_wait / 2` (60 s by
//!    default; see `decay.rs` for why), so an idle key returns to zero and
//!    a busy key cannot starve a quiet one.
//!
//! A call's wait is bounded by `max_wait` plus one handler duration when its
//! key has the lowest virtual time among the calls of its class that waited
//! as long (a cold key behind a stream of hot keys): after `max_wait` its
//! boost is full and no newer call of its class overtakes it. A busier key still runs eventually: its
//! virtual time decays while it waits.
//!
//! Per-key virtual times live in a cache of `cache_size` keys that evicts
//! the key of lowest virtual time (see `cache.rs`). The snapshot of a key's
//! virtual time is taken when its call starts waiting; the runtime runs one
//! call per key at a time, so it cannot go stale meanwhile.
//!
//! Choosing scans the waiters of one class: linear in the number of waiting
//! calls, which the runtime bounds (`max_uncommitted` per partition).
//!
//! # Example
//!
//! ```
//! use prosody_core::scheduler::{SchedulerConfig, SchedulerLayer};
//! use prosody_core::{Encoded, EventRequest, HandlerError};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), HandlerError> {
//! // One scheduler per client: its clones share the limit of 4 calls.
//! let config = SchedulerConfig { max_concurrency: 4_usize.try_into()?, ..SchedulerConfig::default() };
//! let scheduler = SchedulerLayer::new(config);
//! let handler = service_fn(|_: EventRequest<Encoded>| async { Ok::<_, HandlerError>(Some(())) });
//! let stack = ServiceBuilder::new().layer(scheduler.clone()).service(handler);
//! assert_eq!(stack.oneshot(request("order-7")).await?, Some(()));
//! # Ok(())
//! # }
//! ```

mod cache;
mod class;
mod config;
mod decay;
mod future;
mod layer;
mod queue;
mod state;

#[cfg(test)]
mod tests;

pub use config::{InvalidOption, SchedulerConfig};
pub use future::ResponseFuture;
pub use layer::SchedulerLayer;

use crate::error::HandlerError;
use crate::handler::EventRequest;
use crate::work::UnitOfWork;
use state::{Admission, Shared};
use std::fmt;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// The fair scheduler around an inner service; built by [`SchedulerLayer`].
///
/// Invariant: across every service of one layer, at most `max_concurrency`
/// inner calls are in flight (from the inner `call` until its future
/// completes or is dropped, or until its handler succeeded, whichever
/// comes first: see the module documentation), and every permit taken is returned exactly
/// once, however the call ends: completion, cancellation, a panic, or a
/// caller that gives up while waiting. A call that must wait while its
/// partition is stopping ([`Context::is_stopping`](crate::Context::is_stopping))
/// fails at once with a transient error (it is not settled; the next owner
/// of the partition handles it); while it only drains, calls still wait.
pub struct SchedulerService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> SchedulerService<S> {
    fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }
}

impl<S: Clone> Clone for SchedulerService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for SchedulerService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, P> Service<EventRequest<P>> for SchedulerService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError> + Clone,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S, P>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let context = &request.context;
        let may_wait = !context.is_stopping();
        match self.shared.admit(context.key(), context.demand(), may_wait) {
            Admission::Run(permit) => {
                context.meter().waited(std::time::Duration::ZERO);
                let returned = context.work().map(UnitOfWork::returned);
                ResponseFuture::running(self.inner.call(request), permit, returned)
            }
            Admission::Wait(receiver) => {
                // The readied service goes with the call; this one stays
                // behind for the next `poll_ready`.
                let fresh = self.inner.clone();
                let readied = std::mem::replace(&mut self.inner, fresh);
                ResponseFuture::waiting(receiver, readied, request)
            }
            Admission::Refused => ResponseFuture::refused(),
        }
    }
}
