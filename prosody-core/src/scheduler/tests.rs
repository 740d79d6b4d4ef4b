//! Service-level tests of the scheduler, on a paused clock.

use super::{SchedulerConfig, SchedulerLayer, SchedulerService};
use crate::clock::Timestamp;
use crate::context::{Context, Demand};
use crate::error::{Category, HandlerError};
use crate::event::{Event, Timer};
use crate::handler::EventRequest;
use crate::key::Key;
use futures_util::FutureExt;
use proptest::prelude::*;
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt};

mod fairness;

/// One inner call the probe ran to completion.
#[derive(Clone, Debug)]
struct Run {
    key: Key,
    class: Demand,
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct ProbeState {
    running: AtomicUsize,
    max: AtomicUsize,
    runs: Mutex<Vec<Run>>,
}

/// The inner service: runs each call for as many milliseconds as its timer's
/// time says, panics for keys starting with `panic`, and records what ran.
#[derive(Clone, Default)]
struct Probe(Arc<ProbeState>);

/// Leaves the running count when the inner call ends, however it ends.
struct Leave(Arc<ProbeState>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Probe {
    fn max(&self) -> usize {
        self.0.max.load(Ordering::SeqCst)
    }

    fn running(&self) -> usize {
        self.0.running.load(Ordering::SeqCst)
    }

    fn runs(&self) -> Vec<Run> {
        self.0.runs.lock().unwrap().clone()
    }

    fn keys(&self) -> Vec<String> {
        self.runs().iter().map(|r| r.key.to_string()).collect()
    }

    /// When the last call of `key` started running.
    fn start_of(&self, key: &str) -> Instant {
        self.runs()
            .iter()
            .rev()
            .find(|r| r.key.as_str() == key)
            .map(|r| r.start)
            .expect("the key ran")
    }
}

impl Service<EventRequest<()>> for Probe {
    type Response = ();
    type Error = HandlerError;
    type Future = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: EventRequest<()>) -> Self::Future {
        let state = Arc::clone(&self.0);
        let now = state.running.fetch_add(1, Ordering::SeqCst) + 1;
        state.max.fetch_max(now, Ordering::SeqCst);
        let leave = Leave(Arc::clone(&state));
        let key = request.context.key().clone();
        let class = request.context.demand();
        let millis = match request.event {
            Event::Timer(timer) => u64::try_from(timer.time.as_millis()).unwrap(),
            _ => 0,
        };
        let start = Instant::now();
        Box::pin(async move {
            let _leave = leave;
            assert!(!key.starts_with("panic"), "handler panicked");
            sleep(Duration::from_millis(millis)).await;
            let end = Instant::now();
            state.runs.lock().unwrap().push(Run {
                key,
                class,
                start,
                end,
            });
            Ok(())
        })
    }
}

type Svc = SchedulerService<Probe>;

fn config(limit: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_concurrency: NonZeroUsize::new(limit).unwrap(),
        ..SchedulerConfig::default()
    }
}

fn setup(config: SchedulerConfig) -> (SchedulerLayer, Svc, Probe) {
    let layer = SchedulerLayer::new(config);
    let probe = Probe::default();
    let service = layer.layer(probe.clone());
    (layer, service, probe)
}

/// A call of `key` in `class` that runs for `millis`.
fn request(
    key: &str,
    class: Demand,
    millis: u64,
    shutdown: &CancellationToken,
) -> EventRequest<()> {
    let key = Key::from(key);
    // The token both drains and stops the partition.
    let context = Context::new(
        key.clone(),
        "t".into(),
        0,
        shutdown.clone(),
        shutdown.clone(),
    )
    .with_demand(class);
    let time = Timestamp::from_millis(i64::try_from(millis).unwrap());
    EventRequest {
        event: Event::Timer(Timer::new(key, time)),
        context,
        extensions: crate::handler::Extensions::default(),
    }
}

fn call(service: &Svc, key: &str, class: Demand, millis: u64) -> super::ResponseFuture<Probe, ()> {
    service
        .clone()
        .call(request(key, class, millis, &CancellationToken::new()))
}

