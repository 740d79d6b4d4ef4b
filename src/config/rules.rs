//! The rules one option's value must keep, each given the option's name
//! for its error (the `check` column of the option table).

use super::{ConfigError, shown};
use crate::env::Size;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn invalid(option: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option,
        reason: reason.into(),
    }
}

pub(crate) fn non_empty(option: &'static str, value: String) -> Result<String, ConfigError> {
    if value.trim().is_empty() {
        return Err(invalid(option, format!("got {value:?}; must not be empty")));
    }
    Ok(value)
}

pub(crate) fn positive_size(
    option: &'static str,
    value: usize,
) -> Result<NonZeroUsize, ConfigError> {
    NonZeroUsize::new(value).ok_or_else(|| invalid(option, "got 0; must be at least 1"))
}

pub(crate) fn positive_duration(
    option: &'static str,
    value: Duration,
) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(invalid(option, "got 0s; must be longer than zero"));
    }
    Ok(value)
}

/// A count that fits the stage's `u32`.
pub(crate) fn small_count(option: &'static str, value: usize) -> Result<u32, ConfigError> {
    u32::try_from(value).map_err(|_| invalid(option, format!("{value} is too large")))
}

/// At least one topic, none of them empty.
pub(crate) fn topics(
    option: &'static str,
    value: Vec<String>,
) -> Result<Vec<Arc<str>>, ConfigError> {
    if value.is_empty() {
        return Err(invalid(option, "must name at least one topic"));
    }
    value
        .into_iter()
        .map(|topic| non_empty(option, topic).map(Arc::from))
        .collect()
}

/// Prefixes, none of them empty.
pub(crate) fn prefixes(
    option: &'static str,
    value: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    if value.iter().any(String::is_empty) {
        return Err(invalid(option, format!("{value:?} has an empty prefix")));
    }
    Ok(value)
}

/// Names, none of them empty.
pub(crate) fn names(option: &'static str, value: Vec<String>) -> Result<Vec<String>, ConfigError> {
    value
        .into_iter()
        .map(|name| non_empty(option, name))
        .collect()
}

/// Within the statistics interval's bounds, as librdkafka accepts them.
pub(crate) fn statistics(option: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    let (low, high) = (Duration::from_millis(1), Duration::from_secs(86_400));
    if !(low..=high).contains(&value) {
        return Err(invalid(
            option,
            format!("{} is not between 1ms and 24h", shown(value)),
        ));
    }
    Ok(value)
}

/// Whole seconds, at least one.
pub(crate) fn whole_seconds(
    option: &'static str,
    value: Duration,
) -> Result<Duration, ConfigError> {
    if value.subsec_nanos() != 0 || value < Duration::from_secs(1) {
        return Err(invalid(
            option,
            format!("got {}; must be whole seconds, at least 1s", shown(value)),
        ));
    }
    Ok(value)
}

/// A path that names something.
pub(crate) fn some_path(option: &'static str, value: PathBuf) -> Result<PathBuf, ConfigError> {
    if value.as_os_str().is_empty() {
        return Err(invalid(option, "must not be empty"));
    }
    Ok(value)
}

/// A positive number of bytes.
pub(crate) fn positive_bytes(option: &'static str, value: Size) -> Result<u64, ConfigError> {
    if value.0 == 0 {
        return Err(invalid(option, "must be positive"));
    }
    Ok(value.0)
}

/// A subsystem name: 1 to 128 bytes of ASCII letters, digits, `-`, `_`
/// and `.`.
pub(crate) fn subsystem(option: &'static str, value: String) -> Result<String, ConfigError> {
    prosody_core::peer::check_subsystem(&value)
        .map_err(|error| invalid(option, error.to_string()))?;
    Ok(value)
}

/// A directory lease: from 5 seconds to 20 years.
pub(crate) fn lease(option: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    const MIN: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(20 * 365 * 24 * 3600);
    if !(MIN..=MAX).contains(&value) {
        return Err(invalid(
            option,
            format!("got {}; must lie between 5s and 20 years", shown(value)),
        ));
    }
    Ok(value)
}

/// An address peers on another network connect to: `host:port` or
/// `http://host:port`, kept as `host:port`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "a rule takes its option's value, as the table gives it"
)]
pub(crate) fn connect(option: &'static str, value: String) -> Result<String, ConfigError> {
    super::connect::normalise(&value)
        .map_err(|reason| invalid(option, format!("got {value:?}: {reason}")))
}
