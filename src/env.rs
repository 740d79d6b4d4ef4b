//! Reading options from `PROSODY_*` environment variables.

use std::time::Duration;

/// A value that can be read from an environment variable.
pub(crate) trait FromEnv: Sized {
    fn parse(text: &str) -> Result<Self, String>;
}

impl FromEnv for String {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }
}

impl FromEnv for bool {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("expected true or false".to_owned()),
        }
    }
}

impl FromEnv for usize {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|e| format!("expected a whole number: {e}"))
    }
}

impl FromEnv for f64 {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|e| format!("expected a number: {e}"))
    }
}

impl FromEnv for Duration {
    fn parse(text: &str) -> Result<Self, String> {
        humantime::parse_duration(text.trim())
            .map_err(|e| format!("expected a duration such as 30s or 5m: {e}"))
    }
}

impl FromEnv for std::net::SocketAddr {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|e| format!("expected an address such as 0.0.0.0:9099: {e}"))
    }
}

impl FromEnv for Vec<String> {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// A size in bytes, written as `64 MiB`, `500 MB` or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Size(pub(crate) u64);

impl FromEnv for Size {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse::<bytesize::ByteSize>()
            .map(|size| Self(size.as_u64()))
            .map_err(|e| format!("expected a size such as 64 MiB or 500 MB: {e}"))
    }
}

/// Where option values come from when the builder leaves them unset.
pub(crate) struct Env<F>(F);

/// The process environment.
pub(crate) fn process() -> Env<impl Fn(&str) -> Option<String>> {
    Env(|name: &str| std::env::var(name).ok())
}

/// The names of the process's `PROSODY_*` variables (names that are not
/// Unicode are skipped: no option has one).
pub(crate) fn prosody_names() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with("PROSODY_"))
        .collect()
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// An environment that looks variables up with `lookup`.
    #[cfg(test)]
    pub(crate) fn from_fn(lookup: F) -> Self {
        Self(lookup)
    }

    /// Reads `variable` with `parse`: `None` when unset, an error naming
    /// it when unparsable.
    pub(crate) fn read_with<T>(
        &self,
        variable: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, EnvError> {
        let Some(value) = (self.0)(variable) else {
            return Ok(None);
        };
        parse(&value).map(Some).map_err(|reason| EnvError {
            variable,
            value,
            reason,
        })
    }
}

/// A variable whose value does not parse (a `ConfigError::Environment`).
#[derive(Debug)]
pub(crate) struct EnvError {
    pub(crate) variable: &'static str,
    pub(crate) value: String,
    pub(crate) reason: String,
}

#[cfg(test)]
mod tests {
    use super::{FromEnv, Size};
    use std::time::Duration;

    #[test]
    fn parses_each_kind() {
        assert_eq!(
            <Duration as FromEnv>::parse("20ms"),
            Ok(Duration::from_millis(20))
        );
        assert_eq!(
            <Duration as FromEnv>::parse("7d"),
            Ok(Duration::from_secs(7 * 86_400))
        );
        assert!(<Duration as FromEnv>::parse("soon").is_err());
        assert_eq!(<bool as FromEnv>::parse("TRUE"), Ok(true));
        assert!(<bool as FromEnv>::parse("maybe").is_err());
        assert_eq!(<usize as FromEnv>::parse(" 64 "), Ok(64));
        assert_eq!(Size::parse("64 MiB"), Ok(Size(64 << 20)));
        assert_eq!(Size::parse("500 MB"), Ok(Size(500_000_000)));
        assert_eq!(Size::parse("4096"), Ok(Size(4096)));
        assert!(Size::parse("lots").is_err());
        assert_eq!(
            <Vec<String> as FromEnv>::parse("a, b,,c"),
            Ok(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()])
        );
    }
}
