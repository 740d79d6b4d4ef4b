//! Requests to named subsystems: a client sends a record and waits for the
//! answers of the subsystems it names (see the README's Requests section).

use crate::client::{ClientError, ProsodyClient};
use crate::config::PeerSettings;
use prosody_core::broker::OutgoingRecord;
use prosody_core::peer::{Asked, PeerId, RequestId};
use prosody_core::{Codec, Key};
use prosody_request::{Inbox, Outcomes};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// Where the answers to a client's requests arrive: its inbox, opened at
/// its first request under a peer id of this client's life.
///
/// Invariant: one inbox per client life; an answer is delivered to it only
/// while its request waits ([`Inbox`]).
#[derive(Debug)]
pub(crate) struct Requests {
    #[allow(dead_code, reason = "the peer endpoint's settings, used once it binds")]
    settings: PeerSettings,
    inbox: OnceCell<Arc<Inbox>>,
}

impl Requests {
    pub(crate) fn new(settings: PeerSettings) -> Self {
        Self {
            settings,
            inbox: OnceCell::new(),
        }
    }

    /// The client's inbox, opened on first use.
    async fn inbox(&self) -> Result<&Arc<Inbox>, ClientError> {
        self.inbox
            .get_or_try_init(|| async {
                let peer =
                    PeerId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
                Ok(Inbox::open(peer))
            })
            .await
    }
}

impl<C: Codec> ProsodyClient<C> {
    /// Sends `payload` to `topic` as a request to `subsystems` and waits up
    /// to `timeout` for their answers: one [`Outcome`] per subsystem named
    /// (duplicates count once), keyed by its name. An answer is the
    /// subsystem's handler's return value, decoded as a `T` (its JSON
    /// form); a subsystem that does not answer in time is a
    /// [`ResponseError::Timeout`].
    ///
    /// The client needs no subscription to send requests. A handler that
    /// awaits a request its own group must handle for the same key waits
    /// until the timeout: its key runs one event at a time.
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidRequest`] for no subsystem, an invalid name or
    /// a zero timeout; [`ClientError::Encode`], [`ClientError::Broker`] when
    /// the record cannot be sent; [`ClientError::ShutDown`] after
    /// shutdown; [`ClientError::Peer`] when the peer endpoint cannot start.
    ///
    /// [`Outcome`]: prosody_request::Outcome
    /// [`ResponseError::Timeout`]: prosody_request::ResponseError::Timeout
    pub async fn request<T, I, N>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        payload: &C::Value,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.check_open()?;
        let bytes = self
            .inner
            .codec
            .encode(payload)
            .map_err(|source| ClientError::Encode {
                topic: topic.to_owned(),
                source,
            })?;
        let key: Key = key.into();
        let record = OutgoingRecord::new(topic, key.as_bytes().to_vec(), bytes);
        self.ask(record, subsystems, timeout).await
    }

    /// Sends an excise record for `key` to `topic` as a request to
    /// `subsystems`, answered by their `on_excise`; otherwise as
    /// [`request`](Self::request).
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub async fn request_excise<T, I, N>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.check_open()?;
        let key: Key = key.into();
        let record = OutgoingRecord::tombstone(topic, key.as_bytes().to_vec());
        self.ask(record, subsystems, timeout).await
    }

    async fn ask<T, I, N>(
        &self,
        record: OutgoingRecord,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        if timeout.is_zero() {
            return Err(ClientError::InvalidRequest(
                "the timeout must be longer than zero".to_owned(),
            ));
        }
        let deadline = Instant::now() + timeout;
        let inbox = self.inner.requests.inbox().await?;
        let id = RequestId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
        let asked = Asked::new(id, inbox.peer(), subsystems)
            .map_err(|error| ClientError::InvalidRequest(error.to_string()))?;
        // Waiting before the record is sent: an answer may come at once.
        let waiter = inbox.wait(&asked);
        self.produce(record, Some(&asked)).await?;
        Ok(waiter.collect(deadline).await)
    }
}