/// Awaits `future`, failing the test if it has not completed within a
/// simulated day: a lost permit would otherwise hang the test.
async fn within<F: Future>(future: F) -> F::Output {
    timeout(Duration::from_secs(24 * 60 * 60), future)
        .await
        .expect("completed within a simulated day")
}

fn run_paused<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(future)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Acceptance 1: the inner calls running at once never exceed
    /// `max_concurrency`, and every permit comes back, over random arrivals
    /// on random keys and classes, random durations, and callers that give
    /// up at random times.
    #[test]
    fn running_calls_never_exceed_max_concurrency(
        limit in 1_usize..6,
        calls in prop::collection::vec(
            (0_u64..3_000, 0_u8..8, 0_u64..400, any::<bool>(), prop::option::weighted(0.2, 0_u64..600)),
            1..80,
        ),
    ) {
        run_paused(async move {
            let (layer, service, probe) = setup(config(limit));
            let mut handles = Vec::new();
            for (at, key, millis, failure, give_up) in calls {
                let service = service.clone();
                let class = if failure { Demand::Failure } else { Demand::Normal };
                handles.push(tokio::spawn(async move {
                    sleep(Duration::from_millis(at)).await;
                    let request = request(&format!("k{key}"), class, millis, &CancellationToken::new());
                    let call = service.oneshot(request);
                    match give_up {
                        Some(after) => {
                            let _ = timeout(Duration::from_millis(after), call).await;
                        }
                        None => within(call).await.unwrap(),
                    }
                }));
            }
            for handle in handles {
                within(handle).await.unwrap();
            }
            assert!(probe.max() <= limit, "{} running with limit {limit}", probe.max());
            assert_eq!(probe.running(), 0);
            assert_eq!(layer.shared().available(), limit, "a permit leaked");
        });
    }
}

/// The priority formula end to end: of two waiting calls, the key with less
/// virtual time (seconds its calls ran) goes first; a key is charged what it
/// ran.
#[tokio::test(start_paused = true)]
async fn the_key_with_less_virtual_time_goes_first() {
    let (layer, service, probe) = setup(config(1));
    within(call(&service, "hot", Demand::Normal, 10_000))
        .await
        .unwrap();
    let hot = layer.shared().virtual_time(&Key::from("hot"));
    assert!((hot - 10.0).abs() < 1e-9, "charged {hot}");
    let blocker = call(&service, "blocker", Demand::Normal, 1_000);
    let second = call(&service, "hot", Demand::Normal, 1_000);
    let third = call(&service, "cold", Demand::Normal, 1_000);
    let (a, b, c) = tokio::join!(blocker, second, third);
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(probe.keys(), ["hot", "blocker", "cold", "hot"]);
}

/// A call that must wait while its partition stops gives up at once with a
/// transient error and never reaches the handler; a call with a free
/// permit still runs (stopping new attempts is the shutdown layer's job).
#[tokio::test(start_paused = true)]
async fn a_waiting_call_gives_up_promptly_when_its_partition_stops() {
    let (layer, service, probe) = setup(config(1));
    let shutdown = CancellationToken::new();
    let blocker = tokio::spawn(call(&service, "blocker", Demand::Normal, 10_000));
    tokio::task::yield_now().await;
    let mut waiting = Box::pin(
        service
            .clone()
            .call(request("w", Demand::Normal, 0, &shutdown)),
    );
    assert!((&mut waiting).now_or_never().is_none(), "no permit is free");
    let before = Instant::now();
    shutdown.cancel();
    let error = (&mut waiting)
        .now_or_never()
        .expect("gave up at once")
        .unwrap_err();
    assert_eq!(error.category(), Category::Transient);
    assert_eq!(Instant::now(), before);
    // Already shutting down and no permit free: refused without waiting.
    let refused = service
        .clone()
        .call(request("r", Demand::Normal, 0, &shutdown));
    let error = refused
        .now_or_never()
        .expect("refused at once")
        .unwrap_err();
    assert_eq!(error.category(), Category::Transient);
    within(blocker).await.unwrap().unwrap();
    assert_eq!(layer.shared().available(), 1);
    let free = service
        .clone()
        .oneshot(request("free", Demand::Normal, 0, &shutdown));
    within(free).await.unwrap();
    assert_eq!(probe.keys(), ["blocker", "free"]);
}

