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
/// lost; one function of core calls it. A record that does not settle
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

#[cfg(test)]
#[allow(clippy::expect_used, reason = "test code fails loudly")]
mod tests {
    use super::{Answerer, send};
    use crate::peer::{Answer, Asked, PeerId, RequestId};
    use std::sync::{Arc, Mutex};

    /// Keeps every answer it is given.
    #[derive(Default)]
    struct Kept(Mutex<Vec<(Asked, Answer)>>);

    impl Answerer for Kept {
        fn answers(&self, asked: &Asked) -> bool {
            asked.names("billing")
        }

        fn answer(&self, asked: Asked, answer: Answer) {
            self.0.lock().expect("kept").push((asked, answer));
        }
    }

    /// An answer is made only for a settled record that carries a request
    /// and a member that answers: a record that is none pays nothing; one
    /// that is is answered once, with what its settlement says.
    #[test]
    fn an_answer_is_made_and_sent_only_for_a_request() {
        let kept = Arc::new(Kept::default());
        let answerer: Arc<dyn Answerer> = kept.clone();
        let asked = Asked::new(
            RequestId::from_bytes([1; 16]),
            PeerId::from_bytes([2; 16]),
            ["billing"],
        )
        .expect("asked");
        let made = Mutex::new(0);
        let answer = || {
            *made.lock().expect("made") += 1;
            Some(Answer::Value("7".into()))
        };
        send(Some(&answerer), None, answer);
        send(None, Some(&asked), answer);
        assert_eq!(
            *made.lock().expect("made"),
            0,
            "an answer made for no request"
        );
        send(Some(&answerer), Some(&asked), answer);
        send(Some(&answerer), Some(&asked), || None);
        let kept = kept.0.lock().expect("kept");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0], (asked, Answer::Value("7".into())));
    }
}
