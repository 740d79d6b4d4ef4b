//! The drain: a firing defer timer retries its key's backlog head first.

use super::fakes::{Harness, timer};
use super::{BASE, align, config, millis};
use crate::Response;
use crate::clock::{self, Timestamp};
use crate::context::Demand;
use crate::defer::DeferConfig;
use crate::error::Category;
use crate::key::Key;
use crate::store::TimerChange;
use crate::store::timer::TimerKind;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A drain's write for `key`: the next timer at `at`, then the removal of
/// the one that fired.
fn rearmed(key: &str, at: Timestamp, fired: Timestamp) -> (Key, TimerKind, Vec<TimerChange>) {
    (
        Key::from(key),
        TimerKind::Defer,
        vec![
            TimerChange::Schedule {
                time: at,
                trace: None,
            },
            TimerChange::Unschedule { time: fired },
        ],
    )
}

/// A drained backlog's write for `key`: the removal of the timer that fired.
fn removed(key: &str, fired: Timestamp) -> (Key, TimerKind, Vec<TimerChange>) {
    (
        Key::from(key),
        TimerKind::Defer,
        vec![TimerChange::Unschedule { time: fired }],
    )
}

/// A harness whose store holds `offsets` for "k" and whose log holds them.
fn backlog(config: DeferConfig, offsets: &[i64]) -> Harness {
    let h = Harness::new(config, true);
    h.store.put("k", offsets);
    for offset in offsets {
        h.loader.put("k", *offset);
    }
    h
}

