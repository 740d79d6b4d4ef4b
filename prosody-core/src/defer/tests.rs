//! Unit tests of the defer stage, over the fakes of `tests/fakes.rs`: a
//! paused tokio clock drives `clock::now()` and the failure-rate gate.

mod drain;
mod fakes;
mod store;

use super::DeferConfig;
use super::gate::MIN_EVENTS;
use crate::Response;
use crate::clock::{self, Timestamp};
use crate::error::{Category, HandlerError};
use crate::key::Key;
use crate::store::TimerChange;
use crate::store::timer::TimerKind;
use fakes::{Harness, timer};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Both kinds of store: one that answers `peek`, one that leaves every
/// lookup to `deferred`.
const PEEKS: [bool; 2] = [true, false];

/// `defer_base` of the tests; not the default, so a hard-coded delay shows.
const BASE: Duration = Duration::from_secs(3);

fn config() -> DeferConfig {
    DeferConfig {
        base: BASE,
        ..DeferConfig::default()
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap()
}

/// The second a timer set `delay` after `from` lands on.
fn rounded_after(from: Timestamp, delay: Duration) -> Timestamp {
    let due = from.as_millis() + millis(delay);
    Timestamp::from_millis(due.div_euclid(1000) * 1000 + if due % 1000 == 0 { 0 } else { 1000 })
}

/// Moves the paused clock to the next whole second, where a timer fires,
/// and returns that second.
async fn align() -> Timestamp {
    let past = clock::now().as_millis().rem_euclid(1000);
    let skip = u64::try_from((1000 - past) % 1000).unwrap();
    tokio::time::advance(Duration::from_millis(skip)).await;
    let now = clock::now();
    assert_eq!(now.as_millis() % 1000, 0);
    now
}

/// One defer-timer write for `key` scheduling `at`.
fn defer_write(key: &str, at: Timestamp) -> (Key, TimerKind, Vec<TimerChange>) {
    (
        Key::from(key),
        TimerKind::Defer,
        vec![TimerChange::Schedule {
            time: at,
            trace: None,
        }],
    )
}

#[tokio::test(start_paused = true)]
async fn a_success_passes_through_and_stores_nothing() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        let (request, _shutdown) = h.message("k", 5);
        assert_eq!(
            h.send(request).await.unwrap(),
            Response::Handled(()),
            "peeks: {peeks}"
        );
        assert_eq!(h.handler.handled(), [5]);
        assert!(h.store.is_empty());
        assert!(h.timers.applied().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_deferred_behind_a_defer_timer() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.handler.fail(Some(5), &[Category::Transient]);
        let (request, _shutdown) = h.message("k", 5);
        let now = clock::now();
        assert_eq!(
            h.send(request).await.unwrap(),
            Response::Unhandled,
            "peeks: {peeks}"
        );
        let at = rounded_after(now, BASE);
        assert!(at > now, "the timer lies ahead");
        assert!((0..1000).contains(&(at.as_millis() - now.as_millis() - millis(BASE))));
        assert_eq!(h.timers.applied(), [defer_write("k", at)]);
        assert_eq!(h.timers.times("k", TimerKind::Defer), [at]);
        assert_eq!(h.store.queue("k"), Some((vec![5], 1)), "its one failure");
        assert_eq!(h.handler.offsets(), [Some(5)]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_later_message_of_a_deferred_key_is_stored_behind_unhandled() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.handler.fail(Some(5), &[Category::Transient]);
        let (first, _shutdown) = h.message("k", 5);
        assert_eq!(h.send(first).await.unwrap(), Response::Unhandled);
        let (later, _shutdown) = h.message("k", 6);
        assert_eq!(
            h.send(later).await.unwrap(),
            Response::Unhandled,
            "peeks: {peeks}"
        );
        assert_eq!(
            h.handler.offsets(),
            [Some(5)],
            "6 never reached the handler"
        );
        assert_eq!(h.store.queue("k"), Some((vec![5, 6], 1)));
        assert_eq!(h.timers.applied().len(), 1, "the key's one timer covers 6");
        // Other keys keep flowing.
        let (other, _shutdown) = h.message("other", 7);
        assert_eq!(h.send(other).await.unwrap(), Response::Handled(()));
        assert_eq!(h.handler.handled(), [7]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_store_write_returns_the_original_error() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.store.fail_defer.store(true, Ordering::Relaxed);
        h.handler
            .fail(Some(5), &[Category::Transient, Category::Transient]);
        let (request, _shutdown) = h.message("k", 5);
        let error = h.send(request).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "peeks: {peeks}");
        assert!(
            error.to_string().contains("offset Some(5) failed"),
            "{error}"
        );
        assert!(h.store.is_empty());
        // The retry stage tries again, and the store is back: deferred.
        h.store.fail_defer.store(false, Ordering::Relaxed);
        let (request, _shutdown) = h.message("k", 5);
        assert_eq!(h.send(request).await.unwrap(), Response::Unhandled);
        assert_eq!(h.store.queue("k"), Some((vec![5], 1)));
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_failing_every_call_fails_the_event_transiently() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.store.fail_all.store(true, Ordering::Relaxed);
        h.handler.fail(Some(5), &[Category::Transient]);
        let (request, _shutdown) = h.message("k", 5);
        let error = h.send(request).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "peeks: {peeks}");
        if peeks {
            // Peeked clear: handled, then deferring failed.
            assert!(
                error.to_string().contains("offset Some(5) failed"),
                "{error}"
            );
            assert_eq!(h.handler.offsets(), [Some(5)]);
        } else {
            // The lookup failed: the key's order is unknown, nothing ran.
            assert!(error.to_string().contains("store down"), "{error}");
            assert!(h.handler.seen().is_empty());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_timer_write_stores_no_offset() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.timers.fail.store(true, Ordering::Relaxed);
        h.handler.fail(Some(5), &[Category::Transient]);
        let (request, _shutdown) = h.message("k", 5);
        let error = h.send(request).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "peeks: {peeks}");
        assert!(
            error.to_string().contains("offset Some(5) failed"),
            "{error}"
        );
        assert!(
            h.store.is_empty(),
            "an offset without a timer would be stuck"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn permanent_and_terminal_errors_pass_through() {
    for peeks in PEEKS {
        for category in [Category::Permanent, Category::Terminal] {
            let mut h = Harness::new(config(), peeks);
            h.handler.fail(Some(5), &[category]);
            let (request, _shutdown) = h.message("k", 5);
            let error = h.send(request).await.unwrap_err();
            assert_eq!(error.category(), category, "peeks: {peeks}");
            assert!(
                error.to_string().contains("offset Some(5) failed"),
                "{error}"
            );
            assert!(h.store.is_empty());
            assert!(h.timers.applied().is_empty());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_disabled_stage_returns_failures_but_drains_deferred_keys() {
    for peeks in PEEKS {
        let mut h = Harness::new(
            DeferConfig {
                enabled: false,
                ..config()
            },
            peeks,
        );
        h.handler.fail(Some(5), &[Category::Transient]);
        let (request, _shutdown) = h.message("k", 5);
        let error = h.send(request).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "peeks: {peeks}");
        assert!(h.store.is_empty());
        assert!(h.timers.applied().is_empty());
        // A key deferred before the switch still drains.
        h.store.put("old", &[3]);
        h.loader.put("old", 3);
        let fired = align().await;
        assert_eq!(h.fire("old", fired).await.unwrap(), Response::Unhandled);
        assert_eq!(h.handler.handled(), [3]);
        assert!(h.store.is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_returns_new_failures_until_the_window_passes() {
    async fn send_failing(h: &mut Harness, n: u64) -> Result<Response<()>, HandlerError> {
        let offset = i64::try_from(n).unwrap();
        h.handler.fail(Some(offset), &[Category::Transient]);
        let (request, _shutdown) = h.message(&format!("k{n}"), offset);
        h.send(request).await
    }
    let mut h = Harness::new(config(), true);
    // Below MIN_EVENTS events the gate stays open, whatever the rate.
    for n in 0..MIN_EVENTS - 1 {
        assert_eq!(
            send_failing(&mut h, n).await.unwrap(),
            Response::Unhandled,
            "failure {n}"
        );
    }
    // From MIN_EVENTS on, every event failed: above the 0.9 threshold.
    for n in MIN_EVENTS - 1..MIN_EVENTS + 2 {
        let error = send_failing(&mut h, n).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "failure {n}");
    }
    let deferred = usize::try_from(MIN_EVENTS - 1).unwrap();
    assert_eq!(h.store.len(), deferred);
    assert_eq!(h.timers.applied().len(), deferred);
    // A window later the failures are forgotten: deferral resumes.
    tokio::time::advance(config().failure_window).await;
    assert_eq!(
        send_failing(&mut h, 100).await.unwrap(),
        Response::Unhandled
    );
    assert_eq!(h.store.len(), deferred + 1);
}

#[tokio::test(start_paused = true)]
async fn a_failure_during_shutdown_is_returned_not_deferred() {
    for peeks in PEEKS {
        let mut h = Harness::new(config(), peeks);
        h.handler.fail(Some(5), &[Category::Transient]);
        let (request, shutdown) = h.message("k", 5);
        shutdown.cancel();
        let error = h.send(request).await.unwrap_err();
        assert_eq!(error.category(), Category::Transient, "peeks: {peeks}");
        assert!(h.store.is_empty());
        assert!(h.timers.applied().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_application_timer_is_put_off() {
    let mut h = Harness::new(config(), true);
    h.handler.fail(None, &[Category::Transient]);
    let fired = align().await;
    // Put off twice already: the third delay, 4 * BASE.
    let (request, _shutdown) = timer("k", TimerKind::Application, fired, h.access());
    let at = rounded_after(clock::now(), 4 * BASE);
    assert_eq!(
        h.send(request.with_deferrals(2)).await.unwrap(),
        Response::PutOff(at)
    );
    assert_eq!(at.as_millis(), fired.as_millis() + 4 * millis(BASE));
    assert_eq!(h.handler.seen()[0].timer, Some(TimerKind::Application));
    assert!(h.store.is_empty(), "no store write");
    assert!(h.timers.applied().is_empty(), "the timer stays as it is");
    // A timer that succeeds is not put off.
    let (request, _shutdown) = timer("k", TimerKind::Application, fired, h.access());
    assert_eq!(h.send(request).await.unwrap(), Response::Handled(()));
}

/// A handler's commit that failed partway may already have removed the
/// firing timer: putting it off would lose it, so the failure goes to the
/// retry stage, which runs the handler and its commit again.
#[tokio::test(start_paused = true)]
async fn a_timer_whose_commit_failed_partway_is_not_put_off() {
    let mut h = Harness::new(config(), true);
    h.handler.fail(None, &[Category::Transient]);
    let fired = align().await;
    let timers = h.access();
    timers.stage(TimerChange::Unschedule { time: fired });
    h.timers.fail.store(true, Ordering::Relaxed);
    assert!(timers.commit(&Key::from("k"), &[]).await.is_err());
    h.timers.fail.store(false, Ordering::Relaxed);
    let (request, _shutdown) = timer("k", TimerKind::Application, fired, timers.clone());
    let error = h.send(request).await.unwrap_err();
    assert_eq!(
        error.category(),
        Category::Transient,
        "put off after a partial commit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_application_timer_during_shutdown_is_returned() {
    let mut h = Harness::new(config(), true);
    h.handler.fail(None, &[Category::Transient]);
    let timers = h.access();
    let (request, shutdown) = timer("k", TimerKind::Application, clock::now(), timers.clone());
    shutdown.cancel();
    assert_eq!(
        h.send(request).await.unwrap_err().category(),
        Category::Transient
    );
}
