//! The handler a service writes, and its adapter into a `tower::Service`.

use crate::codec::{self, Codec, DecodeError, JsonCodec};
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::event::{Encoded, Event, Excise, Message, Timer};
use crate::metrics::Action;
use crate::response::Response;
use crate::store::timer::TimerKind;
use crate::work::{self, Rider, UnitOfWork};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tower::Service;

/// The code a service writes: one method per kind of event.
///
/// The library calls it at most once at a time per key, in offset order per
/// key, and concurrently across keys.
pub trait EventHandler: Send + Sync + 'static {
    /// The decoded payload type of messages.
    type Payload: Send + Sync + 'static;
    /// What a message or excise handler returns (the answer to a request).
    type Output: Send + 'static;

    /// Handles a message.
    fn on_message(
        &self,
        context: Context,
        message: Message<Self::Payload>,
    ) -> impl Future<Output = Result<Self::Output, HandlerError>> + Send;

    /// Handles a due timer.
    fn on_timer(
        &self,
        context: Context,
        timer: Timer,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Deletes everything the consumer holds for the excised key.
    fn on_excise(
        &self,
        context: Context,
        excise: Excise,
    ) -> impl Future<Output = Result<Self::Output, HandlerError>> + Send;

    /// The category of an error that `?` converted without one, stated
    /// once for its type rather than at each call site: called for each
    /// error of the failed call's source chain, outermost first, until one
    /// answers. `None` (the default, for every error) leaves it transient.
    /// An error whose category was given (`HandlerError::permanent`,
    /// [`ResultExt`](crate::ResultExt), a `StateError`) is not asked about.
    ///
    /// ```
    /// use prosody_core::{Category, Context, EventHandler, Excise, HandlerError, Message, Timer};
    /// use std::error::Error;
    ///
    /// /// An order that can never be valid.
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("invalid order: {0}")]
    /// struct InvalidOrder(String);
    ///
    /// struct Orders;
    ///
    /// impl EventHandler for Orders {
    ///     type Payload = serde_json::Value;
    ///     type Output = ();
    ///
    ///     async fn on_message(&self, _: Context, message: Message<serde_json::Value>) -> Result<(), HandlerError> {
    ///         let total = message.payload["total"].as_u64();
    ///         let _total = total.ok_or_else(|| InvalidOrder("no total".into()))?; // permanent
    ///         let _body: serde_json::Value = serde_json::from_str("{")?; // permanent too
    ///         Ok(())
    ///     }
    ///
    ///     async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> { Ok(()) }
    ///     async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> { Ok(()) }
    ///
    ///     fn classify(&self, error: &(dyn Error + 'static)) -> Option<Category> {
    ///         (error.is::<InvalidOrder>() || error.is::<serde_json::Error>())
    ///             .then_some(Category::Permanent)
    ///     }
    /// }
    /// ```
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Option<Category> {
        let _ = error;
        None
    }
}

/// What travels down the stack: an event, the context its handler sees,
/// and what only the stages read (its extensions, as `http::Extensions`
/// carry a request's own data for tower-http's middleware).
#[derive(Clone, Debug)]
pub struct EventRequest<P> {
    /// The event to handle.
    pub event: Event<P>,
    /// The context of this call.
    pub context: Context,
    /// What stages tell each other about this call.
    pub(crate) extensions: Extensions,
}

/// How long calls waited for scheduler permits: the scheduler adds to the
/// meter of each request that carries one, and stages above the scheduler
/// read it to tell waiting from running (monopolization counts only
/// running, with a meter per key).
///
/// Invariant: only grows; clones share one count.
#[derive(Clone, Debug, Default)]
pub struct WaitMeter(Arc<AtomicU64>);

