//! What peers agree on to answer requests: the identities of a process and
//! of a request, the headers a request record carries, and a peer's entry
//! in the directory (the contract itself is [`PeerDirectory`]).
//!
//! A request is an ordinary record with three headers: its id, the peer
//! its requester waits on, and the subsystems it asks. A member whose
//! subsystem is named answers, once its handler's changes are committed,
//! straight to that peer, which it finds in the directory.
//!
//! ```
//! use prosody_contracts::Headers;
//! use prosody_contracts::peer::{Asked, PeerId, RequestId};
//!
//! let asked = Asked::new(RequestId::random()?, PeerId::random()?, ["billing", "inventory"])?;
//! let mut headers = Headers::new();
//! asked.write(&mut headers);
//! let read = Asked::read(&headers)?.ok_or("not a request record")?;
//! assert_eq!(read, asked);
//! assert!(read.names("billing") && !read.names("shipping"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`PeerDirectory`]: crate::store::PeerDirectory

use crate::event::Headers;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The header holding a request's id.
pub const REQUEST_ID_HEADER: &str = "prosody-request-id";
/// The header holding the peer the requester waits on.
pub const REPLY_TO_HEADER: &str = "prosody-reply-to";
/// The header holding the subsystems a request asks, comma-separated.
pub const SUBSYSTEMS_HEADER: &str = "prosody-subsystems";

/// The longest subsystem name, in bytes.
pub const MAX_SUBSYSTEM_LEN: usize = 128;

/// What a subsystem answers a request with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The handler's output, as JSON text.
    Value(bytes::Bytes),
    /// The failure the request's record settled with, as it displayed.
    Failed(String),
}

/// 128 bits from the system's random source, hex-encoded as 32 lowercase
/// characters.
macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 16]);

        impl $name {
            /// A new id from the system's random source.
            ///
            /// # Errors
            ///
            /// When the system's random source fails.
            pub fn random() -> Result<Self, RandomError> {
                let mut bytes = [0; 16];
                getrandom::fill(&mut bytes).map_err(|error| RandomError(error.to_string()))?;
                Ok(Self(bytes))
            }

            /// The id's 16 bytes.
            #[must_use]
            pub const fn to_bytes(self) -> [u8; 16] {
                self.0
            }

            /// The id of these 16 bytes.
            #[must_use]
            pub const fn from_bytes(bytes: [u8; 16]) -> Self {
                Self(bytes)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(text: &str) -> Result<Self, IdError> {
                parse_hex(text).map(Self).ok_or_else(|| IdError {
                    what: $what,
                    text: text.chars().take(64).collect(),
                })
            }
        }
    };
}

random_id!(
    /// A process's identity among peers: 128 random bits, new for each
    /// client's life, so an answer meant for an earlier life of a process
    /// never reaches a later one.
    PeerId,
    "peer id"
);

random_id!(
    /// A request's identity: 128 random bits, so an answer cannot be
    /// forged for a request without seeing its record.
    RequestId,
    "request id"
);

/// The system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("the system's random source failed: {0}")]
pub struct RandomError(String);

/// Text that is not an id: an id is 32 hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {text:?} is not 32 hex characters")]
pub struct IdError {
    what: &'static str,
    text: String,
}

fn parse_hex(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 32 {
        return None;
    }
    let mut bytes = [0; 16];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(bytes)
}

/// Checks a subsystem name: 1 to [`MAX_SUBSYSTEM_LEN`] bytes of ASCII
/// letters, digits, `-`, `_` and `.`, so a list of names fits a header and
/// reads back the same.
///
/// # Errors
///
/// [`AskedError::Subsystem`], naming the name and what is wrong with it.
pub fn check_subsystem(name: &str) -> Result<(), AskedError> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_SUBSYSTEM_LEN {
        "is longer than 128 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        "holds a character other than ASCII letters, digits, '-', '_' and '.'"
    } else {
        return Ok(());
    };
    Err(AskedError::Subsystem {
        name: name.chars().take(160).collect(),
        problem,
    })
}

/// A request as its record states it: its id, the peer its requester waits
/// on, and the subsystems it asks.
///
/// Invariant: at least one subsystem, each named once and valid
/// ([`check_subsystem`]), kept in the order first given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    id: RequestId,
    reply_to: PeerId,
    subsystems: Arc<[Arc<str>]>,
}

