//! The resource that traces and metrics share: `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES`, read from the environment given (the SDK's
//! own detectors read the process's), and the SDK's name and version.

use super::{Env, OtelError};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;

const ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// The resource the environment describes. The service's name is
/// `OTEL_SERVICE_NAME`, else the `service.name` of
/// `OTEL_RESOURCE_ATTRIBUTES`, else `unknown_service:` and the program's
/// name, as the specification asks.
pub(super) fn resource(env: Env) -> Result<Resource, OtelError> {
    let attributes = match env(ATTRIBUTES) {
        Some(value) => attributes(&value).ok_or(OtelError::Value {
            variable: ATTRIBUTES,
            value,
            expected: "comma-separated key=value pairs, percent-encoded",
        })?,
        None => Vec::new(),
    };
    let named = attributes
        .iter()
        .find(|(key, _)| key == "service.name")
        .map(|(_, value)| value.clone());
    let service = env(SERVICE_NAME)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or(named)
        .unwrap_or_else(unknown_service);
    Ok(Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(
            attributes
                .into_iter()
                .map(|(key, value)| KeyValue::new(key, value)),
        )
        .with_service_name(service)
        .build())
}

/// The pairs of `OTEL_RESOURCE_ATTRIBUTES`, or none if a value is not
/// well percent-encoded (the specification discards the whole variable).
/// An entry without `=` is skipped.
fn attributes(value: &str) -> Option<Vec<(String, String)>> {
    value
        .split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, value)| Some((key.trim().to_owned(), decode(value.trim())?)))
        .filter(|pair| pair.as_ref().is_none_or(|(key, _)| !key.is_empty()))
        .collect()
}

/// `text` with each `%XX` replaced by its byte, if that makes UTF-8.
fn decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail
                .get(..2)
                .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = tail.get(2..)?;
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// `unknown_service:` and the program's name.
fn unknown_service() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_name()?.to_str().map(str::to_owned))
        .map_or_else(
            || "unknown_service".to_owned(),
            |name| format!("unknown_service:{name}"),
        )
}
