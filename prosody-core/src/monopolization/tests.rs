use super::{MonopolizationConfig, MonopolizationLayer, Monopolized};
use crate::Response;
use crate::clock::Timestamp;
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::event::{Event, Headers, Message};
use crate::handler::EventRequest;
use proptest::prelude::*;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{Instant, advance};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt};

const WINDOW: Duration = Duration::from_secs(10);

fn config(threshold: f64, cache_size: usize) -> MonopolizationConfig {
    MonopolizationConfig {
        enabled: true,
        threshold,
        window: WINDOW,
        cache_size: NonZeroUsize::new(cache_size).unwrap(),
    }
}

/// A handler that works (sleeps) for the duration its payload names, and
/// counts its calls.
fn handler(
    calls: &Arc<AtomicUsize>,
) -> impl Service<
    EventRequest<Duration>,
    Response = Response<()>,
    Error = HandlerError,
    Future: Future + Send,
> + Clone
+ Send
+ use<> {
    let calls = Arc::clone(calls);
    tower::service_fn(move |request: EventRequest<Duration>| {
        calls.fetch_add(1, Ordering::Relaxed);
        let work = match request.event {
            Event::Message(message) => message.payload,
            Event::Timer(_) | Event::Excise(_) => Duration::ZERO,
        };
        async move {
            tokio::time::sleep(work).await;
            Ok::<_, HandlerError>(Response::Handled(()))
        }
    })
}

fn request(topic: &str, key: &str, work: Duration) -> EventRequest<Duration> {
    EventRequest {
        event: Event::Message(Message {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            timestamp: Timestamp::from_millis(0),
            key: key.into(),
            raw_key: None,
            payload: work,
            raw: bytes::Bytes::new(),
            id: None,
            headers: Headers::new(),
        }),
        context: Context::new(
            key.into(),
            topic.into(),
            0,
            CancellationToken::new(),
            CancellationToken::new(),
        ),
        extensions: crate::handler::Extensions::default(),
    }
}

async fn run<S>(service: &mut S, key: &str, work: Duration) -> Result<Response<()>, HandlerError>
where
    S: Service<EventRequest<Duration>, Response = Response<()>, Error = HandlerError>,
{
    service
        .ready()
        .await?
        .call(request("topic", key, work))
        .await
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn is_monopolized(error: &HandlerError) -> bool {
    error.category() == Category::Transient
        && error.source().downcast_ref::<Monopolized>().is_some()
}

/// A call of `key` on topic "topic" that works for `work`, on a task of its
/// own, so calls overlap.
fn spawn_call<S>(
    service: &S,
    key: &str,
    work: Duration,
) -> JoinHandle<Result<Response<()>, HandlerError>>
where
    S: Service<EventRequest<Duration>, Response = Response<()>, Error = HandlerError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    tokio::spawn(service.clone().oneshot(request("topic", key, work)))
}

/// Waits for a spawned call and checks that it succeeded.
async fn succeeds(call: JoinHandle<Result<Response<()>, HandlerError>>) {
    let ended = call.await;
    assert!(ended.as_ref().is_ok_and(Result::is_ok), "{ended:?}");
}

/// The next call of `key` (1 s of work) is rejected as monopolizing.
async fn is_rejected<S>(service: S, key: &str, case: &str)
where
    S: Service<EventRequest<Duration>, Response = Response<()>, Error = HandlerError>,
{
    let error = service
        .oneshot(request("topic", key, secs(1.0)))
        .await
        .unwrap_err();
    assert!(is_monopolized(&error), "{case}: {error}");
}

#[tokio::test(start_paused = true)]
async fn a_key_over_its_budget_is_rejected_and_a_light_key_is_not() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Budget: 5 s of every 10 s.
    let mut service = MonopolizationLayer::new(&config(0.5, 64)).layer(handler(&calls));
    run(&mut service, "hot", secs(6.0)).await.unwrap();
    let error = run(&mut service, "hot", secs(1.0)).await.unwrap_err();
    assert!(is_monopolized(&error), "{error}");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "a rejected call never reaches the handler"
    );
    run(&mut service, "light", secs(1.0)).await.unwrap();
    // The same key in another topic is another key.
    service
        .ready()
        .await
        .unwrap()
        .call(request("other", "hot", secs(1.0)))
        .await
        .unwrap();
    // Exactly the budget is not over it; one more call's time is.
    run(&mut service, "edge", secs(5.0)).await.unwrap();
    run(&mut service, "edge", secs(0.5)).await.unwrap();
    assert!(is_monopolized(
        &run(&mut service, "edge", secs(0.5)).await.unwrap_err()
    ));
}

#[tokio::test(start_paused = true)]
async fn the_window_rolls_and_the_hot_key_is_accepted_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut service = MonopolizationLayer::new(&config(0.5, 64)).layer(handler(&calls));
    let start = Instant::now();
    run(&mut service, "hot", secs(6.0)).await.unwrap();
    // The window opened at `start` and ends 10 s later.
    let end = start + WINDOW;
    advance(
        end.duration_since(Instant::now())
            .checked_sub(secs(0.001))
            .unwrap(),
    )
    .await;
    assert!(
        run(&mut service, "hot", secs(1.0)).await.is_err(),
        "still in the first window"
    );
    advance(secs(0.001)).await;
    run(&mut service, "hot", secs(1.0)).await.unwrap();
    run(&mut service, "hot", secs(1.0)).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

