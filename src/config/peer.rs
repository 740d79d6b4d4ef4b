//! The request options: the subsystem a client answers as, and its peer
//! endpoint and directory entry.

use super::Values;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The port the peer endpoint listens on unless told otherwise.
pub(crate) const PEER_PORT: u16 = 9099;

/// A client's request settings.
///
/// Invariant: `subsystem` passes `check_subsystem`; the registration ttl
/// lies within 5 s..=20 years.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerSettings {
    /// The subsystem this client answers as (`None`: it answers nothing).
    pub(crate) subsystem: Option<Arc<str>>,
    /// Where the peer endpoint listens; `None`: the default interface's
    /// address, port 9099.
    pub(crate) bind: Option<SocketAddr>,
    pub(crate) advertised: Option<String>,
    pub(crate) network: Option<String>,
    pub(crate) cache_capacity: NonZeroUsize,
    pub(crate) registration_ttl: Duration,
}

impl PeerSettings {
    /// The address to listen on.
    pub(crate) fn bind_address(&self) -> SocketAddr {
        self.bind
            .unwrap_or_else(|| SocketAddr::new(default_interface(), PEER_PORT))
    }
}

/// The address of the interface that routes outside the host (found
/// without sending anything), else loopback.
pub(crate) fn default_interface() -> IpAddr {
    let routed = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).and_then(|socket| {
        // TEST-NET-1: never reached, only routed.
        socket.connect((Ipv4Addr::new(192, 0, 2, 1), 9))?;
        socket.local_addr()
    });
    match routed {
        Ok(address) if !address.ip().is_unspecified() => address.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

impl Values {
    pub(super) fn peer(&self) -> PeerSettings {
        PeerSettings {
            subsystem: self.subsystem.as_deref().map(Arc::from),
            bind: self.peer_bind_address,
            advertised: self.peer_advertised_connect.clone(),
            network: self.peer_network_name.clone(),
            cache_capacity: self.peer_cache_capacity,
            registration_ttl: self.peer_registration_ttl,
        }
    }
}
