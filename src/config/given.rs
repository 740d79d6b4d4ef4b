//! Options given by name, as JSON values: how a binding in another
//! language (or a configuration file) sets the builder through the one
//! option table.
//!
//! A value reads as its variable would, with three additions: a number is
//! a number of seconds where the option is a duration, an array of
//! strings is a list, and `null` leaves the option unset (falls back to
//! the environment, then the default), except `probe_port`, where `null`
//! or `false` turns the probe server off.

use super::table::Options;
use super::unknown::nearest_of;
use super::{ConfigError, Mode, ProbePort, ReadTtl, SecurityProtocol, SpanLink};
use super::{GroupProtocol, SaslMechanism, Secret};
use crate::env::{FromEnv, Size};
use prosody_core::state::{Kind, Payload, ReadCache, Spec};
use serde_json::Value;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// A stored option type read from a JSON value.
pub(crate) trait Given: FromEnv {
    /// A number: by default read as its variable would read the digits.
    fn number(number: &serde_json::Number) -> Result<Self, String> {
        Self::parse(&number.to_string())
    }

    /// `true` or `false`: only flags (and options that can be off) take one.
    fn flag(flag: bool) -> Result<Option<Self>, String> {
        Err(format!("expected a value of the option's kind, not {flag}"))
    }

    /// An array of strings: only lists take one.
    fn list(_: &[&str]) -> Result<Self, String> {
        Err("expected a single value, not a list".to_owned())
    }

    /// `null`: the option is left unset, unless it can be off.
    fn null() -> Option<Self> {
        None
    }

    /// A string, read as its variable would.
    fn text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

impl Given for String {}
impl Given for Secret {}
impl Given for usize {}
impl Given for f64 {}
impl Given for Size {}
impl Given for SocketAddr {}
impl Given for GroupProtocol {}
impl Given for SaslMechanism {}
impl Given for SecurityProtocol {}
impl Given for SpanLink {}

impl Given for bool {
    fn flag(flag: bool) -> Result<Option<Self>, String> {
        Ok(Some(flag))
    }
}

impl Given for Vec<String> {
    fn list(items: &[&str]) -> Result<Self, String> {
        Ok(items.iter().map(|item| (*item).to_owned()).collect())
    }
}

impl Given for PathBuf {
    fn text(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
}

impl Given for Duration {
    fn number(number: &serde_json::Number) -> Result<Self, String> {
        seconds(number)
    }
}

impl Given for ReadTtl {
    fn number(number: &serde_json::Number) -> Result<Self, String> {
        seconds(number).and_then(|ttl| Self::parse(&format!("{}ns", ttl.as_nanos())))
    }

    fn flag(flag: bool) -> Result<Option<Self>, String> {
        if flag {
            Err("expected a duration, or false to read the store every time".to_owned())
        } else {
            Ok(Some(ReadTtl::Off))
        }
    }
}

impl Given for ProbePort {
    fn flag(flag: bool) -> Result<Option<Self>, String> {
        if flag {
            Err("expected a port, or null or false to disable".to_owned())
        } else {
            Ok(Some(ProbePort::Disabled))
        }
    }

