//! The export, end to end: providers built from an environment map send a
//! span and two instruments to an in-process collector (gRPC or HTTP, plain
//! or over TLS), and each configuration error names its variable.

mod config;
mod process;
mod receiver;

use super::export::{self, Meters, Traces};
use super::{OtelError, resource};
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Tracer as _, TracerProvider as _};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::resource::v1::Resource as Described;
use receiver::{Authority, Got, Receiver, ServerTls};
use std::path::PathBuf;

/// An environment: the variables set, the rest unset.
#[derive(Clone, Default)]
struct Vars(Vec<(&'static str, String)>);

impl Vars {
    fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.0.push((name, value.into()));
        self
    }

    fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .rev()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone())
    }

    /// The providers this environment asks for.
    fn providers(&self) -> Result<(Traces, Meters), OtelError> {
        let env = |name: &str| self.get(name);
        let resource = resource::resource(&env)?;
        Ok((
            export::traces(&env, resource.clone())?,
            export::meters(&env, resource, None)?,
        ))
    }
}

/// A directory of its own for a test's certificates.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("prosody-otel-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A span `work`, 3 on the counter `prosody.test.records` and a histogram
/// value, then a flush of each provider.
fn emit(traces: &Traces, meters: &Meters) -> (Result<(), OtelError>, Result<(), OtelError>) {
    traces
        .provider
        .tracer("prosody-test")
        .in_span("work", |_| {});
    let meter = meters.provider.meter("prosody-test");
    meter
        .u64_counter("prosody.test.records")
        .build()
        .add(3, &[KeyValue::new("topic", "t")]);
    meter
        .f64_histogram("prosody.test.latency")
        .build()
        .record(0.5, &[]);
    (traces.flush(), meters.flush())
}

fn attribute(resource: Option<&Described>, key: &str) -> Option<String> {
    resource?
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Any::StringValue(value) => Some(value.clone()),
            _ => None,
        })
}