impl Asked {
    /// A request of `subsystems` (duplicates dropped), answered to
    /// `reply_to`.
    ///
    /// # Errors
    ///
    /// [`AskedError::NoSubsystem`] for an empty list;
    /// [`AskedError::Subsystem`] for an invalid name.
    pub fn new<I, N>(id: RequestId, reply_to: PeerId, subsystems: I) -> Result<Self, AskedError>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        let mut names: Vec<Arc<str>> = Vec::new();
        for name in subsystems {
            let name = name.as_ref();
            check_subsystem(name)?;
            if !names.iter().any(|known| &**known == name) {
                names.push(Arc::from(name));
            }
        }
        if names.is_empty() {
            return Err(AskedError::NoSubsystem);
        }
        Ok(Self {
            id,
            reply_to,
            subsystems: names.into(),
        })
    }

    /// The same request, answered to `peer`.
    #[must_use]
    pub fn with_reply_to(mut self, peer: PeerId) -> Self {
        self.reply_to = peer;
        self
    }

    /// The request's id.
    #[must_use]
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The peer the requester waits on.
    #[must_use]
    pub fn reply_to(&self) -> PeerId {
        self.reply_to
    }

    /// The subsystems asked, each once, in the order first given.
    #[must_use]
    pub fn subsystems(&self) -> &[Arc<str>] {
        &self.subsystems
    }

    /// Whether `subsystem` is asked.
    #[must_use]
    pub fn names(&self, subsystem: &str) -> bool {
        self.subsystems.iter().any(|name| &**name == subsystem)
    }

    /// Adds the request's headers (replacing none: a record is given them
    /// once, when it is made).
    pub fn write(&self, headers: &mut Headers) {
        headers.push(REQUEST_ID_HEADER, self.id.to_string().into_bytes());
        headers.push(REPLY_TO_HEADER, self.reply_to.to_string().into_bytes());
        headers.push(SUBSYSTEMS_HEADER, self.subsystems.join(",").into_bytes());
    }

    /// The request a record's headers state: `None` for a record with no
    /// request id (an ordinary record).
    ///
    /// # Errors
    ///
    /// [`AskedError`] naming the header that is missing or malformed, for a
    /// record with a request id whose headers do not state a request.
    pub fn read(headers: &Headers) -> Result<Option<Self>, AskedError> {
        let Some(id) = headers.get(REQUEST_ID_HEADER) else {
            return Ok(None);
        };
        let malformed = |name: &'static str| {
            move |error: IdError| AskedError::Header {
                name,
                problem: error.to_string(),
            }
        };
        let id = text(REQUEST_ID_HEADER, id)?
            .parse()
            .map_err(malformed(REQUEST_ID_HEADER))?;
        let reply_to = headers
            .get(REPLY_TO_HEADER)
            .ok_or(AskedError::Missing(REPLY_TO_HEADER))?;
        let reply_to = text(REPLY_TO_HEADER, reply_to)?
            .parse()
            .map_err(malformed(REPLY_TO_HEADER))?;
        let subsystems = headers
            .get(SUBSYSTEMS_HEADER)
            .ok_or(AskedError::Missing(SUBSYSTEMS_HEADER))?;
        let subsystems = text(SUBSYSTEMS_HEADER, subsystems)?;
        Self::new(id, reply_to, subsystems.split(',')).map(Some)
    }
}

/// A header's value as text.
fn text<'a>(name: &'static str, value: &'a [u8]) -> Result<&'a str, AskedError> {
    std::str::from_utf8(value).map_err(|_| AskedError::Header {
        name,
        problem: "is not UTF-8".to_owned(),
    })
}

