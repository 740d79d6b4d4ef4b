//! The simulated service: a handler that follows each record's script and
//! records what happened, for the checker.

use super::scenario::Script;
use prosody_core::clock;
use prosody_core::telemetry::{Lifecycle, TelemetryEvent, TelemetrySink};
use prosody_core::{
    Category, Context, Demand, EventHandler, Excise, HandlerError, Message, Timer, Timestamp,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// How one handler call of a record ended, or the record's routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    Success,
    Transient,
    Permanent,
    /// The call was dropped: past its timeout, or by a crash.
    Abandoned,
    /// Sent to the failure topic (low-latency).
    Routed,
}

/// One entry of the log: what happened to which record, in which attempt
/// and when (milliseconds of the clock).
#[derive(Clone, Debug)]
pub struct Entry {
    pub key: String,
    pub partition: i32,
    pub offset: i64,
    pub n: u64,
    pub what: What,
    pub attempt: u32,
    pub demand: Demand,
    pub started: i64,
    pub ended: i64,
}

/// Everything the members did, across crashes and restarts.
#[derive(Default, Debug)]
pub struct Observed {
    /// Keys with a handler call running now.
    pub in_flight: HashSet<String>,
    pub attempts: HashMap<u64, u32>,
    /// (key, partition, offset, record) of each success, in order.
    pub successes: Vec<(String, i32, i64, u64)>,
    pub succeeded: HashSet<u64>,
    pub failed_for_good: HashSet<u64>,
    /// Timers (key, millis) scheduled by a successful attempt.
    pub timers_kept: BTreeSet<(String, i64)>,
    /// Timers scheduled by a failed attempt.
    pub timers_dropped: BTreeSet<(String, i64)>,
    /// Records sent to the failure topic (low-latency mode).
    pub routed: HashSet<u64>,
    /// Timers cleared by a successful attempt before they fired.
    pub timers_cleared: BTreeSet<(String, i64)>,
    /// Application timers the store accepted (`FaultyTimers`).
    pub timers_written: BTreeSet<(String, i64)>,
    /// (key, millis, fired at millis) of each timer call.
    pub fired: Vec<(String, i64, i64)>,
    pub violations: Vec<String>,
    /// Every call's end, and every routing, in order.
    pub log: Vec<Entry>,
    /// The records that do not decode, by number.
    pub poison: HashSet<u64>,
    /// Where each record was produced: (topic, partition, offset) to its
    /// number.
    pub places: HashMap<(String, i32, i64), u64>,
}

#[derive(Clone, Default)]
pub struct Probe {
    observed: Arc<Mutex<Observed>>,
    pub progress: Arc<Notify>,
}

