//! How the runtime answers the requests its records carry.

use crate::broker::Record;
use crate::event::Headers;
use prosody_contracts::peer::Asked;
use std::any::Any;
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
/// lost. A record that does not settle here (revoked, shut down, halted)
/// is not answered: its next owner handles and answers it.
pub trait Answerer: Send + Sync + 'static {
    /// Whether this member answers `asked` (its subsystem is asked).
    fn answers(&self, asked: &Asked) -> bool;

    /// `asked`'s record settled with `settled`.
    fn answer(&self, asked: Asked, settled: Settled);
}

impl fmt::Debug for dyn Answerer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Answerer")
    }
}

/// How a request record settled.
#[derive(Debug)]
#[non_exhaustive]
pub enum Settled {
    /// The stack's response, as it returned it (its `S::Response`), once
    /// the attempt committed. A response that is not a handler's success
    /// (a duplicate skipped, a record deferred) is the answerer's to
    /// leave unanswered.
    Response(Box<dyn Any + Send>),
    /// The message of the failure that settled it: permanent, or routed
    /// to the failure topic, or dropped (best-effort).
    Failed(String),
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

/// The request a record's `headers` carry, if `answerer` answers it.
pub(crate) fn asked_by(
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
