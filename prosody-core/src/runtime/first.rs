//! An attempt's first call, made where its event starts, on the
//! partition's own stack, in a box the partition keeps for the next call
//! when this one succeeded on its first poll.

use super::attempt::{Attempts, Job, Shared};
use crate::context::Demand;
use crate::error::{BoxError, HandlerError};
use crate::event::Encoded;
use crate::handler::{EventRequest, EventService};
use futures_util::future::OptionFuture;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, Waker};
use tower::Service;

/// A stack's call in its box. Emptied once a record's call succeeded on
/// its first poll, the box makes the partition's next call, so while
/// records succeed at once their calls cost no allocation (a pipeline's
/// call is over a kilobyte). A call that fails or waits frees its own.
///
/// Invariant: a slot in [`First::Called`] holds a call; a slot kept as a
/// partition's spare holds none. An empty slot polled ([`gone`]) cannot
/// happen while this holds.
pub(crate) type Slot<F> = Pin<Box<OptionFuture<F>>>;

/// How an attempt's first call was made where the attempt started.
///
/// Invariant: `Called` holds a call made right after the stack said it
/// was ready; a `Waiting` stack is polled ready again before its call.
pub(crate) enum First<S, F> {
    /// The partition's stack was ready, and made it.
    Called(Slot<F>),
    /// The partition's stack was not ready: here it is, still waiting, for
    /// the attempt to call once it is (the partition took a fresh clone).
    Waiting(S),
    /// The stack's readiness failed, it panicked in `call`, or the call
    /// failed or panicked on its first poll ([`succeeded_at_once`]).
    Failed(BoxError),
}

/// The first attempt's call, made on the partition's `service` when it is
/// ready, in `spare` if the partition has one: no clone of the stack per
/// record. A stack that is not ready goes with the attempt, to be called
/// once it is (it may have reserved its turn, as a fair semaphore does),
/// and the partition takes a fresh clone. A stack whose readiness fails
/// fails the attempt with that error (transient unless its category says
/// otherwise); one that panics in `call` fails it transiently; either is
/// replaced too.
pub(crate) fn call<S>(
    service: &mut S,
    spare: &mut Option<Slot<S::Future>>,
    shared: &Shared<S>,
    attempts: &Attempts,
    job: &Job,
) -> First<S, S::Future>
where
    S: EventService<Encoded>,
{
    let _entered = attempts.span().enter();
    let mut cx = TaskContext::from_waker(Waker::noop());
    let called = std::panic::catch_unwind(AssertUnwindSafe(|| match service.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {
            let request = attempts.request(shared, job, Demand::Normal, 0);
            let mut slot = spare
                .take()
                .unwrap_or_else(|| Box::pin(OptionFuture::from(None)));
            slot.set(Some(service.call(request)).into());
            Some(First::Called(slot))
        }
        Poll::Ready(Err(error)) => Some(First::Failed(error.into())),
        Poll::Pending => None,
    }));
    match called {
        Ok(Some(First::Called(call))) => First::Called(call),
        Ok(None) => First::Waiting(std::mem::replace(service, shared.stack())),
        Ok(Some(failed)) => {
            *service = shared.stack();
            failed
        }
        Err(_) => {
            *service = shared.stack();
            First::Failed("the stack panicked".into())
        }
    }
}

/// A call that succeeded on its first poll: its emptied slot, for the next
/// call, and its response.
pub(crate) type Done<S> = (
    Slot<<S as Service<EventRequest<Encoded>>>::Future>,
    <S as Service<EventRequest<Encoded>>>::Response,
);

