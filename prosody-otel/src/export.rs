//! Each signal's export as the environment asks for it: whether there is
//! one, its protocol, endpoint, timeout and TLS, and the exporter and
//! provider made from them.

use super::failure::{Failure, Recorded, Recording, chain};
use super::signal::{Setting, Signal, lookup};
use super::tls::Tls;
use super::{Env, OtelError, lock};
use crate::scrape::ScrapeReader;
use opentelemetry_otlp::{
    MetricExporter, Protocol, SpanExporter, WithExportConfig as _, WithHttpConfig as _,
    WithTonicConfig as _,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::Mutex;
use std::time::Duration;

/// The time an export may take, by the specification's default.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The time between metric exports, by the specification's default.
const INTERVAL: Duration = Duration::from_secs(60);

/// A signal's OTLP export as the environment asks for it.
#[derive(Debug)]
pub(super) struct Export {
    signal: Signal,
    protocol: Protocol,
    endpoint: String,
    timeout: Duration,
    /// TLS settings, for an `https` endpoint.
    tls: Option<Tls>,
}

impl Export {
    /// The export of `signal`, or none when no endpoint is set for it (or
    /// its exporters are `none`).
    pub(super) fn from_env(env: Env, signal: Signal) -> Result<Option<Self>, OtelError> {
        if !wanted(env, signal)? {
            return Ok(None);
        }
        let [own, all] = signal.variables(Setting::Endpoint);
        let (own, all) = (lookup(env, &[own]), lookup(env, &[all]));
        if own.is_none() && all.is_none() {
            return Ok(None);
        }
        let protocol = protocol(env, signal)?;
        let endpoint = match (own, all) {
            // The signal's own endpoint is used as it is.
            (Some((_, endpoint)), _) => endpoint.trim().to_owned(),
            // gRPC names a service, not a path.
            (None, Some((_, base))) if protocol == Protocol::Grpc => base.trim().to_owned(),
            (None, Some((_, base))) => {
                let base = base.trim();
                let slash = if base.ends_with('/') { "" } else { "/" };
                format!("{base}{slash}{}", signal.path())
            }
            (None, None) => return Ok(None),
        };
        // A gRPC endpoint may omit its scheme: TLS unless it is insecure.
        let endpoint = if protocol == Protocol::Grpc && !endpoint.contains("://") {
            let insecure = lookup(env, &signal.variables(Setting::Insecure))
                .is_some_and(|(_, value)| value.trim().eq_ignore_ascii_case("true"));
            let scheme = if insecure { "http" } else { "https" };
            format!("{scheme}://{endpoint}")
        } else {
            endpoint
        };
        let timeout = millis(env, &signal.variables(Setting::Timeout))?.unwrap_or(TIMEOUT);
        let secure = endpoint
            .get(..6)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https:"));
        let tls = if secure {
            Some(Tls::from_env(env, signal)?)
        } else {
            None
        };
        Ok(Some(Self {
            signal,
            protocol,
            endpoint,
            timeout,
            tls,
        }))
    }

    /// The span exporter.
    fn span_exporter(&self, failure: &Failure) -> Result<SpanExporter, OtelError> {
        let built = if self.protocol == Protocol::Grpc {
            let _runtime = grpc_runtime(self.signal)?.enter();
            let mut builder = SpanExporter::builder()
                .with_tonic()
                .with_endpoint(&self.endpoint)
                .with_timeout(self.timeout);
            if let Some(tls) = &self.tls {
                builder = builder.with_tls_config(tls.tonic());
            }
            builder.build()
        } else {
            SpanExporter::builder()
                .with_http()
                .with_protocol(self.protocol)
                .with_endpoint(&self.endpoint)
                .with_timeout(self.timeout)
                .with_http_client(self.http_client(failure)?)
                .build()
        };
        built.map_err(|e| self.build_error(&e))
    }

    /// The metric exporter: cumulative, as the scrape reader is.
    fn metric_exporter(&self, failure: &Failure) -> Result<MetricExporter, OtelError> {
        let built = if self.protocol == Protocol::Grpc {
            let _runtime = grpc_runtime(self.signal)?.enter();
            let mut builder = MetricExporter::builder()
                .with_tonic()
                .with_temporality(Temporality::Cumulative)
                .with_endpoint(&self.endpoint)
                .with_timeout(self.timeout);
            if let Some(tls) = &self.tls {
                builder = builder.with_tls_config(tls.tonic());
            }
            builder.build()
        } else {
            MetricExporter::builder()
                .with_http()
                .with_temporality(Temporality::Cumulative)
                .with_protocol(self.protocol)
                .with_endpoint(&self.endpoint)
                .with_timeout(self.timeout)
                .with_http_client(self.http_client(failure)?)
                .build()
        };
        built.map_err(|e| self.build_error(&e))
    }

    /// The HTTP client: blocking, so it runs on the SDK's export threads
    /// and never on a tokio worker, with TLS on rustls and ring.
    fn http_client(&self, failure: &Failure) -> Result<Recording, OtelError> {
        let config = match &self.tls {
            Some(tls) => tls.rustls(self.signal)?,
            None => Tls::plain().map_err(|e| self.build_error(&e))?,
        };
        let timeout = self.timeout;
        // Building a blocking client inside an async runtime panics, and
        // the application may call from one: build it on a thread of its own.
        let client = std::thread::Builder::new()
            .name("prosody-otlp-client".to_owned())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .tls_backend_preconfigured(config)
                    .build()
            })
            .map_err(|e| self.build_error(&e))?
            .join()
            .map_err(|_| self.build_error(&"building the HTTP client panicked"))?
            .map_err(|e| self.build_error(&chain(&e)))?;
        Ok(Recording {
            client,
            failure: failure.clone(),
        })
    }

    fn build_error(&self, error: &dyn std::fmt::Display) -> OtelError {
        OtelError::Exporter {
            signal: self.signal.name(),
            reason: error.to_string(),
        }
    }
}

