//! What the peer endpoint refused, by reason.

use hyper::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why the endpoint refused a peer (the `prosody.reason` of the
/// `prosody.peer.refused` metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// A connection over the limit, closed as soon as accepted.
    Connections,
    /// A body longer than [`MAX_REPLY_BYTES`](crate::MAX_REPLY_BYTES),
    /// stated or sent (`413`).
    BodyTooLarge,
    /// A request that is not a reply: another path (`404`) or method
    /// (`405`), or a body that does not decode (`400`).
    Malformed,
    /// A body that did not arrive in time (`408`), or that the endpoint,
    /// closing, could no longer read (`503`).
    Slow,
}

impl Refusal {
    /// Every reason, in the order of [`as_str`](Self::as_str)'s names.
    pub const ALL: [Self; 4] = [
        Self::Connections,
        Self::BodyTooLarge,
        Self::Malformed,
        Self::Slow,
    ];

    /// The reason's name: `connections`, `body_too_large`, `malformed` or
    /// `slow`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connections => "connections",
            Self::BodyTooLarge => "body_too_large",
            Self::Malformed => "malformed",
            Self::Slow => "slow",
        }
    }

    /// The reason of a request refused with `status`.
    pub(crate) fn of(status: StatusCode) -> Self {
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => Self::BodyTooLarge,
            StatusCode::REQUEST_TIMEOUT | StatusCode::SERVICE_UNAVAILABLE => Self::Slow,
            _ => Self::Malformed,
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Connections => 0,
            Self::BodyTooLarge => 1,
            Self::Malformed => 2,
            Self::Slow => 3,
        }
    }
}

/// An endpoint's refusals by reason.
///
/// Invariant: clones share the counts, which only grow; they outlive the
/// endpoint, so a reader holding them sees every refusal it made.
#[derive(Clone, Debug, Default)]
pub struct Refusals(Arc<[AtomicU64; 4]>);

impl Refusals {
    /// Refusals for `reason` so far.
    #[must_use]
    pub fn count(&self, reason: Refusal) -> u64 {
        self.0[reason.index()].load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, reason: Refusal) {
        self.0[reason.index()].fetch_add(1, Ordering::Relaxed);
    }
}
