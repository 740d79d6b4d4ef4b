//! The fairness tests: the split between classes and the wait bound, over
//! long saturated runs on a paused clock.

use super::{Run, Svc, call, config, request, setup, within};
use crate::context::Demand;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Handler durations of a loop: fixed, or pseudo-random in 50..=150 ms.
#[derive(Copy, Clone)]
enum Durations {
    Fixed(u64),
    Random(u64),
}

impl Durations {
    fn next(&mut self) -> u64 {
        match self {
            Self::Fixed(millis) => *millis,
            Self::Random(state) => {
                *state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                50 + (*state >> 33) % 101
            }
        }
    }
}

/// A source that calls one after another until `until`, like the runtime
/// does for one key: on `name`, or on a fresh key per call if `fresh`.
fn spawn_loop(
    service: &Svc,
    name: String,
    fresh: bool,
    class: Demand,
    mut durations: Durations,
    until: Instant,
) -> JoinHandle<()> {
    let service = service.clone();
    tokio::spawn(async move {
        let shutdown = CancellationToken::new();
        let mut n = 0_u64;
        while Instant::now() < until {
            let key = if fresh {
                format!("{name}-{n}")
            } else {
                name.clone()
            };
            n += 1;
            let request = request(&key, class, durations.next(), &shutdown);
            service.clone().oneshot(request).await.unwrap();
        }
    })
}

/// Seconds the calls of `class` ran within `from..to`.
fn ran(runs: &[Run], class: Demand, from: Instant, to: Instant) -> f64 {
    runs.iter()
        .filter(|r| r.class == class)
        .map(|r| {
            r.end
                .min(to)
                .saturating_duration_since(r.start.max(from))
                .as_secs_f64()
        })
        .sum()
}

fn failure_share(runs: &[Run], from: Instant, to: Instant) -> f64 {
    let failure = ran(runs, Demand::Failure, from, to);
    failure / (failure + ran(runs, Demand::Normal, from, to))
}

/// Acceptance 2: saturated by normal and failing keys alike, the failure
/// class gets `failure_weight` (30%) of execution time, within 5 points.
#[tokio::test(start_paused = true)]
async fn failures_get_their_share_of_execution_time_under_saturation() {
    let (_layer, service, probe) = setup(config(4));
    let start = Instant::now();
    let until = start + Duration::from_secs(20 * 60);
    let mut loops = Vec::new();
    for i in 0..8 {
        loops.push(spawn_loop(
            &service,
            format!("n{i}"),
            false,
            Demand::Normal,
            Durations::Random(i),
            until,
        ));
        loops.push(spawn_loop(
            &service,
            format!("f{i}"),
            false,
            Demand::Failure,
            Durations::Random(100 + i),
            until,
        ));
    }
    for handle in loops {
        within(handle).await.unwrap();
    }
    let share = failure_share(&probe.runs(), start + Duration::from_secs(60), until);
    assert!((share - 0.3).abs() <= 0.05, "failure share {share:.3}");
}

/// A class that had nothing to run banks no credit: when failures start
/// after a long stretch of normal work only, they still get about 30% from
/// the first minute on, not everything until they catch up.
#[tokio::test(start_paused = true)]
async fn an_idle_class_banks_no_credit() {
    let (_layer, service, probe) = setup(config(4));
    let start = Instant::now();
    let until = start + Duration::from_secs(12 * 60);
    let failures_from = start + Duration::from_secs(10 * 60);
    let mut loops = Vec::new();
    for i in 0..8 {
        loops.push(spawn_loop(
            &service,
            format!("n{i}"),
            false,
            Demand::Normal,
            Durations::Random(i),
            until,
        ));
    }
    sleep(failures_from - start).await;
    for i in 0..8 {
        loops.push(spawn_loop(
            &service,
            format!("f{i}"),
            false,
            Demand::Failure,
            Durations::Random(100 + i),
            until,
        ));
    }
    for handle in loops {
        within(handle).await.unwrap();
    }
    let share = failure_share(
        &probe.runs(),
        failures_from,
        failures_from + Duration::from_secs(60),
    );
    assert!(
        share <= 0.35,
        "failure share in the first minute {share:.3}"
    );
}

/// Acceptance 3: saturated by hot keys whose calls have waited longer than
/// `max_wait`, a cold key's call runs within `max_wait` plus one handler
/// duration.
#[tokio::test(start_paused = true)]
async fn a_cold_key_behind_hot_keys_waits_at_most_max_wait_plus_one_call() {
    let config = config(2);
    let max_wait = config.max_wait;
    let (_layer, service, probe) = setup(config);
    let call_length = Duration::from_secs(1);
    let until = Instant::now() + Duration::from_secs(15 * 60);
    // 400 hot keys on 2 permits: each hot call waits about 200 s.
    let hot: Vec<_> = (0..400)
        .map(|i| {
            spawn_loop(
                &service,
                format!("hot{i}"),
                false,
                Demand::Normal,
                Durations::Fixed(1_000),
                until,
            )
        })
        .collect();
    sleep(Duration::from_secs(10 * 60)).await;
    let arrived = Instant::now();
    within(call(&service, "cold", Demand::Normal, 1_000))
        .await
        .unwrap();
    let waited = probe.start_of("cold") - arrived;
    assert!(
        waited <= max_wait + call_length,
        "the cold key waited {waited:?}"
    );
    for handle in hot {
        within(handle).await.unwrap();
    }
}

/// Acceptance 3, starvation side: a key with a large virtual time, behind a
/// stream of fresh keys (virtual time zero), still runs within `max_wait`
/// plus one handler duration thanks to the wait boost.
#[tokio::test(start_paused = true)]
async fn a_busy_key_is_not_starved_by_a_stream_of_fresh_keys() {
    let config = config(2);
    let max_wait = config.max_wait;
    let (_layer, service, probe) = setup(config);
    // The busy key runs 100 s, then calls again behind the stream.
    let busy = call(&service, "busy", Demand::Normal, 100_000);
    let until = Instant::now() + Duration::from_secs(10 * 60);
    let stream: Vec<_> = (0..4)
        .map(|i| {
            spawn_loop(
                &service,
                format!("fresh{i}"),
                true,
                Demand::Normal,
                Durations::Fixed(1_000),
                until,
            )
        })
        .collect();
    within(busy).await.unwrap();
    let arrived = Instant::now();
    within(call(&service, "busy", Demand::Normal, 1_000))
        .await
        .unwrap();
    let waited = probe.start_of("busy") - arrived;
    assert!(
        waited <= max_wait + Duration::from_secs(1),
        "the busy key waited {waited:?}"
    );
    for handle in stream {
        within(handle).await.unwrap();
    }
}
