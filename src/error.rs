//! What a client operation reports when it fails.

use prosody_core::CodecError;
use prosody_core::broker::BrokerError;
use prosody_core::state::StateError;

/// A client operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The client was shut down; it accepts no more work.
    #[error("the client is shut down")]
    ShutDown,
    /// `subscribe` was called while a subscription runs.
    #[error("the client is already subscribed; unsubscribe first")]
    AlreadySubscribed,
    /// The client has no topics to consume.
    #[error("the client has no subscribed_topics, so it cannot subscribe")]
    NotConfigured,
    /// A payload could not be encoded.
    #[error("the payload for topic {topic} cannot be encoded: {source}")]
    Encode {
        /// The topic.
        topic: String,
        /// The codec's error.
        source: CodecError,
    },
    /// The broker failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A request that cannot be made: it names no subsystem, or an invalid
    /// one, or its timeout is zero.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A published collection cannot be read: not published, retired,
    /// published as another kind, or the directory failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The peer endpoint, where the answers to this client's requests
    /// arrive, could not be started or registered (in time), or the
    /// system's random source failed to make an id.
    #[error("the peer endpoint cannot receive answers: {0}")]
    Peer(String),
}
