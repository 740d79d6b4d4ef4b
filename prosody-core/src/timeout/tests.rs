use super::{TimeoutConfig, TimeoutLayer};
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::retry::{RetryConfig, RetryLayer};
use crate::testkit;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

#[test]
fn default_is_80_percent_of_the_stall_threshold() {
    assert_eq!(TimeoutConfig::default().timeout, Duration::from_secs(240));
}

#[tokio::test(start_paused = true)]
async fn expiry_cancels_the_attempt_and_the_retry_tries_again() {
    let contexts: Arc<Mutex<Vec<Context>>> = Arc::default();
    let seen = Arc::clone(&contexts);
    // The first attempt hangs until cancelled; the second succeeds.
    let handler = service_fn(move |request: EventRequest<u8>| {
        let first = {
            let mut seen = seen.lock().expect("contexts");
            seen.push(request.context.clone());
            seen.len() == 1
        };
        async move {
            if first {
                request.context.on_cancel().await;
                return Err(HandlerError::transient("cancelled"));
            }
            Ok::<_, HandlerError>(())
        }
    });
    let config = TimeoutConfig {
        timeout: Duration::from_secs(10),
    };
    let stack =
        RetryLayer::new(RetryConfig::default()).layer(TimeoutLayer::new(config).layer(handler));
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let started = Instant::now();
    assert!(stack.oneshot(request).await.is_ok());
    let contexts = contexts.lock().expect("contexts");
    assert_eq!(contexts.len(), 2, "the timed-out attempt was retried once");
    assert!(
        contexts[0].should_cancel(),
        "the first attempt saw cancellation"
    );
    assert!(!contexts[1].should_cancel());
    assert!(started.elapsed() >= Duration::from_secs(10));
}

#[test]
fn the_grace_is_a_tenth_of_the_timeout_up_to_ten_seconds() {
    let grace = |secs| {
        TimeoutConfig {
            timeout: Duration::from_secs(secs),
        }
        .grace()
    };
    assert_eq!(grace(3), Duration::from_millis(300));
    assert_eq!(grace(100), Duration::from_secs(10));
    assert_eq!(grace(240), Duration::from_secs(10));
}

/// A handler that never returns, even when cancelled, is dropped at the end
/// of its grace, and the attempt fails transiently.
#[tokio::test(start_paused = true)]
async fn a_stubborn_attempt_is_dropped_after_its_grace() {
    let dropped = Arc::new(Mutex::new(None::<Instant>));
    let saw = Arc::clone(&dropped);
    let handler = service_fn(move |request: EventRequest<u8>| {
        let guard = DropClock(Arc::clone(&saw));
        async move {
            let _guard = guard;
            request.context.on_cancel().await;
            std::future::pending::<Result<(), HandlerError>>().await
        }
    });
    let config = TimeoutConfig {
        timeout: Duration::from_secs(3),
    };
    let stack = TimeoutLayer::new(config).layer(handler);
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let started = Instant::now();
    let error = stack.oneshot(request).await.err();
    assert_eq!(
        error.as_ref().map(HandlerError::category),
        Some(Category::Transient)
    );
    assert!(error.is_some_and(|e| e.to_string().contains("dropped after its grace")));
    let at = dropped.lock().expect("clock").map(|at| at - started);
    assert_eq!(
        at,
        Some(Duration::from_millis(3300)),
        "dropped at timeout + grace"
    );
}

/// A handler that sees its deadline and returns at once ends the attempt
/// then, with what it returned: here a permanent error, which stays
/// permanent.
#[tokio::test(start_paused = true)]
async fn a_cooperative_attempt_returns_at_its_deadline_with_its_own_error() {
    let handler = service_fn(|request: EventRequest<u8>| async move {
        request.context.on_cancel().await;
        assert!(request.context.is_expired(), "cancelled by the deadline");
        Err::<(), _>(HandlerError::permanent("gave up"))
    });
    let config = TimeoutConfig {
        timeout: Duration::from_secs(3),
    };
    let stack = TimeoutLayer::new(config).layer(handler);
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let started = Instant::now();
    let error = stack.oneshot(request).await.err().map(|e| e.category());
    assert_eq!(error, Some(Category::Permanent));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

/// Records when it is dropped.
struct DropClock(Arc<Mutex<Option<Instant>>>);

impl Drop for DropClock {
    fn drop(&mut self) {
        *self.0.lock().expect("clock") = Some(Instant::now());
    }
}

/// A success returned in the grace does not count, whatever the leaf
/// service: the attempt fails transiently with `ReturnedLate`.
#[tokio::test(start_paused = true)]
async fn a_success_in_the_grace_is_a_transient_failure() {
    let handler = service_fn(|request: EventRequest<u8>| async move {
        request.context.on_cancel().await;
        Ok::<(), HandlerError>(())
    });
    let config = TimeoutConfig {
        timeout: Duration::from_secs(3),
    };
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let error = TimeoutLayer::new(config)
        .layer(handler)
        .oneshot(request)
        .await
        .err();
    assert_eq!(
        error.as_ref().map(HandlerError::category),
        Some(Category::Transient)
    );
    assert!(error.is_some_and(|e| e.to_string().contains("after its deadline")));
}

/// A success whose changes were committed stands, even when the commit
/// ended past the deadline: what landed must not run again. Without a
/// commit the same late success fails (the test above).
#[tokio::test(start_paused = true)]
async fn a_committed_success_stands_past_the_deadline() {
    let handler = service_fn(|request: EventRequest<u8>| async move {
        let work = request.context.work().cloned();
        // Returns in time, commits, and the commit ends in the grace.
        tokio::time::sleep(Duration::from_millis(2_900)).await;
        if let Some(work) = work {
            work.commit(request.context.key(), &[]).await?;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<(), HandlerError>(())
    });
    let config = TimeoutConfig {
        timeout: Duration::from_secs(3),
    };
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let request = EventRequest {
        context: testkit::as_in_runtime(request.context),
        ..request
    };
    let outcome = TimeoutLayer::new(config)
        .layer(handler)
        .oneshot(request)
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
}
