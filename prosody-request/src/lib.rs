//! Requests to named subsystems: a record sent to a topic whose answering
//! members each return their handler's output straight to the requester.
//!
//! A request is an ordinary record with request headers
//! ([`Asked`](prosody_contracts::peer::Asked)): its id (128 random bits),
//! the peer the requester waits on, and the subsystems asked. The
//! requester waits in its [`Inbox`] for one answer per subsystem until a
//! deadline; each answering member sends its [`Reply`] once its attempt's
//! changes are committed, to the requester's peer (in this process
//! directly, elsewhere through the peer directory and endpoint).
//!
//! Across processes, an answer travels over cleartext HTTP/2: the
//! requester's [`Endpoint`] serves the replies posted to it into its inbox.
//! An answering member sends its reply with a [`Sender`], which keeps one
//! connection to each peer it talks to. The peer network is trusted: there
//! is no TLS.
//!
//! Invariant 9: each subsystem asked gets exactly one [`Outcome`]; the
//! first answer wins, and a missing one is [`ResponseError::Timeout`].
//!
//! ```
//! use prosody_contracts::peer::{Asked, PeerId, RequestId};
//! use prosody_request::{Answer, Inbox, Outcome, Reply, ResponseError};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let inbox = Inbox::open(PeerId::random()?);
//! let asked = Asked::new(RequestId::random()?, inbox.peer(), ["billing", "inventory"])?;
//! let waiter = inbox.wait(&asked);
//! // The billing member answers (here directly; a remote one through its
//! // peer endpoint); inventory never does.
//! let reply = Reply {
//!     to: asked.reply_to(),
//!     id: asked.id(),
//!     subsystem: "billing".into(),
//!     answer: Answer::Value(r#"{"charged":true}"#.into()),
//! };
//! Inbox::local(reply.to).ok_or("not in this process")?.deliver(reply);
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
//! let outcomes = waiter.collect::<serde_json::Value>(deadline).await;
//! assert_eq!(outcomes["billing"], Outcome::Success(serde_json::json!({"charged": true})));
//! assert_eq!(outcomes["inventory"], Outcome::Failure(ResponseError::Timeout));
//! # Ok(())
//! # }
//! ```

mod endpoint;
mod inbox;
mod outcome;
mod peers;
mod send;
mod wire;

pub use endpoint::{Endpoint, EndpointError, REPLY_PATH, Refusal, Refusals};
pub use inbox::{Inbox, Outcomes, Receipt, Waiter};
pub use outcome::{Outcome, ResponseError};
pub use peers::{Peers, RouteError};
pub use send::{SendError, Sender};
pub use wire::{Answer, MAX_REPLY_BYTES, Reply, WireError};
