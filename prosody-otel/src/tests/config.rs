//! Configuration: each variable that does not parse is an error naming
//! it, and the resource comes from the environment given.

use super::{Vars, path, scratch};
use crate::{OtelError, log, resource};

#[test]
fn each_configuration_error_names_its_variable() {
    let dir = scratch("errors");
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4318");
    let base = Vars::default().with(endpoint.0, endpoint.1);
    let error = |vars: &Vars| vars.providers().err().map(|e| (e.to_string(), e));

    // Nothing set: nothing to fail.
    assert!(Vars::default().providers().is_ok());

    let (text, e) = error(
        &base
            .clone()
            .with("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "carrier-pigeon"),
    )
    .unwrap();
    assert!(matches!(
        e,
        OtelError::Protocol {
            variable: "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            ..
        }
    ));
    assert!(
        text.contains("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") && text.contains("carrier-pigeon"),
        "{text}"
    );

    let missing = dir.join("missing.pem").display().to_string();
    let (text, e) = error(
        &base
            .clone()
            .with("OTEL_EXPORTER_OTLP_CERTIFICATE", missing.clone()),
    )
    .unwrap();
    assert!(
        matches!(
            e,
            OtelError::TlsFile {
                variable: "OTEL_EXPORTER_OTLP_CERTIFICATE",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        text.contains(&missing) && text.contains("cannot be read"),
        "{text}"
    );

    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let (text, _) = error(
        &base
            .clone()
            .with("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", path(&garbage)),
    )
    .unwrap();
    assert!(
        text.starts_with("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=")
            && text.contains("holds no PEM certificate"),
        "{text}"
    );

    let (text, e) = error(
        &base
            .clone()
            .with("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", path(&garbage)),
    )
    .unwrap();
    assert!(
        matches!(
            e,
            OtelError::ClientIdentity {
                missing: "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                ..
            }
        ),
        "{text}"
    );

    let (text, _) = error(&base.clone().with("OTEL_METRIC_EXPORT_INTERVAL", "1m")).unwrap();
    assert!(
        text.contains("OTEL_METRIC_EXPORT_INTERVAL=\"1m\""),
        "{text}"
    );

    let (text, _) = error(&base.clone().with("OTEL_TRACES_EXPORTER", "zipkin")).unwrap();
    assert!(text.contains("OTEL_TRACES_EXPORTER=\"zipkin\""), "{text}");

    // `none` turns a signal's export off: a bad protocol then goes unread.
    let off = base
        .clone()
        .with("OTEL_TRACES_EXPORTER", "none")
        .with("OTEL_METRICS_EXPORTER", "prometheus")
        .with("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon");
    assert!(off.providers().is_ok());

    let bad = Vars::default().with("PROSODY_LOG", "prosody=loudest");
    let e = log::filter(&|name| bad.get(name)).unwrap_err();
    let text = e.to_string();
    assert!(matches!(
        e,
        OtelError::Filter {
            variable: "PROSODY_LOG",
            ..
        }
    ));
    assert!(text.contains("PROSODY_LOG=\"prosody=loudest\""), "{text}");
    let good = Vars::default().with("PROSODY_LOG", "prosody=debug,info");
    assert!(log::filter(&|name| good.get(name)).is_ok());
}

#[test]
fn the_resource_comes_from_the_environment_given() {
    let get = |vars: Vars| resource::resource(&|name| vars.get(name));
    let named = |vars: Vars| {
        get(vars)
            .unwrap()
            .get(&opentelemetry::Key::new("service.name"))
            .map(|value| value.to_string())
    };
    let attributes = "service.name=from-attributes,k=v%20w";
    assert_eq!(
        named(Vars::default().with("OTEL_RESOURCE_ATTRIBUTES", attributes)).as_deref(),
        Some("from-attributes")
    );
    let both = Vars::default()
        .with("OTEL_RESOURCE_ATTRIBUTES", attributes)
        .with("OTEL_SERVICE_NAME", "from-name");
    assert_eq!(named(both.clone()).as_deref(), Some("from-name"));
    assert_eq!(
        get(both)
            .unwrap()
            .get(&opentelemetry::Key::new("k"))
            .map(|v| v.to_string())
            .as_deref(),
        Some("v w")
    );
    assert!(named(Vars::default()).is_some_and(|name| name.starts_with("unknown_service")));
    let broken = Vars::default().with("OTEL_RESOURCE_ATTRIBUTES", "k=%zz");
    let text = get(broken).unwrap_err().to_string();
    assert!(
        text.starts_with("OTEL_RESOURCE_ATTRIBUTES=\"k=%zz\""),
        "{text}"
    );
}
