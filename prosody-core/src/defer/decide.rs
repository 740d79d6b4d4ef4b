//! What the stage does with an inner call's result, and when a record set
//! aside runs again: the decisions its future and its slow paths share.

use super::{Origin, Shared};
use crate::Settlement;
use crate::clock::{self, Timestamp};
use crate::error::{Category, HandlerError};
use crate::metrics::Action;
use crate::store::timer::{TimerKind, from_seconds};
use futures_util::future::BoxFuture;
use std::time::Duration;

/// A boxed future of the stage's slow paths (deferring, lookups, retries).
pub(crate) type Boxed<R> = BoxFuture<'static, Result<R, HandlerError>>;

/// The second at which a retry `delay` from now is set: the first whole
/// second at or after `now + delay` (timers have second precision, and
/// rounding down could run it early), and after `not_before` (the firing
/// timer's own second, which the runtime removes once the firing settles).
pub(super) fn after(delay: Duration, not_before: Option<Timestamp>) -> Timestamp {
    let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    let due = clock::now().as_millis().saturating_add(delay);
    let second = due.div_euclid(1000) + i64::from(due.rem_euclid(1000) != 0);
    let at = from_seconds(second);
    match not_before {
        Some(fired) if at <= fired => {
            Timestamp::from_millis(fired.as_millis().saturating_add(1000))
        }
        _ => at,
    }
}

/// What to do with the result of an inner call.
pub(super) enum Failed<R> {
    /// Return it as it is (or as an application timer put off).
    Returned(Result<R, HandlerError>),
    /// Defer the record it failed on.
    Defer(HandlerError),
}

/// Counts the result in the gate and decides: a success or a non-transient
/// error returns as is; a transient failure the gate lets through is
/// deferred (a record) or put off (an application timer); any other
/// returns to the retry stage.
pub(super) fn failed<R: Settlement, L>(
    shared: &Shared<L>,
    origin: &Origin,
    result: Result<R, HandlerError>,
) -> Failed<R> {
    let error = match result {
        Ok(response) => {
            shared.record(false);
            return Failed::Returned(Ok(response));
        }
        Err(error) => error,
    };
    let context = origin.context();
    if error.category() != Category::Transient || context.is_shutting_down() {
        return Failed::Returned(Err(error));
    }
    if !shared.record(true) {
        return Failed::Returned(Err(error));
    }
    match (origin, context.work()) {
        (Origin::Record { .. }, _) => Failed::Defer(error),
        // A commit that failed partway may have removed the timer already
        // (its first change): only the retry stage can finish the job.
        (Origin::Timer { .. }, Some(work)) if work.commit_started() => Failed::Returned(Err(error)),
        (Origin::Timer { deferrals, .. }, Some(_)) => {
            let delay = shared.config.backoff().delay(deferrals.saturating_add(1));
            let at = after(delay, None);
            context.meter().count(Action::Deferred);
            tracing::warn!(%error, key = %context.key(), ?delay, kind = ?TimerKind::Application,
                "timer failed; it runs again after the delay");
            Failed::Returned(Ok(R::put_off(at)))
        }
        (Origin::Timer { .. }, None) => Failed::Returned(Err(error)),
    }
}
