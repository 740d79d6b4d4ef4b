//! How a client with a `subsystem` answers the requests that name it.

use crate::directory::ClientDirectory;
use prosody_core::Settlement;
use prosody_core::peer::{Asked, RequestId};
use prosody_core::runtime::{Answerer, Settled};
use prosody_request::{Answer, Delivery, Inbox, Peers, Reply};
use serde::Serialize;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// Answers as `subsystem` with the responses of a stack whose response type
/// is `R` (the handler's output, as `Option`).
///
/// Invariant: a request is answered with a value only for a response its
/// handler succeeded with ([`Settlement::handled`]), with a failure only
/// for a permanent failure; anything else (a duplicate skipped, a record
/// deferred) is left unanswered, and its requester sees a timeout.
pub(crate) struct Responder<R> {
    subsystem: Arc<str>,
    route: Arc<Peers<ClientDirectory>>,
    /// The sends in flight, which the client's shutdown waits for.
    sending: TaskTracker,
    response: PhantomData<fn(R)>,
}

impl<R> Responder<R> {
    pub(crate) fn new(
        subsystem: Arc<str>,
        route: Arc<Peers<ClientDirectory>>,
        sending: TaskTracker,
    ) -> Self {
        Self {
            subsystem,
            route,
            sending,
            response: PhantomData,
        }
    }
}

impl<R> Answerer for Responder<R>
where
    R: Settlement + Serialize + Send + 'static,
{
    fn answers(&self, asked: &Asked) -> bool {
        asked.names(&self.subsystem)
    }

    fn answer(&self, asked: Asked, settled: Settled) {
        let answer = match settled {
            Settled::Response(response) => {
                let Ok(response) = response.downcast::<R>() else {
                    warn!(id = %asked.id(), "the stack's response is not its declared type; the request is not answered");
                    return;
                };
                if !response.handled() {
                    debug!(id = %asked.id(), "settled without its handler's success; the request is not answered");
                    return;
                }
                match serde_json::to_vec(&*response) {
                    Ok(json) => Answer::Value(json.into()),
                    Err(error) => {
                        Answer::Failed(format!("the response does not serialize as JSON: {error}"))
                    }
                }
            }
            Settled::Failed(message) => Answer::Failed(message),
            _ => return,
        };
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
fn dropped(id: RequestId, delivery: Delivery) {
    if delivery == Delivery::Dropped {
        debug!(%id, "the requester no longer waits for this answer");
    }
}
