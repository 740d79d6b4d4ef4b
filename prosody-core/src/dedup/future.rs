//! The response future of the dedup service: lookup, call, record.

use super::Shared;
use crate::Settlement;
use crate::access::PartitionStores;
use crate::error::HandlerError;
use crate::handler::EventRequest;
use crate::metrics::Action;
use crate::store::DedupWrite;
use crate::store::StoreError;
use crate::store::dedup::DedupKey;
use crate::work::Rider;
use futures_util::future::BoxFuture;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use tower::Service;
use tracing::{debug, warn};

/// A store call, boxed: it owns the partition's stores.
type StoreFuture<T> = BoxFuture<'static, Result<T, StoreError>>;

#[pin_project(project = StateProjection)]
#[allow(
    clippy::large_enum_variant,
    reason = "the lookup state holds the request until the store answers; boxing it would allocate per message"
)]
enum State<S, P, F> {
    /// A duplicate found in the cache: succeeds at once.
    Duplicate,
    /// Asking the store; then the ready service is called with the request.
    Lookup {
        lookup: StoreFuture<bool>,
        call: Option<(S, EventRequest<P>)>,
    },
    /// The inner service handles the event.
    Calling(#[pin] F),
    /// The output was returned.
    Done,
}

/// One request through the dedup service.
#[pin_project]
pub struct ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    #[pin]
    state: State<S, P, S::Future>,
    /// What to record once the inner service succeeds; `None` for events
    /// without a dedup key.
    record: Option<(Arc<Shared>, DedupKey)>,
}

impl<S, P> ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    /// An event without a dedup key: the inner call, unchanged.
    pub(super) fn pass(future: S::Future) -> Self {
        Self {
            state: State::Calling(future),
            record: None,
        }
    }

    /// A duplicate found in the cache.
    pub(super) fn duplicate() -> Self {
        Self {
            state: State::Duplicate,
            record: None,
        }
    }

    /// A message a store that tells at once says it has not seen:
    /// `service` handles it, and the store alone remembers it (from the
    /// attempt's batch); the cache is not used.
    pub(super) fn unseen(
        shared: &Shared,
        key: DedupKey,
        service: &mut S,
        request: EventRequest<P>,
    ) -> Self {
        let request = with_record(shared, key, request);
        Self {
            state: State::Calling(service.call(request)),
            record: None,
        }
    }

    /// A message of a context without stores (built outside the runtime)
    /// the cache does not know: `service` handles it, and the cache alone
    /// remembers it.
    pub(super) fn uncached(
        shared: Arc<Shared>,
        key: DedupKey,
        service: &mut S,
        request: EventRequest<P>,
    ) -> Self {
        Self {
            state: State::Calling(service.call(request)),
            record: Some((shared, key)),
        }
    }

    /// A message the cache does not know: ask the partition's `stores`,
    /// then maybe call `service` (which is ready) with `request`.
    pub(super) fn lookup(
        shared: Arc<Shared>,
        stores: Arc<PartitionStores>,
        key: DedupKey,
        service: S,
        request: EventRequest<P>,
    ) -> Self {
        let request = with_record(&shared, key, request);
        Self {
            state: State::Lookup {
                lookup: Box::pin(async move { stores.contains(key).await }),
                call: Some((service, request)),
            },
            record: Some((shared, key)),
        }
    }
}

/// The request with its dedup record as a rider: it goes in the attempt's
/// own batch, written only if the handler succeeds, with its other changes.
fn with_record<P>(shared: &Shared, key: DedupKey, request: EventRequest<P>) -> EventRequest<P> {
    let write = DedupWrite {
        key,
        ttl: shared.ttl,
    };
    request.with_rider(Rider::Dedup(write))
}

fn polled_after_completion() -> HandlerError {
    HandlerError::permanent("dedup future polled after completion")
}

impl<S, P> Future for ResponseFuture<S, P>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
    S::Response: Settlement,
{
    type Output = Result<S::Response, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Duplicate => {
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(S::Response::unhandled()));
                }
                StateProjection::Lookup { lookup, call } => {
                    let present = match ready!(lookup.as_mut().poll(cx)) {
                        Ok(present) => present,
                        Err(error) => {
                            warn!(%error, "dedup lookup failed; handling the message");
                            false
                        }
                    };
                    let call = call.take();
                    if present {
                        if let Some((_, request)) = &call {
                            request.context.meter().count(Action::DedupHit);
                        }
                        if let Some((shared, key)) = this.record.as_ref() {
                            debug!(%key, "duplicate message skipped (store)");
                            shared.remember(*key);
                        }
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(S::Response::unhandled()));
                    }
                    let Some((mut service, request)) = call else {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    this.state.set(State::Calling(service.call(request)));
                }
                StateProjection::Calling(future) => {
                    let outcome = ready!(future.poll(cx));
                    // The store has the key from the handler's batch.
                    if let (Ok(response), Some((shared, key))) = (&outcome, this.record.take())
                        && response.handled()
                    {
                        shared.remember(key);
                    }
                    this.state.set(State::Done);
                    return Poll::Ready(outcome);
                }
                StateProjection::Done => return Poll::Ready(Err(polled_after_completion())),
            }
        }
    }
}

impl<S, P> fmt::Debug for ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Duplicate => "duplicate",
            State::Lookup { .. } => "lookup",
            State::Calling(_) => "calling",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("key", &self.record.as_ref().map(|(_, key)| key))
            .finish()
    }
}
