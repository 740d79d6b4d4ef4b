//! Options for watching a running client: the probe server, librdkafka's
//! statistics, and how handler spans relate to the spans that caused them.

use super::{Cluster, Values};
use crate::env::FromEnv;
use prosody_core::telemetry::Links;
pub use prosody_core::trace::SpanLink;
use std::fmt;
use std::time::Duration;

/// Where the probe server listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbePort {
    /// On this TCP port of every interface (0 picks a free one).
    Port(u16),
    /// No probe server.
    Disabled,
}

impl FromEnv for ProbePort {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("none") {
            return Ok(Self::Disabled);
        }
        text.parse()
            .map(Self::Port)
            .map_err(|e| format!("expected a port number or none: {e}"))
    }
}

impl fmt::Display for ProbePort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Port(port) => write!(f, "{port}"),
            Self::Disabled => f.write_str("none"),
        }
    }
}

impl FromEnv for SpanLink {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "child" => Ok(Self::Child),
            "follows_from" => Ok(Self::FollowsFrom),
            _ => Err("expected child or follows_from".to_owned()),
        }
    }
}

/// The probe server's port unless one is set.
const PROBE_PORT: u16 = 8000;

/// The options resolved.
///
/// Invariant: the statistics interval lies within 1ms..=24h.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observe {
    pub(crate) probe_port: ProbePort,
    /// Whether `probe_port` was set (builder or environment), not defaulted.
    pub(crate) probe_port_set: bool,
    pub(crate) statistics_interval: Duration,
    /// Whether the client records metrics.
    pub(crate) metrics: bool,
    pub(crate) message_spans: SpanLink,
    pub(crate) timer_spans: SpanLink,
}

impl Observe {
    /// How handler spans relate to their causes.
    pub(crate) fn links(&self) -> Links {
        Links {
            message: self.message_spans,
            timer: self.timer_spans,
        }
    }

    /// The port to serve probes on, if any. Mock mode serves them only when
    /// `probe_port` was set: tests should not take port 8000.
    pub(crate) fn probe(&self, cluster: &Cluster) -> Option<u16> {
        match (self.probe_port, cluster) {
            (ProbePort::Disabled, _) => None,
            (ProbePort::Port(_), Cluster::Mock) if !self.probe_port_set => None,
            (ProbePort::Port(port), _) => Some(port),
        }
    }
}

impl Values {
    pub(super) fn observe(&self) -> Observe {
        Observe {
            probe_port: self.probe_port.unwrap_or(ProbePort::Port(PROBE_PORT)),
            probe_port_set: self.probe_port.is_some(),
            statistics_interval: self.statistics_interval,
            metrics: self.metrics_enabled,
            message_spans: self.message_spans,
            timer_spans: self.timer_spans,
        }
    }
}