impl WaitMeter {
    /// Adds a wait.
    pub fn add(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The total waited so far.
    #[must_use]
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// What only the stages of a stack read about a call: the meter its
/// permit waits go to, the riders its commit writes, and for a firing
/// timer how many times it was put off already.
///
/// Invariant: riders only accumulate down the stack; a clone of the
/// request (a retry) carries the same ones, at the cost of a count.
#[derive(Clone, Debug, Default)]
pub(crate) struct Extensions {
    wait: Option<WaitMeter>,
    /// One allocation for all of them.
    riders: Option<Arc<[Rider]>>,
    /// How many times the firing timer was put off already.
    deferrals: u32,
}

impl Extensions {
    /// The same extensions with `rider` written in the attempt's batch if
    /// the attempt succeeds.
    #[must_use]
    pub(crate) fn with_rider(mut self, rider: Rider) -> Self {
        let riders = self.riders.as_deref().unwrap_or_default().iter().cloned();
        self.riders = Some(riders.chain(std::iter::once(rider)).collect());
        self
    }
}

impl<P> EventRequest<P> {
    /// A request for `event` in `context`, with no extensions yet.
    #[must_use]
    pub fn new(event: Event<P>, context: Context) -> Self {
        Self {
            event,
            context,
            extensions: Extensions::default(),
        }
    }

    /// The meter the scheduler reports this call's permit wait to, if a
    /// stage above it set one.
    #[must_use]
    pub fn wait_meter(&self) -> Option<&WaitMeter> {
        self.extensions.wait.as_ref()
    }

    /// The same request, reporting permit waits to `meter`.
    #[must_use]
    pub fn with_wait_meter(mut self, meter: WaitMeter) -> Self {
        self.set_wait_meter(meter);
        self
    }

    /// Reports permit waits to `meter` from now on.
    pub(crate) fn set_wait_meter(&mut self, meter: WaitMeter) {
        self.extensions.wait = Some(meter);
    }

    /// The same request with `rider` written in the attempt's batch if the
    /// attempt succeeds.
    #[must_use]
    pub(crate) fn with_rider(mut self, rider: Rider) -> Self {
        self.extensions = self.extensions.with_rider(rider);
        self
    }

    /// The same request for a firing timer put off `deferrals` times.
    #[must_use]
    pub(crate) fn with_deferrals(mut self, deferrals: u32) -> Self {
        self.extensions.deferrals = deferrals;
        self
    }

    /// How many times the firing timer was put off already.
    pub(crate) fn deferrals(&self) -> u32 {
        self.extensions.deferrals
    }

    /// What the stages added to the attempt's batch.
    #[cfg(test)]
    pub(crate) fn riders(&self) -> &[Rider] {
        self.extensions.riders.as_deref().unwrap_or_default()
    }
}

/// A handler as the innermost `tower::Service` of a stack: it decodes each
/// event of the stack with its codec and calls the handler.
///
/// Invariant: the handler only ever sees events that decoded, and never a
/// record its key's state marks applied (its changes landed already); a key that is
/// not UTF-8 or a payload the codec rejects fails the call with a permanent
/// [`DecodeError`] before the handler runs. Its
/// response is the handler's output, or `None` for a timer, returned only
/// once the attempt's unit of work is committed; the late-success rule
/// of the attempt's unit of work decides whether a success past its deadline
/// is committed.
pub struct HandlerService<H, C> {
    handler: Arc<H>,
    codec: C,
}

impl<H: EventHandler> HandlerService<H, JsonCodec<H::Payload>>
where
    H::Payload: Serialize + DeserializeOwned,
{
    /// Wraps a handler whose payloads are JSON.
    #[must_use]
    pub fn new(handler: H) -> Self {
        Self::with_codec(handler, JsonCodec::new())
    }
}

impl<H, C> HandlerService<H, C> {
    /// Wraps a handler whose payloads `codec` decodes.
    #[must_use]
    pub fn with_codec(handler: H, codec: C) -> Self {
        Self {
            handler: Arc::new(handler),
            codec,
        }
    }
}

impl<H, C: Clone> Clone for HandlerService<H, C> {
    fn clone(&self) -> Self {
        Self {
            handler: Arc::clone(&self.handler),
            codec: self.codec.clone(),
        }
    }
}

/// A handler panicked.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the handler panicked")]
pub struct Panicked;

/// A timer of another stage reached the handler: the stack lacks the stage
/// that consumes it.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a {0:?} timer reached the handler: the stack has no stage that consumes it")]
pub struct ForeignTimer(pub TimerKind);

/// The future of one handler call.
///
/// This is the one allocation per event of a stack: an `async fn`'s future
/// has no nameable type on stable Rust, so the leaf boxes it once; every
/// layer above it has a named, unboxed future.
pub type HandlerFuture<O> = BoxFuture<'static, Result<Response<O>, HandlerError>>;

impl<H, C> Service<EventRequest<Encoded>> for HandlerService<H, C>
where
    H: EventHandler,
    C: Codec<Value = H::Payload>,
{
    type Response = Response<H::Output>;
    type Error = HandlerError;
    type Future = HandlerFuture<H::Output>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: EventRequest<Encoded>) -> Self::Future {
        let handler = Arc::clone(&self.handler);
        let EventRequest {
            event,
            context,
            extensions,
        } = request;
        // A codec that panics fails the record as one that does not decode.
        let decoded =
            std::panic::catch_unwind(AssertUnwindSafe(|| codec::decode(&self.codec, event)));
        let event = match decoded.unwrap_or(Err(DecodeError::Panicked)) {
            Ok(event) => event,
            Err(error) => {
                context.meter().count(Action::DecodeFailed);
                return Box::pin(std::future::ready(Err(HandlerError::permanent(error))));
            }
        };
        if let Event::Timer(timer) = &event
            && timer.kind != TimerKind::Application
        {
            // Only the defer stage consumes its timers; one reaching the
            // handler means the stack has no defer stage (for example
            // after a switch away from pipeline mode). The runtime
            // leaves it stored, with its key's backlog.
            let error = HandlerError::permanent(ForeignTimer(timer.kind));
            return Box::pin(std::future::ready(Err(error)));
        }
        // Each attempt has its own unit of work, committed only if the
        // handler succeeds.
        let context = context.begin(&event);
        // Of the extensions, the call keeps only what its commit writes.
        let riders = extensions.riders;
        let call = async move {
            let work = context.work().cloned();
            let key = context.key().clone();
            let deadline = context.deadline();
            let _sealed = work.as_ref().map(UnitOfWork::seal_on_drop);
            // Boxed: only attempts with keyed state read their marker, and
            // the others keep the read's state out of their future.
            if let Some(work) = &work
                && work.may_have_applied()
                && Box::pin(work.applied()).await?
            {
                tracing::debug!("the event's state changes landed already: not run again");
                return Ok(Response::Unhandled);
            }
            let returned = match event {
                Event::Message(message) => handler
                    .on_message(context, message)
                    .await
                    .map(Response::Handled),
                Event::Timer(timer) => handler
                    .on_timer(context, timer)
                    .await
                    .map(|()| Response::Unhandled),
                Event::Excise(excise) => handler
                    .on_excise(context, excise)
                    .await
                    .map(Response::Handled),
            }
            .map_err(|error| error.classified(|source| handler.classify(source)));
            // A success goes on to its commit, without the scheduler's
            // permit; a failure ends the call at once, permit and all.
            if let (Some(work), Ok(_)) = (&work, &returned) {
                work.handler_returned();
            }
            let output = returned?;
            let riders = riders.as_deref().unwrap_or_default();
            work::finish(work.as_ref(), &key, riders, deadline, output).await
        };
        // A panic is a failure of this call, handled by the mode like any
        // other transient error, not an unwinding through the stack.
        Box::pin(
            AssertUnwindSafe(call)
                .catch_unwind()
                .map(|result| result.unwrap_or_else(|_| Err(HandlerError::transient(Panicked)))),
        )
    }
}

/// A complete stack the runtime can drive: any cloneable `tower::Service` of
/// [`EventRequest`]s whose response says how its event settled
/// ([`Settlement`](crate::Settlement)), whose future is `Send` and whose
/// error converts to a [`BoxError`](crate::error::BoxError) (a
/// [`HandlerError`] does, keeping its category).
pub trait EventService<P>:
    Service<
        EventRequest<P>,
        Response: crate::Settlement,
        Error: Into<crate::error::BoxError> + Send,
        Future: Send,
    > + Clone
    + Send
    + 'static
{
}

impl<P, S> EventService<P> for S where
    S: Service<
            EventRequest<P>,
            Response: crate::Settlement,
            Error: Into<crate::error::BoxError> + Send,
            Future: Send,
        > + Clone
        + Send
        + 'static
{
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "test code fails loudly")]
mod tests {
    use super::{EventHandler, HandlerService};
    use crate::error::{Category, HandlerError};
    use crate::event::{Encoded, Event, Excise, Message, Timer};
    use crate::{Context, testkit};
    use bytes::Bytes;
    use serde_json::Value;
    use tower::{Service, ServiceExt};

