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

#[tokio::test(start_paused = true)]
async fn an_expired_attempt_is_a_transient_error() {
    let handler =
        service_fn(|_: EventRequest<u8>| std::future::pending::<Result<(), HandlerError>>());
    let stack = TimeoutLayer::new(TimeoutConfig {
        timeout: Duration::from_secs(3),
    })
    .layer(handler);
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    let started = Instant::now();
    let error = stack.oneshot(request).await.err().map(|e| e.category());
    assert_eq!(error, Some(Category::Transient));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}
