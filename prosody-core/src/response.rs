//! How an event settled, as the stack's response says it to the stages
//! outside it and to the runtime.

use crate::clock::Timestamp;
use crate::error::HandlerError;
use crate::peer::Answer;
use serde::Serialize;

/// The handler service's response, which each stage passes up or replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response<T> {
    /// The handler succeeded on a message or an excise, with this output.
    Handled(T),
    /// The event settled without the handler's success: a timer handled,
    /// a duplicate skipped, a record deferred or kept behind its key's
    /// backlog, an event whose changes landed already.
    Unhandled,
    /// The event settled with this failure: routed to the failure topic,
    /// or dropped (best-effort). The message is the one a requester is told;
    /// boxed once more so the response stays two words.
    Failed(Box<String>),
    /// A firing application timer the defer stage put off: it stays stored
    /// and runs again at this time.
    PutOff(Timestamp),
}

// Every stage's future moves the response, eight stages deep: keep it two words.
const _: () = assert!(size_of::<Response<()>>() <= 16);

impl<T> Response<T> {
    /// The handler's output, if it succeeded.
    #[must_use]
    pub fn output(self) -> Option<T> {
        match self {
            Self::Handled(output) => Some(output),
            _ => None,
        }
    }
}

/// What a stack's response says about how its event settled: what the
/// stages outside it and the runtime read of it, and what stages make when
/// they settle an event themselves.
///
/// Invariant: only a handler's success is [`handled`](Settlement::handled),
/// so deduplication records only real successes; a response is put off
/// only when [`put_off`](Settlement::put_off) made it; a request is
/// answered with what [`answer`](Settlement::answer) says, where the
/// response's type is known.
pub trait Settlement: Sized + Send + 'static {
    /// An event settled without the handler's success.
    fn unhandled() -> Self;

    /// An event settled with `error` (routed, or dropped).
    fn failed(error: &HandlerError) -> Self;

    /// A firing application timer put off until `at`.
    fn put_off(at: Timestamp) -> Self;

    /// Whether the handler succeeded.
    fn handled(&self) -> bool;

    /// When the firing timer runs again, if it was put off.
    fn put_off_until(&self) -> Option<Timestamp>;

    /// What a requester of the settled record is told: the handler's
    /// output as JSON, or the failure it settled with; `None` leaves the
    /// request unanswered (a duplicate skipped, a record deferred).
    fn answer(&self) -> Option<Answer>;
}

impl<T: Serialize + Send + 'static> Settlement for Response<T> {
    fn unhandled() -> Self {
        Self::Unhandled
    }

    fn failed(error: &HandlerError) -> Self {
        Self::Failed(Box::new(failure(error)))
    }

    fn put_off(at: Timestamp) -> Self {
        Self::PutOff(at)
    }

    fn handled(&self) -> bool {
        matches!(self, Self::Handled(_))
    }

    fn put_off_until(&self) -> Option<Timestamp> {
        match self {
            Self::PutOff(at) => Some(*at),
            _ => None,
        }
    }

    fn answer(&self) -> Option<Answer> {
        match self {
            Self::Handled(output) => Some(match serde_json::to_vec(output) {
                Ok(json) => Answer::Value(json.into()),
                Err(error) => {
                    Answer::Failed(format!("the response does not serialize as JSON: {error}"))
                }
            }),
            Self::Failed(message) => Some(Answer::Failed(String::clone(message))),
            Self::Unhandled | Self::PutOff(_) => None,
        }
    }
}

/// The message a requester is told of `error`.
pub(crate) fn failure(error: &HandlerError) -> String {
    error.source().to_string()
}

#[cfg(test)]
mod tests {
    use super::{Response, Settlement};
    use crate::clock::Timestamp;
    use crate::error::HandlerError;
    use crate::peer::Answer;

    /// Only a handler's output answers with a value, only a failure with
    /// its message; the rest leave the request unanswered.
    #[test]
    fn a_response_answers_what_it_settled_with() {
        let handled: Response<u8> = Response::Handled(7);
        assert!(handled.handled());
        assert_eq!(handled.answer(), Some(Answer::Value("7".into())));
        let failed = Response::<u8>::failed(&HandlerError::permanent("bad input"));
        assert!(!failed.handled());
        assert_eq!(
            failed.answer(),
            Some(Answer::Failed("bad input".to_owned()))
        );
        let at = Timestamp::from_millis(5_000);
        let put_off = Response::<u8>::put_off(at);
        assert_eq!(put_off.put_off_until(), Some(at));
        assert_eq!(put_off.answer(), None);
        assert_eq!(Response::<u8>::unhandled().answer(), None);
        assert_eq!(handled.put_off_until(), None);
    }
}
