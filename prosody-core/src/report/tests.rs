#![allow(clippy::expect_used, clippy::panic, reason = "test code fails loudly")]

use super::{FailureReport, QUEUE, ReportSink};
use crate::clock::Timestamp;
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::event::{Event, Timer};
use crate::handler::EventRequest;
use crate::key::Key;
use crate::telemetry::TelemetryLayer;
use crate::testkit;
use futures_util::FutureExt;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt, service_fn};

/// Long enough for a thread to take a report on the slowest machine;
/// only a broken sink waits this long.
const PATIENCE: Duration = Duration::from_secs(30);

/// The store this attempt's order is in could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("order store unreachable")]
struct Unreachable(#[source] std::io::Error);

/// A handler stack that fails every call whose key starts with `bad`
/// (permanently when it starts with `bad-p`), inside a telemetry stage
/// reporting to `sink`.
fn stack(
    sink: ReportSink,
) -> impl Service<EventRequest<u8>, Response = (), Error = HandlerError> + Clone {
    TelemetryLayer::new(sink).layer(service_fn(|request: EventRequest<u8>| {
        let key = request.context.key().to_string();
        async move {
            if key.starts_with("bad-p") {
                Err(HandlerError::permanent("no such order"))
            } else if key.starts_with("bad") {
                let cause = std::io::Error::other("connection refused");
                Err(HandlerError::transient(Unreachable(cause)))
            } else {
                Ok(())
            }
        }
    }))
}

/// Runs one call of `key` through `stack`; the handler never waits, so
/// the call completes when first polled, unless the sink blocks it.
fn call(
    stack: &(impl Service<EventRequest<u8>, Response = (), Error = HandlerError> + Clone),
    key: &str,
) -> Result<(), HandlerError> {
    let (request, _, _) = testkit::message(key, 0u8, None);
    stack
        .clone()
        .oneshot(request)
        .now_or_never()
        .expect("the call completes at once")
}

/// A hook that passes each report on, and the other end.
fn passing() -> (
    impl Fn(&FailureReport) + Send + Sync,
    Receiver<FailureReport>,
) {
    let (reports, received) = mpsc::channel();
    let reports = Mutex::new(reports);
    let hook = move |report: &FailureReport| {
        let reports = reports.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = reports.send(report.clone());
    };
    (hook, received)
}

/// A hook that tells when it starts on a report, then holds it until
/// released (when the releasing end is dropped), then passes it on.
struct Held {
    started: Receiver<()>,
    release: Sender<()>,
    reports: Receiver<FailureReport>,
}

fn held() -> (impl Fn(&FailureReport) + Send + Sync, Held) {
    let (started, started_rx) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let (hook, reports) = passing();
    let gate = Mutex::new((started, released));
    let held = move |report: &FailureReport| {
        let gate = gate.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = gate.0.send(());
        // Returns once `release` is dropped.
        while gate.1.recv().is_ok() {}
        hook(report);
    };
    let ends = Held {
        started: started_rx,
        release,
        reports,
    };
    (held, ends)
}

/// Takes `count` reports, each within the patience.
fn take(reports: &Receiver<FailureReport>, count: usize) -> Vec<FailureReport> {
    (0..count)
        .map(|n| {
            reports
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("report {n} of {count} did not arrive: {e}"))
        })
        .collect()
}

#[test]
fn a_failed_call_is_reported_with_its_place_and_its_error_chain() {
    let (hook, reports) = passing();
    let sink = ReportSink::spawn(hook).expect("a thread");
    let stack = stack(sink.clone());
    assert!(call(&stack, "good").is_ok());
    assert!(call(&stack, "bad-1").is_err());
    let stop = CancellationToken::new();
    let context = Context::new(Key::from("bad-p-7"), "orders".into(), 4, stop.clone(), stop);
    let timer = Event::Timer(Timer::new("bad-p-7", Timestamp::from_millis(60_000)));
    let timer = stack.clone().oneshot(EventRequest::new(timer, context));
    assert!(timer.now_or_never().expect("at once").is_err());

    let [message, timer] = <[FailureReport; 2]>::try_from(take(&reports, 2)).expect("two");
    assert_eq!(
        (message.kind, &*message.topic, message.partition),
        ("message", "topic", 0)
    );
    assert_eq!((message.offset, &*message.key), (Some(0), "bad-1"));
    assert_eq!(message.fire_time, None, "a message has no fire time");
    assert_eq!(
        (message.attempt, message.category),
        (1, Category::Transient)
    );
    assert_eq!(
        message.chain,
        ["order store unreachable", "connection refused"]
    );
    assert_eq!(message.message(), "order store unreachable");
    assert_eq!(
        (timer.kind, &*timer.topic, timer.partition),
        ("timer", "orders", 4)
    );
    assert_eq!((timer.offset, &*timer.key), (None, "bad-p-7"));
    assert_eq!(timer.fire_time, Some(Timestamp::from_millis(60_000)));
    assert_eq!(
        (timer.category, timer.chain.as_slice()),
        (Category::Permanent, &["no such order".to_owned()][..])
    );
    drop((stack, sink));
    assert_eq!(
        reports.recv_timeout(PATIENCE).err(),
        Some(RecvTimeoutError::Disconnected),
        "a success was reported, or a failure twice"
    );
}