impl Probe {
    pub fn lock(&self) -> MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `done` holds of what was observed, looking again at each
    /// handler call's end and at least every (virtual) second, for changes
    /// the stores make after the call.
    pub async fn until(&self, done: impl Fn(&Observed) -> bool) {
        loop {
            let notified = self.progress.notified();
            if done(&self.lock()) {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// Takes a key's slot for one call; gives it back however the call ends,
/// a crash that drops the call included. A message call that is dropped
/// before it ends is logged as abandoned.
struct Running {
    probe: Probe,
    key: String,
    /// The record (partition, offset, number), until its call ends.
    record: Option<(i32, i64, u64)>,
    attempt: u32,
    demand: Demand,
    started: i64,
}

impl Running {
    fn start(probe: &Probe, context: &Context, key: &str, record: Option<(i32, i64, u64)>) -> Self {
        let mut observed = probe.lock();
        if !observed.in_flight.insert(key.to_owned()) {
            observed
                .violations
                .push(format!("two calls of key {key} overlapped"));
        }
        Self {
            probe: probe.clone(),
            key: key.to_owned(),
            record,
            attempt: context.attempt(),
            demand: context.demand(),
            started: clock::now().as_millis(),
        }
    }

    /// Logs how the call ended.
    fn end(&mut self, observed: &mut Observed, what: What) {
        if let Some((partition, offset, n)) = self.record.take() {
            observed.log.push(Entry {
                key: self.key.clone(),
                partition,
                offset,
                n,
                what,
                attempt: self.attempt,
                demand: self.demand,
                started: self.started,
                ended: clock::now().as_millis(),
            });
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let probe = self.probe.clone();
        let mut observed = probe.lock();
        self.end(&mut observed, What::Abandoned);
        observed.in_flight.remove(&self.key);
        drop(observed);
        probe.progress.notify_waiters();
    }
}

pub struct SimHandler {
    pub probe: Probe,
}

impl EventHandler for SimHandler {
    type Payload = Script;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Script>,
    ) -> Result<(), HandlerError> {
        let script = message.payload;
        let key = context.key().to_string();
        let record = (message.partition, message.offset, script.n);
        let mut running = Running::start(&self.probe, &context, &key, Some(record));
        let attempt = {
            let mut observed = self.probe.lock();
            let attempt = observed.attempts.entry(script.n).or_default();
            *attempt += 1;
            *attempt
        };
        if script.slow_first && attempt == 1 {
            // Past the attempt timeout: the call is dropped.
            tokio::time::sleep(super::TIMEOUT * 2).await;
        }
        tokio::time::sleep(Duration::from_millis(script.latency_ms)).await;
        if script.clears {
            context.clear_scheduled().map_err(HandlerError::transient)?;
        }
        let timer = script.timer_in.map(|seconds| {
            // Whole seconds, distinct per attempt.
            let now = clock::now().as_millis() / 1000;
            let at = (now + i64::try_from(seconds).unwrap_or(1) + i64::from(attempt)) * 1000;
            (key.clone(), at)
        });
        if let Some((_, at)) = &timer {
            context
                .schedule(Timestamp::from_millis(*at))
                .map_err(HandlerError::transient)?;
        }
        if script.panics && attempt == 1 {
            let mut observed = self.probe.lock();
            observed.timers_dropped.extend(timer);
            running.end(&mut observed, What::Transient);
            drop(observed);
            drop(running);
            panic!("scripted panic");
        }
        let outcome = if script.permanent {
            Err(HandlerError::permanent("scripted permanent failure"))
        } else if attempt <= script.failures {
            Err(HandlerError::transient("scripted failure"))
        } else {
            Ok(())
        };
        let mut observed = self.probe.lock();
        match &outcome {
            Ok(()) => {
                if script.clears {
                    // Its key's timers that have not fired need not fire.
                    let fired: BTreeSet<(String, i64)> = observed
                        .fired
                        .iter()
                        .map(|(key, at, _)| (key.clone(), *at))
                        .collect();
                    let cleared: Vec<(String, i64)> = observed
                        .timers_kept
                        .iter()
                        .filter(|(k, _)| *k == key)
                        .filter(|timer| !fired.contains(*timer))
                        .cloned()
                        .collect();
                    observed.timers_cleared.extend(cleared);
                }
                observed.succeeded.insert(script.n);
                observed
                    .successes
                    .push((key, message.partition, message.offset, script.n));
                observed.timers_kept.extend(timer);
                running.end(&mut observed, What::Success);
            }
            Err(error) => {
                if error.category() == prosody_core::Category::Permanent {
                    observed.failed_for_good.insert(script.n);
                    running.end(&mut observed, What::Permanent);
                } else {
                    running.end(&mut observed, What::Transient);
                }
                observed.timers_dropped.extend(timer);
            }
        }
        drop(observed);
        drop(running);
        outcome
    }

    async fn on_timer(&self, context: Context, timer: Timer) -> Result<(), HandlerError> {
        let key = context.key().to_string();
        let _running = Running::start(&self.probe, &context, &key, None);
        let mut observed = self.probe.lock();
        observed
            .fired
            .push((key, timer.time.as_millis(), clock::now().as_millis()));
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Lifecycle events of the records that do not decode: they never reach
/// the handler, so their permanent failure is seen here.
#[derive(Clone)]
pub struct PoisonSink {
    pub probe: Probe,
}

impl TelemetrySink for PoisonSink {
    fn emit(&self, event: TelemetryEvent) {
        let Lifecycle::Failed { category, .. } = event.lifecycle else {
            return;
        };
        let Some(offset) = event.offset else {
            return;
        };
        let mut observed = self.probe.lock();
        let place = (event.topic.to_string(), event.partition, offset);
        let Some(&n) = observed.places.get(&place) else {
            return;
        };
        if !observed.poison.contains(&n) {
            return;
        }
        if category != Category::Permanent {
            observed.violations.push(format!(
                "record {n}, which does not decode, failed as {category}"
            ));
        }
        observed.failed_for_good.insert(n);
        let at = event.at.as_millis();
        observed.log.push(Entry {
            key: event.key.to_string(),
            partition: event.partition,
            offset,
            n,
            what: What::Permanent,
            attempt: event.attempt,
            demand: event.demand,
            started: at,
            ended: at,
        });
        drop(observed);
        self.probe.progress.notify_waiters();
    }
}
