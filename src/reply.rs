//! How a client with a `subsystem` answers the requests that name it.

use crate::directory::ClientDirectory;
use prosody_core::peer::{Answer, Asked, RequestId};
use prosody_core::runtime::Answerer;
use prosody_request::{Inbox, Peers, Receipt, Reply};
use std::sync::Arc;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// Answers as `subsystem`: sends each answer the runtime gives it to its
/// requester, in this process at once, else through the peer directory.
///
/// Invariant: it sends what it is given, once; what a settled record
/// answers (its handler's output, or the failure it settled with; nothing
/// for a duplicate skipped or a record deferred, whose requester sees a
/// timeout) is decided where the response's type is known
/// ([`Settlement::answer`](prosody_core::Settlement::answer)).
pub(crate) struct Responder {
    subsystem: Arc<str>,
    route: Arc<Peers<ClientDirectory>>,
    /// The sends in flight, which the client's shutdown waits for.
    sending: TaskTracker,
}

impl Responder {
    pub(crate) fn new(
        subsystem: Arc<str>,
        route: Arc<Peers<ClientDirectory>>,
        sending: TaskTracker,
    ) -> Self {
        Self {
            subsystem,
            route,
            sending,
        }
    }
}

impl Answerer for Responder {
    fn answers(&self, asked: &Asked) -> bool {
        asked.names(&self.subsystem)
    }

    fn answer(&self, asked: Asked, answer: Answer) {
        let reply = Reply {
            to: asked.reply_to(),
            id: asked.id(),
            subsystem: self.subsystem.to_string(),
            answer,
        };
        // In this process the reply is handed over at once; to another
        // it travels in a task of its own (a directory lookup, then a send
        // bounded by the send timeout), which shutdown waits for.
        if let Some(inbox) = Inbox::local(reply.to) {
            dropped(reply.id, inbox.deliver(reply));
            return;
        }
        let route = Arc::clone(&self.route);
        self.sending.spawn(async move {
            let id = reply.id;
            match route.send(reply).await {
                Ok(delivery) => dropped(id, delivery),
                Err(error) => debug!(%id, %error, "the answer did not reach its requester"),
            }
        });
    }
}

/// Logs an answer its requester no longer waited for.
fn dropped(id: RequestId, delivery: Receipt) {
    if delivery == Receipt::Dropped {
        debug!(%id, "the requester no longer waits for this answer");
    }
}