#[tokio::test(start_paused = true)]
async fn the_tracked_keys_are_bounded() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = MonopolizationLayer::new(&config(0.5, 2));
    let mut service = layer.layer(handler(&calls));
    run(&mut service, "hot", secs(6.0)).await.unwrap();
    assert!(run(&mut service, "hot", secs(1.0)).await.is_err());
    let shared = layer.shared.as_ref().unwrap();
    for n in 0..50 {
        run(&mut service, &format!("k{n}"), secs(0.1))
            .await
            .unwrap();
        assert!(shared.tracked() <= 2, "tracked {}", shared.tracked());
    }
}

/// Calls of one key that run at the same time (the key in two partitions,
/// under a custom partitioner) add up, even when the key is new: the first
/// call puts its tracker in, and the second finds it.
#[tokio::test(start_paused = true)]
async fn concurrent_calls_of_a_new_key_add_up() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Budget: 5 s of every 10 s; two calls of 3 s each overrun it.
    let service = MonopolizationLayer::new(&config(0.5, 64)).layer(handler(&calls));
    let first = spawn_call(&service, "new", secs(3.0));
    let second = spawn_call(&service, "new", secs(3.0));
    succeeds(first).await;
    succeeds(second).await;
    is_rejected(service, "new", "two calls of 3 s").await;
}

/// A key the cache forgets while a call of it runs (evicted when new keys
/// crowd the cache) still gets that call's time: the call puts its tracker
/// back; and if a later call put in another, the time goes to that one.
#[tokio::test(start_paused = true)]
async fn a_call_whose_key_was_forgotten_while_it_ran_still_counts() {
    for later_call in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = MonopolizationLayer::new(&config(0.5, 64));
        let service = layer.layer(handler(&calls));
        let hot = spawn_call(&service, "hot", secs(6.0));
        tokio::task::yield_now().await;
        let shared = layer.shared.as_ref().unwrap();
        assert!(
            shared.forget("topic", "hot"),
            "the hot call put its tracker in"
        );
        if later_call {
            // A second later, puts a tracker of its own in, and adds its
            // 1 s to it.
            advance(secs(1.0)).await;
            run(&mut service.clone(), "hot", secs(1.0)).await.unwrap();
        }
        succeeds(hot).await;
        is_rejected(service, "hot", &format!("later call {later_call}")).await;
    }
}

/// Two calls of one key share a tracker the cache forgets while both
/// run: the second to end puts it back, holding both calls' time.
#[tokio::test(start_paused = true)]
async fn overlapping_calls_of_a_forgotten_key_count_once_each() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Budget: 5 s of every 10 s; 3 s and 4 s together overrun it.
    let layer = MonopolizationLayer::new(&config(0.5, 64));
    let service = layer.layer(handler(&calls));
    let first = spawn_call(&service, "k", secs(3.0));
    let second = spawn_call(&service, "k", secs(4.0));
    tokio::task::yield_now().await;
    assert!(layer.shared.as_ref().unwrap().forget("topic", "k"));
    succeeds(first).await;
    succeeds(second).await;
    is_rejected(service, "k", "3 s and 4 s, forgotten while running").await;
}

/// A call dropped before it ends, the last holder of a tracker the cache
/// forgot, still puts it back: the time of the calls that ended with it
/// counts.
#[tokio::test(start_paused = true)]
async fn a_dropped_call_puts_back_a_forgotten_tracker() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Budget: 5 s of every 10 s.
    let layer = MonopolizationLayer::new(&config(0.5, 64));
    let service = layer.layer(handler(&calls));
    let ends = spawn_call(&service, "k", secs(6.0));
    let dropped = spawn_call(&service, "k", secs(9.0));
    tokio::task::yield_now().await;
    assert!(layer.shared.as_ref().unwrap().forget("topic", "k"));
    succeeds(ends).await;
    dropped.abort();
    assert!(dropped.await.is_err_and(|e| e.is_cancelled()));
    is_rejected(service, "k", "6 s, then a call dropped").await;
}