/// Whether the signal's exporters include `otlp` (the default).
fn wanted(env: Env, signal: Signal) -> Result<bool, OtelError> {
    let (variable, others, expected) = signal.exporters();
    let Some((variable, value)) = lookup(env, &[variable]) else {
        return Ok(true);
    };
    let mut otlp = false;
    for name in value.split(',').map(str::trim) {
        match name {
            "otlp" => otlp = true,
            "none" => {}
            other if others.contains(&other) => {}
            _ => {
                return Err(OtelError::Value {
                    variable,
                    value,
                    expected,
                });
            }
        }
    }
    Ok(otlp)
}

/// The signal's protocol: `http/protobuf` unless a variable says otherwise.
fn protocol(env: Env, signal: Signal) -> Result<Protocol, OtelError> {
    let Some((variable, value)) = lookup(env, &signal.variables(Setting::Protocol)) else {
        return Ok(Protocol::HttpBinary);
    };
    match value.trim() {
        "grpc" => Ok(Protocol::Grpc),
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        _ => Err(OtelError::Protocol { variable, value }),
    }
}

/// A positive whole number of milliseconds, if one of `variables` is set.
fn millis(env: Env, variables: &[&'static str]) -> Result<Option<Duration>, OtelError> {
    let Some((variable, value)) = lookup(env, variables) else {
        return Ok(None);
    };
    match value.trim().parse::<u64>() {
        Ok(millis) if millis > 0 => Ok(Some(Duration::from_millis(millis))),
        _ => Err(OtelError::Value {
            variable,
            value,
            expected: "a positive whole number of milliseconds",
        }),
    }
}

/// The process's tracer provider and what its export last failed with.
#[derive(Debug)]
pub(super) struct Traces {
    pub(super) provider: SdkTracerProvider,
    failure: Failure,
}

/// The tracer provider the environment asks for.
pub(super) fn traces(env: Env, resource: Resource) -> Result<Traces, OtelError> {
    let failure = Failure::default();
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let provider = match Export::from_env(env, Signal::Traces)? {
        None => builder.build(),
        Some(export) => builder
            .with_batch_exporter(export.span_exporter(&failure)?)
            .build(),
    };
    Ok(Traces { provider, failure })
}

impl Traces {
    /// Exports the ended spans.
    pub(super) fn flush(&self) -> Result<(), OtelError> {
        self.failure.clear();
        self.provider
            .force_flush()
            .map_err(|e| self.failure.error(Signal::Traces, &e))
    }

    /// Exports the ended spans and stops. The flush comes first: the
    /// SDK's shutdown does not report a failed export.
    pub(super) fn shutdown(&self) -> Result<(), OtelError> {
        let flushed = self.flush();
        let stopped = self
            .provider
            .shutdown()
            .map_err(|e| self.failure.error(Signal::Traces, &e));
        flushed.and(stopped)
    }
}

/// The process's meter provider and what its export last failed with.
#[derive(Debug)]
pub(super) struct Meters {
    pub(super) provider: SdkMeterProvider,
    failure: Failure,
}

/// The meter provider the environment asks for, read by `scrape` too.
pub(super) fn meters(
    env: Env,
    resource: Resource,
    scrape: Option<ScrapeReader>,
) -> Result<Meters, OtelError> {
    let failure = Failure::default();
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    if let Some(scrape) = scrape {
        builder = builder.with_reader(scrape);
    }
    if let Some(export) = Export::from_env(env, Signal::Metrics)? {
        let interval = millis(env, &["OTEL_METRIC_EXPORT_INTERVAL"])?.unwrap_or(INTERVAL);
        let exporter = Recorded {
            exporter: export.metric_exporter(&failure)?,
            failure: failure.clone(),
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(interval)
            .build();
        builder = builder.with_reader(reader);
    }
    Ok(Meters {
        provider: builder.build(),
        failure,
    })
}

impl Meters {
    /// Exports the instruments' current values.
    pub(super) fn flush(&self) -> Result<(), OtelError> {
        self.failure.clear();
        self.provider
            .force_flush()
            .map_err(|e| self.failure.error(Signal::Metrics, &e))
    }

    /// Exports the instruments' values and stops, the flush first as for
    /// traces.
    pub(super) fn shutdown(&self) -> Result<(), OtelError> {
        let flushed = self.flush();
        let stopped = self
            .provider
            .shutdown()
            .map_err(|e| self.failure.error(Signal::Metrics, &e));
        flushed.and(stopped)
    }
}

/// The runtime of the gRPC channels: a thread of its own, so export does
/// not depend on the application's runtime (or on its having one). The
/// SDK's export threads wait on the channels it drives.
fn grpc_runtime(signal: Signal) -> Result<tokio::runtime::Handle, OtelError> {
    static HANDLE: Mutex<Option<tokio::runtime::Handle>> = Mutex::new(None);
    let mut slot = lock(&HANDLE);
    if let Some(handle) = &*slot {
        return Ok(handle.clone());
    }
    let failed = |reason: String| OtelError::Exporter {
        signal: signal.name(),
        reason: format!("the gRPC runtime did not start: {reason}"),
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("prosody-otlp-grpc".to_owned())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => {
                    let _sent = sender.send(Ok(runtime.handle().clone()));
                    runtime.block_on(std::future::pending::<()>());
                }
                Err(e) => {
                    let _sent = sender.send(Err(e.to_string()));
                }
            }
        })
        .map_err(|e| failed(e.to_string()))?;
    let handle = receiver
        .recv()
        .map_err(|e| failed(e.to_string()))?
        .map_err(failed)?;
    *slot = Some(handle.clone());
    Ok(handle)
}