/// Checks that `got` holds the span and both instruments, under the
/// service `service`, and returns the paths and encodings they came by.
fn check(got: &[Got], service: &str) -> Vec<(String, &'static str)> {
    let mut span = false;
    let (mut counter, mut histogram) = (false, false);
    let mut ways = Vec::new();
    for got in got {
        match got {
            Got::Spans {
                path,
                encoding,
                request,
            } => {
                ways.push((path.clone(), *encoding));
                for spans in &request.resource_spans {
                    assert_eq!(
                        attribute(spans.resource.as_ref(), "service.name").as_deref(),
                        Some(service)
                    );
                    span |= spans
                        .scope_spans
                        .iter()
                        .flat_map(|scope| &scope.spans)
                        .any(|span| span.name == "work");
                }
            }
            Got::Metrics {
                path,
                encoding,
                request,
            } => {
                ways.push((path.clone(), *encoding));
                for metrics in &request.resource_metrics {
                    assert_eq!(
                        attribute(metrics.resource.as_ref(), "service.name").as_deref(),
                        Some(service)
                    );
                    for metric in metrics.scope_metrics.iter().flat_map(|s| &s.metrics) {
                        match (&*metric.name, &metric.data) {
                            ("prosody.test.records", Some(Data::Sum(sum))) => {
                                counter |= sum
                                    .data_points
                                    .iter()
                                    .any(|point| point.value == Some(Number::AsInt(3)));
                            }
                            ("prosody.test.latency", Some(Data::Histogram(values))) => {
                                histogram |= values.data_points.iter().any(|p| p.count == 1);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    assert!(span, "no span `work` in {got:?}");
    assert!(
        counter && histogram,
        "counter {counter}, histogram {histogram}"
    );
    ways
}

#[test]
fn spans_and_metrics_reach_a_grpc_collector_with_the_resource() {
    let mut collector = Receiver::grpc(None);
    let vars = Vars::default()
        // Without a scheme, an insecure gRPC endpoint is plain HTTP/2.
        .with("OTEL_EXPORTER_OTLP_ENDPOINT", collector.address.to_string())
        .with("OTEL_EXPORTER_OTLP_INSECURE", "true")
        .with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .with("OTEL_SERVICE_NAME", "billing")
        .with(
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=ignored,deployment.environment=test,team=a%2Cb",
        );
    let (traces, meters) = vars.providers().unwrap();
    let (spans, metrics) = emit(&traces, &meters);
    spans.unwrap();
    metrics.unwrap();
    let got = collector.spans_and_metrics();
    let ways = check(&got, "billing");
    assert!(ways.iter().all(|(_, encoding)| *encoding == "grpc"));
    let Some(Got::Spans { request, .. }) = got.iter().find(|g| matches!(g, Got::Spans { .. }))
    else {
        unreachable!("checked above")
    };
    let resource = request.resource_spans[0].resource.as_ref();
    assert_eq!(attribute(resource, "team").as_deref(), Some("a,b"));
    assert_eq!(
        attribute(resource, "deployment.environment").as_deref(),
        Some("test")
    );
    assert_eq!(
        attribute(resource, "telemetry.sdk.language").as_deref(),
        Some("rust")
    );
}

#[test]
fn spans_and_metrics_reach_an_http_collector_as_protobuf_and_json() {
    let mut collector = Receiver::http(None);
    let base = format!("http://{}", collector.address);
    // The general protocol is gRPC; each signal's own wins.
    let vars = Vars::default()
        .with("OTEL_EXPORTER_OTLP_ENDPOINT", format!("{base}/"))
        .with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .with("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
        .with("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
        .with("OTEL_RESOURCE_ATTRIBUTES", "service.name=ledger");
    let (traces, meters) = vars.providers().unwrap();
    let (spans, metrics) = emit(&traces, &meters);
    spans.unwrap();
    metrics.unwrap();
    let mut ways = check(&collector.spans_and_metrics(), "ledger");
    ways.sort();
    ways.dedup();
    assert_eq!(
        ways,
        [
            ("/v1/metrics".to_owned(), "protobuf"),
            ("/v1/traces".to_owned(), "json")
        ]
    );
    // Shutting down exports the metrics once more.
    drop((traces, meters));
    collector.so_far();

    // A signal's own endpoint is used as it is; the default protocol is
    // http/protobuf.
    let vars = Vars::default()
        .with(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("{base}/in/spans"),
        )
        .with(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            format!("{base}/in/metrics"),
        )
        .with("OTEL_SERVICE_NAME", "ledger");
    let (traces, meters) = vars.providers().unwrap();
    let (spans, metrics) = emit(&traces, &meters);
    spans.unwrap();
    metrics.unwrap();
    let mut ways = check(&collector.spans_and_metrics(), "ledger");
    ways.sort();
    ways.dedup();
    assert_eq!(
        ways,
        [
            ("/in/metrics".to_owned(), "protobuf"),
            ("/in/spans".to_owned(), "protobuf")
        ]
    );
}

#[test]
fn tls_with_the_given_authority_reaches_grpc_and_http_collectors() {
    let dir = scratch("trusted");
    let authority = Authority::new(&dir, "authority");
    let stranger = Authority::new(&dir, "stranger");
    let leaf = authority.leaf(&dir, "collector");
    let tls = || ServerTls {
        leaf: &leaf,
        clients: None,
    };

    let mut grpc = Receiver::grpc(Some(tls()));
    let vars = Vars::default()
        .with(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://{}", grpc.address),
        )
        .with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .with("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&authority.pem))
        .with("OTEL_SERVICE_NAME", "secure");
    let (traces, meters) = vars.providers().unwrap();
    let (spans, metrics) = emit(&traces, &meters);
    spans.unwrap();
    metrics.unwrap();
    check(&grpc.spans_and_metrics(), "secure");

    // Each signal's own certificate wins over the general one.
    let mut http = Receiver::http(Some(tls()));
    let vars = Vars::default()
        .with(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://{}", http.address),
        )
        .with("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&stranger.pem))
        .with(
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            path(&authority.pem),
        )
        .with(
            "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
            path(&authority.pem),
        )
        .with("OTEL_SERVICE_NAME", "secure");
    let (traces, meters) = vars.providers().unwrap();
    let (spans, metrics) = emit(&traces, &meters);
    spans.unwrap();
    metrics.unwrap();
    check(&http.spans_and_metrics(), "secure");
}

#[test]
fn tls_with_another_authority_fails_naming_the_unknown_issuer() {
    let dir = scratch("distrusted");
    let authority = Authority::new(&dir, "authority");
    let stranger = Authority::new(&dir, "stranger");
    let leaf = authority.leaf(&dir, "collector");
    for grpc in [true, false] {
        let tls = ServerTls {
            leaf: &leaf,
            clients: None,
        };
        let mut collector = if grpc {
            Receiver::grpc(Some(tls))
        } else {
            Receiver::http(Some(tls))
        };
        let protocol = if grpc { "grpc" } else { "http/protobuf" };
        let vars = Vars::default()
            .with(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", collector.address),
            )
            .with("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .with("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&stranger.pem));
        let (traces, meters) = vars.providers().unwrap();
        let (spans, metrics) = emit(&traces, &meters);
        for (signal, result) in [("traces", spans), ("metrics", metrics)] {
            let error = result.expect_err("a collector of another authority is refused");
            let text = error.to_string();
            println!("{protocol} {signal}: {text}");
            assert!(
                matches!(&error, OtelError::Export { signal: s, .. } if *s == signal),
                "{error:?}"
            );
            assert!(
                text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
                "{protocol} {signal}: {text}"
            );
        }
        // Shutting down exports what is pending, and says it failed.
        traces
            .provider
            .tracer("prosody-test")
            .in_span("late", |_| {});
        for (signal, result) in [
            ("traces", traces.shutdown()),
            ("metrics", meters.shutdown()),
        ] {
            let text = result
                .expect_err("the last export is refused too")
                .to_string();
            assert!(
                text.contains("UnknownIssuer"),
                "{protocol} {signal}: {text}"
            );
        }
        assert!(collector.so_far().is_empty());
    }
}

#[test]
fn mutual_tls_presents_the_client_certificate() {
    let dir = scratch("mutual");
    let authority = Authority::new(&dir, "authority");
    let clients = Authority::new(&dir, "clients");
    let leaf = authority.leaf(&dir, "collector");
    let client = clients.leaf(&dir, "client");
    for grpc in [true, false] {
        let tls = ServerTls {
            leaf: &leaf,
            clients: Some(&clients),
        };
        let mut collector = if grpc {
            Receiver::grpc(Some(tls))
        } else {
            Receiver::http(Some(tls))
        };
        let protocol = if grpc { "grpc" } else { "http/protobuf" };
        let vars = Vars::default()
            .with(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", collector.address),
            )
            .with("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .with("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&authority.pem))
            .with(
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                path(&client.certificate),
            )
            .with("OTEL_EXPORTER_OTLP_CLIENT_KEY", path(&client.key))
            .with("OTEL_SERVICE_NAME", "mutual");
        let (traces, meters) = vars.providers().unwrap();
        let (spans, metrics) = emit(&traces, &meters);
        spans.unwrap_or_else(|e| panic!("{protocol}: {e}"));
        metrics.unwrap_or_else(|e| panic!("{protocol}: {e}"));
        check(&collector.spans_and_metrics(), "mutual");
    }
}

fn path(path: &std::path::Path) -> String {
    path.display().to_string()
}