/// Polls the call an attempt started with once, where it was made and in
/// the attempt's span: `Ok` when it succeeded at once (the attempt is
/// over: a record is settled), else what the attempt goes on from (the
/// call still pending, or how it failed, handled as the attempt loop
/// handles a failed call).
pub(crate) fn succeeded_at_once<S>(
    attempts: &Attempts,
    first: First<S, S::Future>,
) -> Result<Done<S>, First<S, S::Future>>
where
    S: EventService<Encoded>,
{
    // Entered first, so it is left last: a call that ends here is also
    // dropped in the span.
    let _entered = attempts.span().enter();
    let First::Called(mut call) = first else {
        return Err(first);
    };
    let mut cx = TaskContext::from_waker(Waker::noop());
    match std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(Some(Ok(response)))) => {
            call.set(None.into());
            Ok((call, response))
        }
        Ok(Poll::Ready(Some(Err(error)))) => Err(First::Failed(error.into())),
        Ok(Poll::Ready(None)) => Err(First::Failed(gone())),
        Ok(Poll::Pending) => Err(First::Called(call)),
        Err(_) => Err(First::Failed(
            HandlerError::transient("the handler panicked").into(),
        )),
    }
}

/// The failure of a slot polled without a call, which the [`Slot`]
/// invariant rules out: should it ever happen, a transient one, so the
/// attempt calls again.
pub(crate) fn gone() -> BoxError {
    HandlerError::transient("the attempt's first call was not there").into()
}

#[cfg(test)]
mod tests {
    use super::{First, call, succeeded_at_once};
    use crate::broker::Record;
    use crate::context::Scope;
    use crate::error::HandlerError;
    use crate::event::Encoded;
    use crate::handler::EventRequest;
    use crate::key::Key;
    use crate::runtime::attempt::{Attempts, Job, Shared};
    use crate::testkit;
    use crate::{Backoff, Response};
    use bytes::Bytes;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// A call that is done at once, and counts its drop.
    struct Done(Arc<AtomicUsize>);

    impl Future for Done {
        type Output = Result<Response<()>, HandlerError>;

        fn poll(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            Poll::Ready(Ok(Response::Handled(())))
        }
    }

    impl Drop for Done {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[derive(Clone)]
    struct Stack(Arc<AtomicUsize>);

    impl tower::Service<EventRequest<Encoded>> for Stack {
        type Response = Response<()>;
        type Error = HandlerError;
        type Future = Done;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: EventRequest<Encoded>) -> Done {
            Done(Arc::clone(&self.0))
        }
    }

    /// A call done on its first poll is dropped there, before the
    /// record settles, and its box makes the next call: a spare slot
    /// holds no call. Its response is returned with the slot.
    #[test]
    fn a_call_done_at_once_is_dropped_and_its_box_reused() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let stack = Stack(Arc::clone(&dropped));
        let shared = Shared {
            scope: Arc::new(Scope {
                topic: Arc::from("t"),
                partition: 0,
                shutdown: CancellationToken::new(),
                cancel: CancellationToken::new(),
                meter: crate::metrics::PartitionMeter::default(),
                answerer: None,
            }),
            backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(1)),
            stores: testkit::access(prosody_memory::MemoryStores::new()),
            state: None,
            keep_parse: false,
            lease: Arc::default(),
            stack: Mutex::new(stack.clone()),
        };
        let job = Job::Record(Record {
            topic: Arc::from("t"),
            partition: 0,
            offset: 0,
            timestamp: crate::clock::Timestamp::default(),
            key: Some(Bytes::from_static(b"k")),
            payload: Some(Bytes::from_static(b"{}")),
            headers: crate::event::Headers::new(),
        });
        let (mut service, mut spare) = (stack, None);
        let mut boxes = Vec::new();
        for n in 1..=3 {
            let attempts = Attempts::new(&shared, Key::from("k"), &job);
            let first = call(&mut service, &mut spare, &shared, &attempts, &job);
            let First::Called(called) = &first else {
                panic!("the ready stack did not make the call");
            };
            boxes.push(std::ptr::from_ref(&**called).addr());
            let Ok((mut slot, response)) = succeeded_at_once(&attempts, first) else {
                panic!("a call done at once did not succeed at once");
            };
            assert_eq!(dropped.load(Ordering::Relaxed), n, "call {n} not dropped");
            assert_eq!(response, Response::Handled(()));
            let polled = slot
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()));
            assert!(
                matches!(polled, Poll::Ready(None)),
                "a spare slot holds a call"
            );
            spare = Some(slot);
        }
        assert!(boxes.windows(2).all(|pair| pair[0] == pair[1]), "{boxes:?}");
    }
}