    fn null() -> Option<Self> {
        Some(ProbePort::Disabled)
    }
}

/// A number of seconds as a duration.
fn seconds(number: &serde_json::Number) -> Result<Duration, String> {
    let value = number.as_f64().unwrap_or(f64::NAN);
    Duration::try_from_secs_f64(value)
        .map_err(|_| "expected a duration: a non-negative number of seconds".to_owned())
}

/// Reads one option's value: `None` leaves it unset.
pub(crate) fn read<T: Given>(
    option: &'static str,
    value: &Value,
) -> Result<Option<T>, ConfigError> {
    let read = match value {
        Value::Null => Ok(T::null()),
        Value::Bool(flag) => T::flag(*flag),
        Value::Number(number) => T::number(number).map(Some),
        Value::String(text) => T::text(text).map(Some),
        Value::Array(items) => strings(items).and_then(|items| T::list(&items)).map(Some),
        Value::Object(_) => Err("expected a single value, not an object".to_owned()),
    };
    read.map_err(|reason| ConfigError::Given {
        option: option.to_owned(),
        value: value.to_string(),
        reason,
    })
}

/// The strings of an array.
fn strings(items: &[Value]) -> Result<Vec<&str>, String> {
    items
        .iter()
        .map(|item| {
            item.as_str()
                .ok_or_else(|| "expected a list of strings".to_owned())
        })
        .collect()
}

impl Options {
    /// Sets the option `name` from a JSON value
    /// ([`ClientBuilder::option`](crate::ClientBuilder::option)).
    pub(crate) fn given(&mut self, name: &str, value: &Value) -> Result<(), ConfigError> {
        match name {
            "mode" => {
                if let Some(mode) = mode(value).map_err(|reason| given(name, value, reason))? {
                    self.mode = Some(mode);
                }
            }
            "state_collections" => {
                self.state_collections =
                    specs(value).map_err(|reason| given(name, value, reason))?;
            }
            _ => self.assign(name, value)?,
        }
        Ok(())
    }
}

impl Options {
    /// The error for a name no option has, naming the nearest option.
    pub(crate) fn unknown(name: &str) -> ConfigError {
        let options = super::table::VARIABLES.iter().map(|(option, _)| *option);
        ConfigError::Unknown {
            option: name.to_owned(),
            nearest: nearest_of(name, options.chain(["mode", "state_collections"])),
        }
    }
}

fn given(option: &str, value: &Value, reason: impl Into<String>) -> ConfigError {
    ConfigError::Given {
        option: option.to_owned(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn mode(value: &Value) -> Result<Option<Mode>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(text) => match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "pipeline" => Ok(Some(Mode::Pipeline)),
            "low-latency" => Ok(Some(Mode::LowLatency)),
            "best-effort" => Ok(Some(Mode::BestEffort)),
            _ => Err("expected pipeline, low-latency or best-effort".to_owned()),
        },
        _ => Err("expected pipeline, low-latency or best-effort".to_owned()),
    }
}

/// The collections of an array of collection objects.
fn specs(value: &Value) -> Result<Vec<Spec>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.iter().map(spec).collect(),
        _ => Err("expected a list of collections".to_owned()),
    }
}

/// One collection from its object form (see `ClientBuilder::option`).
///
/// # Errors
///
/// A message naming the field that is missing or of the wrong type.
pub fn spec(value: &Value) -> Result<Spec, String> {
    let Value::Object(fields) = value else {
        return Err("a collection is an object with a name, a kind and a payload".to_owned());
    };
    let text = |field: &str| match fields.get(field) {
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(format!("collection field `{field}` must be a string")),
    };
    let count = |field: &str| match fields.get(field) {
        Some(Value::Number(number)) => number
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("collection field `{field}` must be a whole number")),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(format!("collection field `{field}` must be a whole number")),
    };
    let flag = |field: &str| match fields.get(field) {
        Some(Value::Bool(flag)) => Ok(*flag),
        None | Some(Value::Null) => Ok(false),
        Some(_) => Err(format!("collection field `{field}` must be true or false")),
    };
    let duration = |field: &str| match fields.get(field) {
        Some(Value::Number(number)) => seconds(number).map(Some),
        Some(Value::String(text)) => Duration::parse(text).map(Some),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(format!("collection field `{field}` must be a duration")),
    };
    let name = text("name")?.ok_or("a collection needs a `name`")?;
    let kind = match text("kind")?.unwrap_or("value") {
        "value" => Kind::Value,
        "map" => Kind::Map,
        "deque" => Kind::Deque,
        other => {
            return Err(format!(
                "collection kind {other:?}: expected value, map or deque"
            ));
        }
    };
    let payload = match text("payload")?.unwrap_or("json") {
        "json" => Payload::Json,
        "message" => Payload::Message,
        other => {
            return Err(format!(
                "collection payload {other:?}: expected json or message"
            ));
        }
    };
    let mut spec = Spec::new(intern(name), kind, payload);
    spec.ttl = duration("ttl")?;
    spec.read_uncommitted = flag("read_uncommitted")?;
    spec.published = flag("published")?;
    spec.read_cache = match fields.get("read_cache") {
        Some(Value::Bool(false)) => ReadCache::Disabled,
        None | Some(Value::Null | Value::Bool(true)) => ReadCache::Inherit,
        Some(_) => duration("read_cache")?.map_or(ReadCache::Inherit, ReadCache::For),
    };
    if let Some(limit) = count("keyset_limit")? {
        spec.keyset_limit = u16::try_from(limit)
            .map_err(|_| format!("keyset_limit {limit} is out of range (0 to 4096)"))?;
    }
    spec.capacity = count("capacity")?;
    Ok(spec)
}

/// A collection name that lives as long as the process: each distinct
/// name is allocated once, however often it is given.
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
