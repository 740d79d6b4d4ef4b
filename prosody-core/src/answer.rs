//! How a member answers the requests its records carry: the one place an
//! answer leaves core.

use crate::broker::Record;
use crate::event::{Event, Headers};
use crate::peer::{Answer, Asked};
use std::fmt;
use std::sync::Arc;
use tracing::warn;

/// Answers the requests a member's subsystem is asked, once each request
/// record settles.
///
/// Invariant (the runtime's side): [`answer`](Answerer::answer) is called
/// at most once per settling of a request record this member
/// [`answers`](Answerer::answers), after the attempt's changes are
/// committed, so an answer never reports a success whose changes were
/// lost; it is called by [`send`] alone. A record that does not settle
/// here (revoked, shut down, halted) is not answered: its next owner
/// handles and answers it.
pub trait Answerer: Send + Sync + 'static {
    /// Whether this member answers `asked` (its subsystem is asked).
    fn answers(&self, asked: &Asked) -> bool;

    /// `asked`'s record settled: this is its answer.
    fn answer(&self, asked: Asked, answer: Answer);
}

impl fmt::Debug for dyn Answerer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Answerer")
    }
}

/// Answers `asked` with `answer`, when both are there: a record settled
/// with an answer, and it carries a request `answerer` answers.
pub(crate) fn send(
    answerer: Option<&Arc<dyn Answerer>>,
    asked: Option<&Asked>,
    answer: impl FnOnce() -> Option<Answer>,
) {
    if let (Some(answerer), Some(asked)) = (answerer, asked)
        && let Some(answer) = answer()
    {
        answerer.answer(asked.clone(), answer);
    }
}

/// The request `record` carries, if it is one `answerer` answers. Malformed
/// request headers are logged and the record is handled as an ordinary
/// one.
pub(crate) fn asked(answerer: &Arc<dyn Answerer>, record: &Record) -> Option<Asked> {
    asked_by(
        answerer,
        &record.headers,
        &record.topic,
        record.partition,
        record.offset,
    )
}

/// The request `event` (a record read back from a backlog) carries, if
/// `answerer` answers it.
pub(crate) fn asked_in<P>(answerer: &Arc<dyn Answerer>, event: &Event<P>) -> Option<Asked> {
    match event {
        Event::Message(m) => asked_by(answerer, &m.headers, &m.topic, m.partition, m.offset),
        Event::Excise(e) => asked_by(answerer, &e.headers, &e.topic, e.partition, e.offset),
        Event::Timer(_) => None,
    }
}

/// The request a record's `headers` carry, if `answerer` answers it.
fn asked_by(
    answerer: &Arc<dyn Answerer>,
    headers: &Headers,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Option<Asked> {
    match Asked::read(headers) {
        Ok(Some(asked)) if answerer.answers(&asked) => Some(asked),
        Ok(_) => None,
        Err(error) => {
            warn!(%error, topic, partition, offset,
                "a record's request headers are malformed; it is handled unanswered");
            None
        }
    }
}
