//! The signals (traces, metrics) and the variables that set each one's
//! export.

use super::Env;

/// A kind of telemetry, exported on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Signal {
    /// Spans.
    Traces,
    /// Instruments' values.
    Metrics,
}

/// A setting given for all signals or for one.
#[derive(Clone, Copy, Debug)]
pub(super) enum Setting {
    Endpoint,
    Protocol,
    Timeout,
    Certificate,
    ClientCertificate,
    ClientKey,
    Insecure,
}

impl Signal {
    /// The name that errors use.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
        }
    }

    /// The variables of a setting: the signal's own first, which wins.
    pub(super) fn variables(self, setting: Setting) -> [&'static str; 2] {
        use Setting as S;
        let own = match (self, setting) {
            (Self::Traces, S::Endpoint) => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            (Self::Traces, S::Protocol) => "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            (Self::Traces, S::Timeout) => "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            (Self::Traces, S::Certificate) => "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            (Self::Traces, S::ClientCertificate) => "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            (Self::Traces, S::ClientKey) => "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
            (Self::Traces, S::Insecure) => "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
            (Self::Metrics, S::Endpoint) => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            (Self::Metrics, S::Protocol) => "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            (Self::Metrics, S::Timeout) => "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            (Self::Metrics, S::Certificate) => "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
            (Self::Metrics, S::ClientCertificate) => {
                "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE"
            }
            (Self::Metrics, S::ClientKey) => "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            (Self::Metrics, S::Insecure) => "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
        };
        let all = match setting {
            S::Endpoint => "OTEL_EXPORTER_OTLP_ENDPOINT",
            S::Protocol => "OTEL_EXPORTER_OTLP_PROTOCOL",
            S::Timeout => "OTEL_EXPORTER_OTLP_TIMEOUT",
            S::Certificate => "OTEL_EXPORTER_OTLP_CERTIFICATE",
            S::ClientCertificate => "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            S::ClientKey => "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            S::Insecure => "OTEL_EXPORTER_OTLP_INSECURE",
        };
        [own, all]
    }

    /// The path an HTTP export appends to `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub(super) fn path(self) -> &'static str {
        match self {
            Self::Traces => "v1/traces",
            Self::Metrics => "v1/metrics",
        }
    }

    /// The variable that names the signal's exporters, and the names it
    /// takes besides `otlp` and `none`.
    pub(super) fn exporters(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Self::Traces => ("OTEL_TRACES_EXPORTER", &[], "otlp or none"),
            // The scrape reader serves Prometheus in any case.
            Self::Metrics => (
                "OTEL_METRICS_EXPORTER",
                &["prometheus"],
                "otlp, prometheus or none",
            ),
        }
    }
}

/// The first of `variables` set to something other than blanks, with its
/// value.
pub(super) fn lookup(env: Env, variables: &[&'static str]) -> Option<(&'static str, String)> {
    variables.iter().find_map(|&variable| {
        env(variable)
            .filter(|value| !value.trim().is_empty())
            .map(|value| (variable, value))
    })
}