/// The hook holds its first report while more failures than the queue
/// takes go by: each completes at once, the queue keeps 1,024 and the
/// rest are dropped and counted; once released, the hook gets every kept
/// one.
#[test]
fn a_slow_hook_never_holds_up_the_handler_path() {
    let (hook, held) = held();
    let sink = ReportSink::spawn(hook).expect("a thread");
    let stack = stack(sink.clone());
    assert!(call(&stack, "bad-first").is_err());
    held.started
        .recv_timeout(PATIENCE)
        .expect("the hook holds the first report");
    let extra = 10;
    let (done, finished) = mpsc::channel();
    let failing = stack.clone();
    let calls = std::thread::spawn(move || {
        for n in 0..QUEUE + extra {
            assert!(call(&failing, &format!("bad-{n}")).is_err());
        }
        let _ = done.send(());
    });
    let completed = finished.recv_timeout(PATIENCE);
    drop(held.release);
    assert!(
        completed.is_ok(),
        "the handler path waited for a blocked hook"
    );
    assert_eq!(
        sink.dropped(),
        extra as u64,
        "the queue keeps {QUEUE}, the rest is dropped"
    );
    calls.join().expect("the calls");
    let reports = take(&held.reports, 1 + QUEUE);
    assert_eq!(reports[0].key.as_str(), "bad-first");
    assert_eq!(reports[QUEUE].key.as_str(), format!("bad-{}", QUEUE - 1));
    drop((stack, sink));
    assert_eq!(
        held.reports.recv_timeout(PATIENCE).err(),
        Some(RecvTimeoutError::Disconnected)
    );
}

#[test]
fn a_hook_that_panics_is_counted_and_later_reports_still_arrive() {
    let (hook, reports) = passing();
    let sink = ReportSink::spawn(move |report: &FailureReport| {
        assert_ne!(report.key.as_str(), "bad-boom", "the tracker is down");
        hook(report);
    })
    .expect("a thread");
    let stack = stack(sink.clone());
    for key in ["bad-boom", "bad-1", "bad-boom", "bad-2"] {
        assert!(call(&stack, key).is_err());
    }
    let keys: Vec<String> = take(&reports, 2)
        .iter()
        .map(|report| report.key.to_string())
        .collect();
    assert_eq!(keys, ["bad-1", "bad-2"]);
    assert_eq!((sink.panics(), sink.dropped()), (2, 0));
}

/// Reports queued behind a held hook when the last sink is dropped are
/// all reported, and then the thread ends (dropping its hook).
#[test]
fn dropping_the_sink_drains_what_is_queued_then_ends_the_thread() {
    let (hook, held) = held();
    let sink = ReportSink::spawn(hook).expect("a thread");
    let stack = stack(sink.clone());
    let keys: Vec<String> = (0..10).map(|n| format!("bad-{n}")).collect();
    for key in &keys {
        assert!(call(&stack, key).is_err());
    }
    held.started
        .recv_timeout(PATIENCE)
        .expect("the hook starts");
    drop((stack, sink));
    drop(held.release);
    let reported: Vec<String> = take(&held.reports, keys.len())
        .iter()
        .map(|report| report.key.to_string())
        .collect();
    assert_eq!(reported, keys);
    assert_eq!(
        held.reports.recv_timeout(PATIENCE).err(),
        Some(RecvTimeoutError::Disconnected),
        "the report thread went on after the last sink was dropped"
    );
}

/// A sink whose thread is gone counts what it is offered as dropped.
#[test]
fn each_offer_to_a_stopped_thread_is_counted() {
    let sink = ReportSink::spawn(|_: &FailureReport| {}).expect("a thread");
    let (gone, _) = mpsc::sync_channel(1);
    let orphan = ReportSink {
        queue: gone,
        counts: Arc::clone(&sink.counts),
    };
    let stack = stack(orphan);
    assert!(call(&stack, "bad-1").is_err());
    assert!(call(&stack, "good").is_ok());
    assert_eq!(sink.dropped(), 1);
}
