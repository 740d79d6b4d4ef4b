//! The answers a process waits for, and the in-process route to them.

use crate::outcome::{Outcome, ResponseError, decode};
use crate::wire::{Answer, Reply};
use prosody_contracts::peer::{Asked, PeerId, RequestId};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Each subsystem asked, with its outcome.
pub type Outcomes<T> = BTreeMap<String, Outcome<T>>;

/// The inboxes of this process, by peer: an answer for one of them is
/// handed over directly, without a socket.
static LOCAL: LazyLock<Mutex<HashMap<PeerId, Weak<Inbox>>>> = LazyLock::new(Mutex::default);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The requests a process waits on, by id, under its peer id.
///
/// Invariant: a request is waited on from [`wait`](Inbox::wait) until its
/// [`Waiter`] is dropped (done, timed out or cancelled), and only then: an
/// answer to any other id, or from a subsystem the request did not ask, is
/// dropped and counted, so its memory is bounded by the requests in flight.
#[derive(Debug)]
pub struct Inbox {
    peer: PeerId,
    waiting: Mutex<HashMap<RequestId, Waiting>>,
    dropped: AtomicU64,
}

/// A request waited on: which of its subsystems answered already, so only
/// a first answer is passed on and the channel holds at most one answer
/// per subsystem.
#[derive(Debug)]
struct Waiting {
    asked: Asked,
    answered: Vec<bool>,
    answers: mpsc::UnboundedSender<(usize, Answer)>,
}

/// What became of a delivered answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receipt {
    /// Handed to the request waiting for it.
    Delivered,
    /// Dropped: it is for another peer, no request of its id waits here
    /// (done, timed out, made by an earlier life of the process, or never
    /// made), its subsystem was not asked, or that subsystem answered
    /// already (the first answer wins).
    Dropped,
}

impl Inbox {
    /// A new inbox under `peer`, reachable in this process while it lives.
    #[must_use]
    pub fn open(peer: PeerId) -> Arc<Self> {
        let inbox = Self::unlisted(peer);
        lock(&LOCAL).insert(peer, Arc::downgrade(&inbox));
        inbox
    }

    /// An inbox this process does not list: replies reach it only through
    /// its endpoint, as from another process.
    pub(crate) fn unlisted(peer: PeerId) -> Arc<Self> {
        Arc::new(Self {
            peer,
            waiting: Mutex::default(),
            dropped: AtomicU64::new(0),
        })
    }

    /// The inbox of `peer`, if it is in this process.
    #[must_use]
    pub fn local(peer: PeerId) -> Option<Arc<Self>> {
        lock(&LOCAL).get(&peer).and_then(Weak::upgrade)
    }

    /// The peer this inbox receives for.
    #[must_use]
    pub fn peer(&self) -> PeerId {
        self.peer
    }

    /// How many answers were dropped ([`Receipt::Dropped`]).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Hands `reply` to the request it answers.
    pub fn deliver(&self, reply: Reply) -> Receipt {
        let delivered = reply.to == self.peer
            && lock(&self.waiting)
                .get_mut(&reply.id)
                .is_some_and(|waiting| {
                    let at = waiting
                        .asked
                        .subsystems()
                        .iter()
                        .position(|name| **name == *reply.subsystem);
                    match at.and_then(|at| Some(at).zip(waiting.answered.get_mut(at))) {
                        Some((at, answered)) if !*answered => {
                            *answered = true;
                            waiting.answers.send((at, reply.answer)).is_ok()
                        }
                        _ => false,
                    }
                });
        if delivered {
            Receipt::Delivered
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(id = %reply.id, subsystem = %reply.subsystem, "an answer nobody waits for was dropped");
            Receipt::Dropped
        }
    }

    /// Starts waiting for the answers to `asked`, which must be addressed
    /// to this inbox's peer; the wait ends when the returned [`Waiter`] is
    /// dropped.
    #[must_use]
    pub fn wait(self: &Arc<Self>, asked: &Asked) -> Waiter {
        let (answers, received) = mpsc::unbounded_channel();
        lock(&self.waiting).insert(
            asked.id(),
            Waiting {
                asked: asked.clone(),
                answered: vec![false; asked.subsystems().len()],
                answers,
            },
        );
        Waiter {
            inbox: Arc::clone(self),
            asked: asked.clone(),
            received,
            began: Instant::now(),
        }
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let mut local = lock(&LOCAL);
        if local
            .get(&self.peer)
            .is_some_and(|inbox| inbox.strong_count() == 0)
        {
            local.remove(&self.peer);
        }
    }
}

/// One request's wait for its answers.
#[derive(Debug)]
pub struct Waiter {
    inbox: Arc<Inbox>,
    asked: Asked,
    received: mpsc::UnboundedReceiver<(usize, Answer)>,
    /// When the wait began.
    began: Instant,
}

impl Waiter {
    /// Each asked subsystem's outcome: its first answer that arrived by
    /// `deadline`, decoded as a `T`, or [`ResponseError::Timeout`]. Later
    /// answers of a subsystem are ignored.
    pub async fn collect<T: DeserializeOwned>(self, deadline: Instant) -> Outcomes<T> {
        self.collect_with(deadline, |_, _, _| {}).await
    }

    /// As [`collect`](Self::collect), telling `answered` each subsystem's
    /// outcome and how long after the wait began it came (the whole wait
    /// for a timeout).
    pub async fn collect_with<T: DeserializeOwned>(
        mut self,
        deadline: Instant,
        mut answered: impl FnMut(&str, &Outcome<T>, Duration),
    ) -> Outcomes<T> {
        let names = self.asked.subsystems().len();
        let mut answers: Vec<Option<(Answer, Duration)>> = vec![None; names];
        let mut missing = names;
        while missing > 0 {
            let Ok(Some((at, answer))) =
                tokio::time::timeout_at(deadline, self.received.recv()).await
            else {
                break;
            };
            if let Some(slot @ None) = answers.get_mut(at) {
                *slot = Some((answer, self.began.elapsed()));
                missing -= 1;
            }
        }
        let waited = self.began.elapsed();
        self.asked
            .subsystems()
            .iter()
            .zip(answers)
            .map(|(name, answer)| {
                let (outcome, after) = match answer {
                    Some((Answer::Value(json), after)) => (decode(&json), after),
                    Some((Answer::Failed(message), after)) => (
                        Outcome::Failure(ResponseError::HandlerFailed { message }),
                        after,
                    ),
                    None => (Outcome::Failure(ResponseError::Timeout), waited),
                };
                answered(name, &outcome, after);
                (name.to_string(), outcome)
            })
            .collect()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        lock(&self.inbox.waiting).remove(&self.asked.id());
    }
}

#[cfg(test)]
mod tests;