    #[derive(Debug, thiserror::Error)]
    #[error("not an order")]
    struct NotAnOrder;

    /// Fails every message with `?` on [`NotAnOrder`], which it classifies
    /// as permanent, or on a plain I/O error when the payload says so.
    struct Orders;

    impl EventHandler for Orders {
        type Payload = Value;
        type Output = ();

        async fn on_message(
            &self,
            _: Context,
            message: Message<Value>,
        ) -> Result<(), HandlerError> {
            if message.payload["io"] == true {
                Err(std::io::Error::other("disk full"))?;
            }
            Err(NotAnOrder)?
        }

        async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
            Ok(())
        }

        async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
            Ok(())
        }

        fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Option<Category> {
            error.is::<NotAnOrder>().then_some(Category::Permanent)
        }
    }

    async fn category_of(payload: &'static str) -> Category {
        let (mut request, _, _) = testkit::message("k", Encoded::new(), None);
        if let Event::Message(message) = &mut request.event {
            message.raw = Bytes::from_static(payload.as_bytes());
        }
        let mut service = HandlerService::new(Orders);
        let ready = service.ready().await.expect("ready");
        let error = ready.call(request).await.expect_err("the handler fails");
        error.category()
    }

    #[tokio::test]
    async fn the_handlers_classification_reaches_an_error_converted_by_question_mark() {
        assert_eq!(category_of("{}").await, Category::Permanent);
        assert_eq!(category_of(r#"{"io":true}"#).await, Category::Transient);
    }
}
