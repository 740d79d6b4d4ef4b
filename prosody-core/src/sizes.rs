//! The stack's futures stay small: each stage's rare states are boxed, so
//! the bytes every stage above copies on each call are the common path's
//! alone (the stages bench counts what a byte costs).

use crate::error::HandlerError;
use crate::event::Encoded;
use crate::handler::EventRequest;
use crate::response::Response;
use crate::retry::RetryService;
use crate::scheduler::SchedulerService;
use crate::telemetry::{NoTelemetry, TelemetryService};
use std::future::Ready;
use tower::Service;
use tower::util::ServiceFn;

type Request = EventRequest<Encoded>;
type Inner = ServiceFn<fn(Request) -> Ready<Result<Response<()>, HandlerError>>>;
type FutureOf<S> = <S as Service<Request>>::Future;

#[test]
fn the_rare_states_of_the_stages_add_nothing_to_their_futures() {
    let inner = size_of::<FutureOf<Inner>>();
    // Telemetry sits at the bottom: its future is one pointer.
    assert_eq!(
        size_of::<FutureOf<TelemetryService<Inner, NoTelemetry>>>(),
        size_of::<usize>()
    );
    // The scheduler's wait for a permit (the inner service and the
    // request) is boxed: a running call holds its inner future and permit.
    let scheduler = size_of::<FutureOf<SchedulerService<Inner>>>();
    let bound = inner + 64;
    assert!(
        scheduler <= bound,
        "the scheduler's future is {scheduler} bytes, over {bound}"
    );
    // The retry stage holds the request for its retries, and boxes the
    // wait between them (a sleep and a shutdown signal).
    let retry = size_of::<FutureOf<RetryService<Inner>>>();
    let bound = inner + size_of::<Request>() + 48;
    assert!(
        retry <= bound,
        "the retry stage's future is {retry} bytes, over {bound}"
    );
}