/// A call that began in a window a later call has closed counts in
/// neither: the time of the window current when a call began is what
/// counts.
#[tokio::test(start_paused = true)]
async fn a_call_from_an_ended_window_does_not_count_in_the_next() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Budget: 5 s of every 10 s.
    let service = MonopolizationLayer::new(&config(0.5, 64)).layer(handler(&calls));
    let long = spawn_call(&service, "k", secs(20.0));
    tokio::task::yield_now().await;
    advance(secs(12.0)).await;
    // Opens a new window at 12 s and uses 1 s of it.
    run(&mut service.clone(), "k", secs(1.0)).await.unwrap();
    // The long call began at 0 and ends at 20 s, in the window of 12 s.
    succeeds(long).await;
    let result = service.oneshot(request("topic", "k", secs(1.0))).await;
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn disabled_detection_passes_everything() {
    let calls = Arc::new(AtomicUsize::new(0));
    let disabled = MonopolizationConfig {
        enabled: false,
        ..config(0.1, 64)
    };
    let mut service = MonopolizationLayer::new(&disabled).layer(handler(&calls));
    for _ in 0..5 {
        run(&mut service, "hot", secs(9.0)).await.unwrap();
    }
    assert_eq!(calls.load(Ordering::Relaxed), 5);
}

#[test]
fn defaults_and_validation_name_the_option() {
    let default = MonopolizationConfig::default();
    assert!(default.enabled);
    assert!((default.threshold - 0.9).abs() < f64::EPSILON);
    assert_eq!(default.window, Duration::from_secs(300));
    assert_eq!(default.cache_size.get(), 8192);
    assert_eq!(default.budget(), Duration::from_secs(270));
    assert!(default.validate().is_ok());
    for threshold in [-0.1, 1.5, f64::NAN] {
        let bad = MonopolizationConfig {
            threshold,
            ..MonopolizationConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().option,
            "monopolization_threshold"
        );
        assert!(bad.budget() <= bad.window);
    }
    let bad = MonopolizationConfig {
        window: Duration::ZERO,
        ..MonopolizationConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().option, "monopolization_window");
}

proptest! {
    /// Over random workloads (three keys, calls of up to 4 s with gaps of
    /// up to 3 s, thresholds from 0.2 to 0.9 of a 10 s window): a key is
    /// rejected only if its calls that began within the last window took
    /// longer than the budget, so a key whose calls stay within the budget
    /// in every trailing window is never rejected.
    #[test]
    fn rejections_need_a_budget_overrun(
        threshold in 0.2f64..0.9,
        calls in proptest::collection::vec((0usize..3, 0u64..4000, 0u64..3000), 1..60),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let count = Arc::new(AtomicUsize::new(0));
            let config = config(threshold, 64);
            let budget = config.budget();
            let mut service = MonopolizationLayer::new(&config).layer(handler(&count));
            // Accepted calls per key: (began, took).
            let mut history: Vec<Vec<(Instant, Duration)>> = vec![Vec::new(); 3];
            for (key, work, gap) in calls {
                advance(Duration::from_millis(gap)).await;
                let now = Instant::now();
                let recent: Duration = history[key]
                    .iter()
                    .filter(|(began, _)| now.saturating_duration_since(*began) < WINDOW)
                    .map(|(_, took)| *took)
                    .sum();
                let work = Duration::from_millis(work);
                match run(&mut service, &format!("key-{key}"), work).await {
                    Ok(_) => history[key].push((now, Instant::now().duration_since(now))),
                    Err(error) => {
                        prop_assert!(is_monopolized(&error), "{}", error);
                        prop_assert!(
                            recent > budget,
                            "key-{} rejected after only {:?} of {:?} in the last window",
                            key, recent, budget
                        );
                    }
                }
            }
            Ok(())
        })?;
    }
}

#[test]
fn the_service_fits_a_runtime_stack() {
    fn is_event_service<S: crate::handler::EventService<Duration>>(_: &S) {}
    let calls = Arc::new(AtomicUsize::new(0));
    is_event_service(&MonopolizationLayer::new(&config(0.5, 8)).layer(handler(&calls)));
}

/// Time spent waiting for a scheduler permit is not execution time: a key
/// whose calls wait long behind a hog but run briefly stays within budget,
/// whether the stage meters the call itself or the runtime's context
/// meters its event.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_permit_does_not_count_as_execution() {
    use crate::scheduler::{SchedulerConfig, SchedulerLayer};
    for in_runtime in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let scheduler = SchedulerLayer::new(SchedulerConfig {
            max_concurrency: NonZeroUsize::MIN,
            ..SchedulerConfig::default()
        });
        let stack =
            MonopolizationLayer::new(&config(0.5, 16)).layer(scheduler.layer(handler(&calls)));
        let budget = WINDOW.mul_f64(0.5);
        // The hog holds the one permit longer than the light key's budget,
        // but not past the window, so the light key's second call falls in
        // the same window as its first.
        let hold = budget + WINDOW.saturating_sub(budget) / 2;
        let light = || {
            let mut request = request("topic", "light", secs(0.1));
            if in_runtime {
                request.context = crate::testkit::as_in_runtime(request.context);
            }
            request
        };
        let hog = tokio::spawn(stack.clone().oneshot(request("other", "hog", hold)));
        tokio::task::yield_now().await;
        assert!(stack.clone().oneshot(light()).await.is_ok());
        let again = stack.clone().oneshot(light()).await;
        assert!(
            again.is_ok(),
            "the light key was charged for its wait (in runtime: {in_runtime}): {again:?}"
        );
        assert!(hog.await.is_ok_and(|r| r.is_ok()));
    }
}