/// A waiter dropped while it waits is skipped, whether it was dropped before
/// a permit was chosen for it or with the permit already in its channel.
#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_is_skipped_and_its_permit_passed_on() {
    let (layer, service, probe) = setup(config(1));
    let first = call(&service, "first", Demand::Normal, 1_000);
    let gone_early = call(&service, "gone-early", Demand::Normal, 1_000);
    let gone_late = call(&service, "gone-late", Demand::Normal, 1_000);
    let last = call(&service, "last", Demand::Normal, 1_000);
    drop(gone_early);
    // `first` completes and hands its permit to `gone-late`, which then drops.
    within(first).await.unwrap();
    drop(gone_late);
    within(last).await.unwrap();
    assert_eq!(probe.keys(), ["first", "last"]);
    assert_eq!(layer.shared().available(), 1);
}

/// A call that panics or is cancelled while it runs returns its permit.
#[tokio::test(start_paused = true)]
async fn a_panicking_or_cancelled_call_returns_its_permit() {
    let (layer, service, probe) = setup(config(2));
    let panicked = tokio::spawn(call(&service, "panic", Demand::Normal, 1_000)).await;
    assert!(panicked.unwrap_err().is_panic());
    let cancelled = timeout(
        Duration::from_millis(10),
        call(&service, "slow", Demand::Normal, 1_000),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(layer.shared().available(), 2);
    assert_eq!(probe.running(), 0);
}

/// Every service of one layer, wrapping any inner service, shares one limit.
#[tokio::test(start_paused = true)]
async fn services_of_one_layer_share_one_limit() {
    let (layer, one, _probe) = setup(config(1));
    let other_probe = Probe::default();
    let other = layer.layer(other_probe.clone());
    let running = tokio::spawn(call(&one, "a", Demand::Normal, 1_000));
    tokio::task::yield_now().await;
    let mut waiting = Box::pin(other.clone().call(request(
        "b",
        Demand::Normal,
        0,
        &CancellationToken::new(),
    )));
    assert!(
        (&mut waiting).now_or_never().is_none(),
        "the other service waits"
    );
    within(running).await.unwrap().unwrap();
    within(waiting).await.unwrap();
    assert_eq!(other_probe.keys(), ["b"]);
    assert_eq!(layer.shared().available(), 1);
}

/// A call whose handler succeeded gives its permit back while the rest of
/// its call (the commit) waits, so another key runs at once; a call whose
/// handler did not say so keeps it.
#[tokio::test(start_paused = true)]
async fn a_returned_handler_leaves_its_permit_while_its_commit_waits() {
    for returned in [true, false] {
        let commit = Arc::new(tokio::sync::Notify::new());
        let inner = {
            let commit = Arc::clone(&commit);
            tower::service_fn(move |request: EventRequest<()>| {
                let commit = Arc::clone(&commit);
                async move {
                    if returned && let Some(work) = request.context.work() {
                        work.handler_returned();
                    }
                    commit.notified().await;
                    Ok::<_, HandlerError>(())
                }
            })
        };
        let mut service = SchedulerLayer::new(config(1)).layer(inner);
        let shutdown = CancellationToken::new();
        let mut first = request("a", Demand::Normal, 0, &shutdown);
        first.context = crate::testkit::as_in_runtime(first.context);
        let mut first = std::pin::pin!(service.call(first));
        assert!((&mut first).now_or_never().is_none(), "the commit waits");
        let second = service.call(request("b", Demand::Normal, 0, &shutdown));
        let expected = if returned { "running" } else { "waiting" };
        assert!(
            format!("{second:?}").contains(expected),
            "handler returned: {returned}; the second call is {second:?}"
        );
        commit.notify_one();
        assert!(within(first).await.is_ok());
    }
}