/// A request that cannot be made, or a record whose request headers are
/// malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskedError {
    /// A request names no subsystem.
    #[error("a request must name at least one subsystem")]
    NoSubsystem,
    /// A subsystem name is not valid.
    #[error("subsystem name {name:?} {problem}")]
    Subsystem {
        /// The name (its first 160 characters).
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A record with a request id lacks another request header.
    #[error("the request record has no `{0}` header")]
    Missing(&'static str),
    /// A request header's value is malformed.
    #[error("the request record's `{name}` header {problem}")]
    Header {
        /// The header.
        name: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
}

/// Where a peer's endpoint is reached, as it registers in the directory.
///
/// Invariant: `address` is the `host:port` the endpoint listens on; a peer
/// on the same network (`network` equal, or both `None`) connects to it,
/// any other to `advertised` when set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerEntry {
    /// The `host:port` the peer's endpoint listens on.
    pub address: String,
    /// The peer's network (`peer_network_name`), if named.
    pub network: Option<String>,
    /// The address peers on other networks connect to
    /// (`peer_advertised_connect`), if set.
    pub advertised: Option<String>,
}

/// Where a subsystem publishes one keyed-state collection: the group whose
/// handlers own it and the topic whose partitions hold it.
///
/// A publication is written to the directory by the owning group
/// ([`PeerDirectory::publish`]) and read by any client that reads the
/// collection ([`PeerDirectory::publication`]), keyed by `subsystem` and
/// `collection`.
///
/// [`PeerDirectory::publish`]: crate::store::PeerDirectory::publish
/// [`PeerDirectory::publication`]: crate::store::PeerDirectory::publication
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Publication {
    /// The subsystem that publishes the collection.
    pub subsystem: String,
    /// The collection's name.
    pub collection: String,
    /// The owning consumer group.
    pub group: String,
    /// The topic whose partitions hold the collection's cells.
    pub topic: String,
    /// The collection's identity (kind and payload), as `Spec::identity`
    /// records it.
    pub identity: String,
    /// Whether it is published; `false` retires it (readers then fail
    /// rather than read stale data).
    pub published: bool,
}

impl PeerEntry {
    /// The address a peer on `network` connects to.
    #[must_use]
    pub fn address_from(&self, network: Option<&str>) -> &str {
        match (&self.advertised, self.network.as_deref()) {
            (Some(advertised), theirs) if theirs != network => advertised,
            _ => &self.address,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9._-]{1,12}"
    }

    proptest! {
        /// What a record's headers state reads back as it was written.
        #[test]
        fn a_request_reads_back_as_written(
            id in any::<[u8; 16]>(),
            peer in any::<[u8; 16]>(),
            names in proptest::collection::vec(name(), 1..6),
        ) {
            let asked = Asked::new(RequestId::from_bytes(id), PeerId::from_bytes(peer), &names).unwrap();
            let mut headers = Headers::new();
            asked.write(&mut headers);
            prop_assert_eq!(Asked::read(&headers).unwrap(), Some(asked.clone()));
            for name in &names {
                prop_assert!(asked.names(name));
            }
            prop_assert!(asked.subsystems().len() <= names.len());
        }

        /// Any id prints as 32 hex characters and parses back.
        #[test]
        fn ids_parse_back(bytes in any::<[u8; 16]>()) {
            let id = RequestId::from_bytes(bytes);
            let text = id.to_string();
            prop_assert_eq!(text.len(), 32);
            prop_assert_eq!(text.parse::<RequestId>().unwrap(), id);
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let mut headers = Headers::new();
        headers.push(REQUEST_ID_HEADER, b"xyz".to_vec());
        let error = Asked::read(&headers).unwrap_err();
        assert!(error.to_string().contains(REQUEST_ID_HEADER), "{error}");
        let mut headers = Headers::new();
        headers.push(
            REQUEST_ID_HEADER,
            RequestId::from_bytes([7; 16]).to_string(),
        );
        assert_eq!(
            Asked::read(&headers),
            Err(AskedError::Missing(REPLY_TO_HEADER))
        );
        headers.push(REPLY_TO_HEADER, PeerId::from_bytes([1; 16]).to_string());
        headers.push(SUBSYSTEMS_HEADER, b"billing,bad name".to_vec());
        assert!(matches!(
            Asked::read(&headers),
            Err(AskedError::Subsystem { .. })
        ));
        assert_eq!(Asked::read(&Headers::new()), Ok(None));
        assert_eq!(
            Asked::new(
                RequestId::from_bytes([0; 16]),
                PeerId::from_bytes([0; 16]),
                [""; 0]
            ),
            Err(AskedError::NoSubsystem)
        );
    }

    #[test]
    fn a_peer_on_another_network_uses_the_advertised_address() {
        let entry = PeerEntry {
            address: "10.0.0.5:9099".into(),
            network: Some("east".into()),
            advertised: Some("peer.example:443".into()),
        };
        assert_eq!(entry.address_from(Some("east")), "10.0.0.5:9099");
        assert_eq!(entry.address_from(Some("west")), "peer.example:443");
        assert_eq!(entry.address_from(None), "peer.example:443");
        let plain = PeerEntry {
            advertised: None,
            ..entry
        };
        assert_eq!(plain.address_from(None), "10.0.0.5:9099");
    }
}
