//! The error reporter under the whole system: every failed handler call
//! reaches the client's hook exactly once.
//!
//! A watcher right around the handler service records each call that
//! fails (the handler's own failures, its panics, records that do not
//! decode, and commits or store reads that fail around the handler); the
//! hook, installed with `error_reporter` and called by the client's
//! telemetry stage on its report thread, records each report. Once the
//! members are shut down, the two multisets must be equal, and every
//! failure the handler itself logged must be among the reports.

use super::World;
use super::handler::What;
use prosody::report::FailureReport;
use prosody_core::{Encoded, Event, EventRequest, HandlerError};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tower::Service;

/// How long the report threads may take, in real time, to hand over the
/// reports of a scenario's failures.
const PATIENCE: Duration = Duration::from_secs(30);

/// One failed call: kind, topic, partition, offset (none for a timer),
/// key, attempt, category and the error's text.
pub type Failed = (
    &'static str,
    String,
    i32,
    Option<i64>,
    String,
    u32,
    String,
    String,
);

/// Failed calls, as a multiset (kept in arrival order; compared sorted).
#[derive(Clone, Default)]
pub struct Tally(Arc<(Mutex<Vec<Failed>>, Condvar)>);

impl Tally {
    fn push(&self, failed: Failed) {
        let (list, arrived) = &*self.0;
        list.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(failed);
        arrived.notify_all();
    }

    /// The tally, sorted, once it holds `count` entries or `PATIENCE` has
    /// passed.
    fn sorted_once(&self, count: usize) -> Vec<Failed> {
        let (list, arrived) = &*self.0;
        let list = list.lock().unwrap_or_else(PoisonError::into_inner);
        let (list, _) = arrived
            .wait_timeout_while(list, PATIENCE, |list| list.len() < count)
            .unwrap_or_else(PoisonError::into_inner);
        let mut sorted = list.clone();
        sorted.sort();
        sorted
    }

    /// The hook of the clients: each report, tallied.
    pub fn hook(&self) -> impl Fn(&FailureReport) + Send + Sync + 'static {
        let tally = self.clone();
        move |report: &FailureReport| {
            tally.push((
                report.kind,
                report.topic.to_string(),
                report.partition,
                report.offset,
                report.key.to_string(),
                report.attempt,
                report.category.to_string(),
                report.message().to_owned(),
            ));
        }
    }
}

/// The handler service, with each failed call tallied.
#[derive(Clone)]
pub struct Watched<S> {
    pub inner: S,
    pub failed: Tally,
}

impl<S> Service<EventRequest<Encoded>> for Watched<S>
where
    S: Service<EventRequest<Encoded>, Error = HandlerError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = futures_util::future::BoxFuture<'static, Result<S::Response, HandlerError>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<Encoded>) -> Self::Future {
        let context = &request.context;
        let offset = match &request.event {
            Event::Message(message) => Some(message.offset),
            Event::Excise(excise) => Some(excise.offset),
            Event::Timer(_) => None,
        };
        let place = (
            request.event.kind(),
            context.topic().to_string(),
            context.partition(),
            offset,
            context.key().to_string(),
            context.attempt(),
        );
        let call = self.inner.call(request);
        let failed = self.failed.clone();
        Box::pin(async move {
            let result = call.await;
            if let Err(error) = &result {
                let (kind, topic, partition, offset, key, attempt) = place;
                let category = error.category().to_string();
                let text = error.source().to_string();
                failed.push((kind, topic, partition, offset, key, attempt, category, text));
            }
            result
        })
    }
}

/// What one multiset has more of than another.
fn excess<T: Clone + Eq + std::hash::Hash>(of: &[T], over: &[T]) -> Vec<T> {
    let mut counts: HashMap<&T, usize> = HashMap::new();
    for item in over {
        *counts.entry(item).or_default() += 1;
    }
    of.iter()
        .filter(|item| match counts.get_mut(item) {
            Some(count) if *count > 0 => {
                *count -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// Checks, once every member is shut down, that the reports are the
/// failed calls, each once, and include the handler's logged failures.
pub fn check(world: &World) -> Result<(), String> {
    let failed = world.failed.sorted_once(0);
    let reported = world.reported.sorted_once(failed.len());
    let unreported = excess(&failed, &reported);
    let unfailed = excess(&reported, &failed);
    if !unreported.is_empty() || !unfailed.is_empty() {
        return Err(format!(
            "{} failed calls, {} reports: failed calls not reported {unreported:?}; reports of no failed call {unfailed:?}",
            failed.len(),
            reported.len()
        ));
    }
    let observed = world.probe.lock();
    let numbers: Vec<(u64, u32)> = reported
        .iter()
        .filter_map(|(_, topic, partition, offset, _, attempt, _, _)| {
            let place = (topic.clone(), *partition, (*offset)?);
            observed.places.get(&place).map(|n| (*n, *attempt))
        })
        .collect();
    let logged: Vec<(u64, u32)> = observed
        .log
        .iter()
        .filter(|entry| matches!(entry.what, What::Transient | What::Permanent))
        .map(|entry| (entry.n, entry.attempt))
        .collect();
    let missing = excess(&logged, &numbers);
    if !missing.is_empty() {
        return Err(format!(
            "failures the handler logged were not reported: (record, attempt) {missing:?}"
        ));
    }
    Ok(())
}