#[tokio::test(start_paused = true)]
async fn a_firing_defer_timer_drains_the_backlog_in_order() {
    let mut h = backlog(config(), &[10, 11, 12]);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    assert_eq!(h.handler.handled(), [10, 11, 12]);
    let seen = h.handler.seen();
    let payloads: Vec<_> = seen.iter().map(|s| s.payload.clone()).collect();
    let expected: Vec<_> = [10, 11, 12]
        .map(|offset| Some(json!({ "offset": offset })))
        .into();
    assert_eq!(payloads, expected, "each record read back as a message");
    // The head failed once before; the records behind it never ran.
    let attempts: Vec<_> = seen.iter().map(|s| (s.attempt, s.demand)).collect();
    assert_eq!(
        attempts,
        [
            (2, Demand::Failure),
            (1, Demand::Normal),
            (1, Demand::Normal)
        ]
    );
    assert!(h.store.is_empty());
    assert_eq!(
        h.timers.applied(),
        [removed("k", fired)],
        "no new defer timer"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_head_stays_and_its_timer_is_set_again() {
    let mut h = backlog(config(), &[10, 11, 12]);
    h.handler.fail(Some(11), &[Category::Transient]);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    assert_eq!(h.handler.offsets(), [Some(10), Some(11)], "12 waits");
    assert_eq!(h.handler.handled(), [10]);
    assert_eq!(h.store.queue("k"), Some((vec![11, 12], 1)));
    // 11 failed its first attempt: it waits BASE, as a fresh deferral
    // does; the clock is on a whole second.
    let now = clock::now();
    let at = Timestamp::from_millis(now.as_millis() + millis(BASE));
    assert_eq!(h.timers.applied(), [rearmed("k", at, fired)]);
    assert!(at > fired);
    // When that timer fires, 11 (its second attempt) and 12 are handled.
    tokio::time::advance(BASE).await;
    assert_eq!(h.fire("k", at).await.unwrap(), Response::Unhandled);
    assert_eq!(h.handler.handled(), [10, 11, 12]);
    let last: Vec<_> = h.handler.seen()[2..]
        .iter()
        .map(|s| (s.offset, s.attempt, s.demand))
        .collect();
    assert_eq!(
        last,
        [
            (Some(11), 2, Demand::Failure),
            (Some(12), 1, Demand::Normal)
        ]
    );
    assert!(h.store.is_empty());
    assert_eq!(
        h.timers.applied(),
        [rearmed("k", at, fired), removed("k", at)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_short_delay_still_sets_the_next_timer_after_the_firing_one() {
    let base = Duration::from_millis(200);
    let mut h = backlog(DeferConfig { base, ..config() }, &[10]);
    h.handler.fail(Some(10), &[Category::Transient]);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    // 400 ms rounds back to the firing second; the next one is taken.
    let next = Timestamp::from_millis(fired.as_millis() + 1000);
    assert_eq!(h.timers.applied(), [rearmed("k", next, fired)]);
}

#[tokio::test(start_paused = true)]
async fn an_offset_the_log_no_longer_holds_is_skipped() {
    let mut h = backlog(config(), &[11]);
    h.store.put("k", &[10]);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    assert_eq!(h.handler.offsets(), [Some(11)]);
    assert!(h.store.is_empty());
    assert_eq!(h.timers.applied(), [removed("k", fired)]);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_tombstone_is_handled_as_an_excise() {
    let mut h = backlog(config(), &[11]);
    h.store.put("k", &[10]);
    h.loader.put_raw("k", 10, None);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    let seen = h.handler.seen();
    assert_eq!((seen[0].offset, seen[0].timer), (Some(10), None));
    assert_eq!(seen[0].payload, None, "an excise, not a message");
    assert_eq!(h.handler.handled(), [10, 11]);
    assert!(h.store.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_record_of_another_key_is_skipped_and_an_undecodable_one_goes_on() {
    let mut h = backlog(config(), &[12]);
    h.store.put("k", &[10, 11]);
    h.loader.put("other", 10);
    h.loader
        .put_raw("k", 11, Some(bytes::Bytes::from_static(b"{not json")));
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    // 11 reaches the stack below, whose handler service refuses it as a
    // permanent failure of the mode (here the fake takes anything).
    assert_eq!(h.handler.offsets(), [Some(11), Some(12)]);
    assert!(h.store.is_empty());
    assert_eq!(h.timers.applied(), [removed("k", fired)]);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_message_failing_permanently_is_settled_and_skipped() {
    let mut h = backlog(config(), &[10, 11]);
    h.handler.fail(Some(10), &[Category::Permanent]);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    assert_eq!(h.handler.offsets(), [Some(10), Some(11)]);
    assert!(h.store.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_terminal_failure_of_a_deferred_message_keeps_it() {
    let mut h = backlog(config(), &[10, 11]);
    h.handler.fail(Some(10), &[Category::Terminal]);
    let fired = align().await;
    let error = h.fire("k", fired).await.unwrap_err();
    assert_eq!(error.category(), Category::Terminal);
    assert_eq!(h.store.queue("k"), Some((vec![10, 11], 1)));
    assert!(h.timers.applied().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_loader_error_is_retried_later() {
    let mut h = backlog(config(), &[10]);
    h.loader.fail.store(true, Ordering::Relaxed);
    let fired = align().await;
    assert_eq!(h.fire("k", fired).await.unwrap(), Response::Unhandled);
    assert!(h.handler.seen().is_empty());
    assert_eq!(h.store.queue("k"), Some((vec![10], 2)));
    let at = Timestamp::from_millis(fired.as_millis() + 2 * millis(BASE));
    assert_eq!(h.timers.applied(), [rearmed("k", at, fired)]);
}

#[tokio::test(start_paused = true)]
async fn a_defer_timer_firing_during_shutdown_completes_nothing() {
    let mut h = backlog(config(), &[10, 11]);
    let fired = align().await;
    let (request, shutdown) = timer("k", TimerKind::Defer, fired, h.access());
    shutdown.cancel();
    let error = h.send(request).await.unwrap_err();
    assert_eq!(error.category(), Category::Transient);
    assert!(h.handler.seen().is_empty());
    assert_eq!(h.store.queue("k"), Some((vec![10, 11], 1)));
    assert!(h.timers.applied().is_empty());
}
