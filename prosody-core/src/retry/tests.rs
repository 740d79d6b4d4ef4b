use super::{RetryConfig, RetryLayer};
use crate::context::Demand;
use crate::error::HandlerError;
use crate::handler::EventRequest;
use crate::testkit;
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

proptest! {
    /// Below the cap delays never decrease and stay within the jitter bounds
    /// of the exponential curve; none exceeds the cap, and at the cap the
    /// jitter shortens by at most a quarter.
    #[test]
    fn delays_grow_within_jitter_bounds(
        base_ms in 1..2_000u64,
        cap_ms in 1..600_000u64,
        jitters in proptest::collection::vec(0.0..1.0f64, 40),
    ) {
        let config = RetryConfig {
            base: Duration::from_millis(base_ms),
            max_delay: Duration::from_millis(cap_ms.max(base_ms)),
            max_retries: None,
        };
        let mut previous = Duration::ZERO;
        for (retry, jitter) in (1u32..).zip(jitters) {
            let delay = config.backoff().jittered(retry, jitter);
            let exponential = config.base.saturating_mul(1u32.checked_shl(retry - 1).unwrap_or(u32::MAX));
            prop_assert!(delay <= config.max_delay);
            if exponential < config.max_delay {
                prop_assert!(delay >= previous, "retry {retry}: {delay:?} after {previous:?}");
                prop_assert!(delay >= exponential);
                prop_assert!(delay <= exponential.mul_f64(1.25).min(config.max_delay));
            } else {
                prop_assert!(delay >= config.max_delay.mul_f64(0.75).max(config.base).min(config.max_delay));
            }
            previous = delay;
        }
    }
}

type Calls = Arc<Mutex<Vec<(Instant, Demand, u32)>>>;

/// A service failing with `error` for its first `failures` calls.
fn flaky(
    failures: usize,
    error: fn() -> HandlerError,
    calls: &Calls,
) -> impl tower::Service<
    EventRequest<u8>,
    Response = (),
    Error = HandlerError,
    Future = std::future::Ready<Result<(), HandlerError>>,
> + Clone {
    let calls = Arc::clone(calls);
    service_fn(move |request: EventRequest<u8>| {
        let mut calls = calls.lock().expect("calls");
        calls.push((
            Instant::now(),
            request.context.demand(),
            request.context.attempt(),
        ));
        let result = if calls.len() <= failures {
            Err(error())
        } else {
            Ok(())
        };
        std::future::ready(result)
    })
}

fn transient() -> HandlerError {
    HandlerError::transient("flaky")
}

#[tokio::test(start_paused = true)]
async fn low_latency_stops_after_exactly_max_retries() {
    for max in 0..5u32 {
        let calls = Calls::default();
        let config = RetryConfig {
            max_retries: Some(max),
            ..RetryConfig::default()
        };
        let service = RetryLayer::new(config.clone()).layer(flaky(usize::MAX, transient, &calls));
        let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
        let result = service.oneshot(request).await;
        assert!(result.is_err());
        let calls = calls.lock().expect("calls");
        assert_eq!(calls.len(), max as usize + 1, "max_retries {max}");
        for (n, pair) in calls.windows(2).enumerate() {
            let waited = pair[1].0 - pair[0].0;
            let retry = u32::try_from(n).expect("small") + 1;
            assert!(
                waited >= config.backoff().jittered(retry, 0.0)
                    && waited <= config.backoff().jittered(retry, 1.0),
                "{waited:?}"
            );
            assert_eq!(pair[1].1, Demand::Failure);
            assert_eq!(pair[1].2, retry + 1);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn transient_failures_retry_until_success_and_permanent_ones_never() {
    let calls = Calls::default();
    let service = RetryLayer::new(RetryConfig::default()).layer(flaky(7, transient, &calls));
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    assert!(service.oneshot(request).await.is_ok());
    assert_eq!(calls.lock().expect("calls").len(), 8);

    let calls = Calls::default();
    let service = RetryLayer::new(RetryConfig::default()).layer(flaky(
        1,
        || HandlerError::permanent("bad"),
        &calls,
    ));
    let (request, _shutdown, _cancel) = testkit::message("k", 0u8, None);
    assert!(service.oneshot(request).await.is_err());
    assert_eq!(calls.lock().expect("calls").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_retry_wait_at_once() {
    let calls = Calls::default();
    let config = RetryConfig {
        base: Duration::from_secs(60),
        ..RetryConfig::default()
    };
    let service = RetryLayer::new(config).layer(flaky(usize::MAX, transient, &calls));
    let (request, shutdown, _cancel) = testkit::message("k", 0u8, None);
    let started = Instant::now();
    let stopper = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        shutdown.cancel();
    };
    let (result, ()) = tokio::join!(service.oneshot(request), stopper);
    assert!(result.is_err());
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert_eq!(calls.lock().expect("calls").len(), 1);
}
