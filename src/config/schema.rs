//! What one row of the option table (`table.rs`) becomes: a field of
//! `Options`, a builder setter documented with its variable and default,
//! its layering (builder, then environment, then default) and its own
//! rule, and, for the tests, its row in the precedence property and in
//! the check of `CONFIGURATION.md`.
//!
//! A row reads
//!
//! ```text
//! /// What the option means: the setter's documentation.
//! name: shape, "PROSODY_VARIABLE", presence, check rule => Resolved, test(sample, |s| reader);
//! ```
//!
//! - `shape`: the type the builder takes, or one of the shapes whose
//!   setter takes something handier: `text` (`impl Into<String>`), `secret`
//!   (`impl Into<String>`, kept as a [`Secret`](super::Secret)), `list`
//!   (any iterator of strings; comma-separated in the environment), `path`
//!   (`impl Into<PathBuf>`, trimmed in the environment), `dir` (the same,
//!   read verbatim), `bytes` (`u64`; `64 MiB` in the environment), `port`
//!   (`u16`, a [`ProbePort`](super::ProbePort)).
//! - `presence`: `default("1s")`, the default as the environment writes it
//!   and parsed the same way; `required`; `optional`, no value unless one
//!   is set; or `derived("4m")`, no value unless one is set, the resolution
//!   deriving it from other options (`"4m"` is what the document shows).
//! - `check rule` (optional): `fn(&'static str, T) -> Result<U, ConfigError>`,
//!   given the option's name for its error; `=> U` when `U` is not `T`.
//! - `test(sample, |s| reader)` (optional): a valid value rendered from a
//!   seed, and the resolved value rendered from the settings. Rows
//!   without it need other options to be valid: `tests.rs` covers them.
//!
//! Each option's rule sees only its own value. The rules between options
//! (`max_retry_delay` not below `retry_base`, the SASL settings that come
//! together, ...) are in the resolution of their group.

use super::ConfigError;

/// The option table: the `Options` struct (the rows' fields and the extra
/// fields given), `Values` (each row layered and checked), the setters,
/// and the tests' views of the rows.
macro_rules! options {
    (
        $(#[$meta:meta])*
        pub(crate) struct Options {
            $( $(#[$xmeta:meta])* $xname:ident: $xty:ty, )*
        }
        $(
            $(#[$doc:meta])*
            $name:ident: $shape:ident, $variable:literal, $presence:ident $(($default:literal))?
            $(, check $rule:path $(=> $out:ty)?)?
            $(, test($sample:expr, |$s:ident| $read:expr))?;
        )*
    ) => {
        $(#[$meta])*
        pub(crate) struct Options {
            $( pub(crate) $name: Option<$crate::config::schema::stored!($shape)>, )*
            $( $(#[$xmeta])* pub(crate) $xname: $xty, )*
        }

        /// The options layered (builder, environment, default), each
        /// checked by its own rule.
        pub(crate) struct Values {
            $(
                pub(crate) $name: $crate::config::schema::resolved!(
                    $presence [$crate::config::schema::stored!($shape)] [$($rule $(=> $out)?)?]
                ),
            )*
        }

        impl Options {
            /// Takes each option from the builder, else the environment,
            /// else its default, and checks it; the extra fields stay.
            pub(crate) fn layer<F: Fn(&str) -> Option<String>>(
                &mut self,
                env: &$crate::env::Env<F>,
            ) -> Result<Values, $crate::config::ConfigError> {
                Ok(Values {
                    $(
                        $name: $crate::config::schema::layered!(
                            self.$name.take(), env, stringify!($name), $variable,
                            $crate::config::schema::parser!($shape),
                            [$presence $(($default))?] [$($rule)?]
                        ),
                    )*
                })
            }
        }

        impl Options {
            /// Sets the row `name` from a JSON value (see
            /// `ClientBuilder::option`).
            pub(crate) fn assign(
                &mut self,
                name: &str,
                value: &::serde_json::Value,
            ) -> Result<(), $crate::config::ConfigError> {
                match name {
                    $(
                        stringify!($name) => {
                            self.$name = $crate::config::given::read::<
                                $crate::config::schema::stored!($shape)
                            >(stringify!($name), value)?;
                        }
                    )*
                    _ => return Err(Self::unknown(name)),
                }
                Ok(())
            }
        }

        /// Every row's option and variable.
        pub(crate) const VARIABLES: &[(&str, &str)] = &[$((stringify!($name), $variable),)*];

        /// Every row as `CONFIGURATION.md` lists it.
        #[cfg(test)]
        pub(crate) const LISTED: &[$crate::config::schema::Listed] = &[$(
            $crate::config::schema::Listed {
                option: stringify!($name),
                variable: $variable,
                default: $crate::config::schema::documented!($presence $(($default))?),
            },
        )*];

        /// The rows the precedence property runs over.
        #[cfg(test)]
        pub(crate) fn rows() -> Vec<$crate::config::precedence::Row> {
            [$(
                $crate::config::schema::test_row!(
                    $name, $variable, $shape, [$presence $(($default))?], [$($sample, |$s| $read)?]
                ),
            )*]
            .into_iter()
            .flatten()
            .collect()
        }
    };
}

/// The builder's setters of the option table's rows (`option_rows!`),
/// each documented with its variable and default: expanded where the
/// builder is, so that `ClientBuilder` is the builder's own name there.
macro_rules! setters {
    (
        $(#[$meta:meta])*
        pub(crate) struct Options {
            $( $(#[$xmeta:meta])* $xname:ident: $xty:ty, )*
        }
        $(
            $(#[$doc:meta])*
            $name:ident: $shape:ident, $variable:literal, $presence:ident $(($default:literal))?
            $(, check $rule:path $(=> $out:ty)?)?
            $(, test($sample:expr, |$s:ident| $read:expr))?;
        )*
    ) => {
        impl<C> ClientBuilder<C> {
            $(
                $crate::config::schema::setter! {
                    [
                        $(#[$doc])*
                        #[doc = ""]
                        #[doc = $crate::config::schema::env_doc!($variable, $presence $(($default))?)]
                    ]
                    $name: $shape
                }
            )*
        }
    };
}

/// The type a shape keeps.
macro_rules! stored {
    (text) => { ::std::string::String };
    (secret) => { $crate::config::Secret };
    (list) => { ::std::vec::Vec<::std::string::String> };
    (path) => { ::std::path::PathBuf };
    (dir) => { ::std::path::PathBuf };
    (bytes) => { $crate::env::Size };
    (port) => { $crate::config::ProbePort };
    ($ty:ident) => { $ty };
}

/// How a shape reads its variable (and its default).
macro_rules! parser {
    (dir) => {
        |text: &str| <String as $crate::env::FromEnv>::parse(text).map(::std::path::PathBuf::from)
    };
    ($shape:ident) => {
        <$crate::config::schema::stored!($shape) as $crate::env::FromEnv>::parse
    };
}

/// The type of a resolved option: its rule's output, optional unless it
/// has a default or is required.
macro_rules! resolved {
    (default $($rest:tt)*) => { $crate::config::schema::resolved!(@value $($rest)*) };
    (required $($rest:tt)*) => { $crate::config::schema::resolved!(@value $($rest)*) };
    (optional $($rest:tt)*) => { Option<$crate::config::schema::resolved!(@value $($rest)*)> };
    (derived $($rest:tt)*) => { Option<$crate::config::schema::resolved!(@value $($rest)*)> };
    (@value [$ty:ty] [$rule:path => $out:ty]) => { $out };
    (@value [$ty:ty] [$($rule:path)?]) => { $ty };
}

/// One option layered and checked.
macro_rules! layered {
    ($given:expr, $env:ident, $option:expr, $variable:literal, $parse:expr,
     [$($presence:tt)*] [$($rule:path)?]) => {{
        let parse = $parse;
        let given = match $given {
            Some(value) => Some(value),
            None => $env.read_with($variable, parse)?,
        };
        $crate::config::schema::checked!(
            $crate::config::schema::present!(given, $option, $variable, parse, $($presence)*),
            $option, [$($presence)*] $(, $rule)?
        )
    }};
}

/// The value after the default or the requirement.
macro_rules! present {
    ($given:ident, $option:expr, $variable:literal, $parse:ident, default($default:literal)) => {
        match $given {
            Some(value) => value,
            None => $crate::config::schema::default_of($option, $default, $parse)?,
        }
    };
    ($given:ident, $option:expr, $variable:literal, $parse:ident, required) => {
        $given.ok_or($crate::config::ConfigError::Missing {
            option: $option,
            variable: $variable,
        })?
    };
    ($given:ident, $option:expr, $variable:literal, $parse:ident, $presence:ident $($rest:tt)*) => {
        $given
    };
}

/// The value after its rule, if it has one.
macro_rules! checked {
    ($value:expr, $option:expr, [optional $($rest:tt)*], $rule:path) => {
        $value.map(|value| $rule($option, value)).transpose()?
    };
    ($value:expr, $option:expr, [derived $($rest:tt)*], $rule:path) => {
        $value.map(|value| $rule($option, value)).transpose()?
    };
    ($value:expr, $option:expr, [$($presence:tt)*], $rule:path) => {
        $rule($option, $value)?
    };
    ($value:expr, $option:expr, [$($presence:tt)*]) => {
        $value
    };
}

/// The setter's last paragraph: the variable, and the default if it is
/// a plain one.
macro_rules! env_doc {
    ($variable:literal, default($default:literal)) => {
        concat!(
            "Environment variable `",
            $variable,
            "`; default `",
            $default,
            "`."
        )
    };
    ($variable:literal, required) => {
        concat!("Environment variable `", $variable, "`; required.")
    };
    ($variable:literal, $presence:ident $($rest:tt)*) => {
        concat!("Environment variable `", $variable, "`.")
    };
}

/// The builder method of a shape.
macro_rules! setter {
    ([$($doc:tt)*] $name:ident: text) => {
        $($doc)*
        pub fn $name(mut self, value: impl Into<String>) -> Self {
            self.options_mut().$name = Some(value.into());
            self
        }
    };
    ([$($doc:tt)*] $name:ident: secret) => {
        $($doc)*
        pub fn $name(mut self, value: impl Into<String>) -> Self {
            self.options_mut().$name = Some($crate::config::Secret::new(value));
            self
        }
    };
    ([$($doc:tt)*] $name:ident: list) => {
        $($doc)*
        pub fn $name<I: IntoIterator<Item = T>, T: Into<String>>(mut self, values: I) -> Self {
            self.options_mut().$name = Some(values.into_iter().map(Into::into).collect());
            self
        }
    };
    ([$($doc:tt)*] $name:ident: path) => {
        $crate::config::schema::setter! { [$($doc)*] $name: dir }
    };
    ([$($doc:tt)*] $name:ident: dir) => {
        $($doc)*
        pub fn $name(mut self, path: impl Into<::std::path::PathBuf>) -> Self {
            self.options_mut().$name = Some(path.into());
            self
        }
    };
    ([$($doc:tt)*] $name:ident: bytes) => {
        $($doc)*
        pub fn $name(mut self, bytes: u64) -> Self {
            self.options_mut().$name = Some($crate::env::Size(bytes));
            self
        }
    };
    ([$($doc:tt)*] $name:ident: port) => {
        $($doc)*
        pub fn $name(mut self, port: u16) -> Self {
            self.options_mut().$name = Some($crate::config::ProbePort::Port(port));
            self
        }
    };
    ([$($doc:tt)*] $name:ident: $ty:ident) => {
        $($doc)*
        pub fn $name(mut self, value: $ty) -> Self {
            self.options_mut().$name = Some(value);
            self
        }
    };
}

/// The default `CONFIGURATION.md` shows, if it is a value.
#[cfg(test)]
macro_rules! documented {
    (default($default:literal)) => {
        Some($default)
    };
    (derived($default:literal)) => {
        Some($default)
    };
    ($presence:ident) => {
        None
    };
}

/// A row of the precedence property, for rows with samples.
#[cfg(test)]
macro_rules! test_row {
    ($name:ident, $variable:literal, $shape:ident, [$($presence:tt)*], []) => { None };
    ($name:ident, $variable:literal, $shape:ident, [$($presence:tt)*],
     [$sample:expr, |$s:ident| $read:expr]) => {
        Some($crate::config::precedence::Row {
            option: stringify!($name),
            variable: $variable,
            default: $crate::config::schema::documented!($($presence)*),
            value: $sample,
            set: $crate::config::schema::set!($name: $shape),
            get: |$s: &$crate::config::Settings| $read,
        })
    };
}

/// Sets a row's option through its builder method, from a rendered value.
#[cfg(test)]
macro_rules! set {
    ($name:ident: $shape:ident) => {
        |builder: $crate::config::precedence::Builder, text: &str| {
            $crate::config::schema::set!(@call builder, $name, $shape, text)
        }
    };
    (@call $b:ident, $name:ident, text, $t:ident) => {
        $b.$name($crate::config::precedence::parse::<String>($t))
    };
    (@call $b:ident, $name:ident, secret, $t:ident) => {
        $b.$name($crate::config::precedence::parse::<String>($t))
    };
    (@call $b:ident, $name:ident, dir, $t:ident) => {
        $b.$name($crate::config::precedence::parse::<String>($t))
    };
    (@call $b:ident, $name:ident, bytes, $t:ident) => {
        $b.$name($crate::config::precedence::parse::<$crate::env::Size>($t).0)
    };
    (@call $b:ident, $name:ident, port, $t:ident) => {
        match $crate::config::precedence::parse::<$crate::config::ProbePort>($t) {
            $crate::config::ProbePort::Port(port) => $b.$name(port),
            $crate::config::ProbePort::Disabled => $b.disable_probe(),
        }
    };
    (@call $b:ident, $name:ident, $shape:ident, $t:ident) => {
        $b.$name($crate::config::precedence::parse::<$crate::config::schema::stored!($shape)>($t))
    };
}

pub(crate) use {
    checked, env_doc, layered, options, parser, present, resolved, setter, setters, stored,
};
#[cfg(test)]
pub(crate) use {documented, set, test_row};

/// An option's default, parsed as its variable would be.
pub(crate) fn default_of<T>(
    option: &'static str,
    text: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    parse(text).map_err(|reason| ConfigError::Invalid {
        option,
        reason: format!("its default {text:?} does not parse: {reason}"),
    })
}

/// A row as `CONFIGURATION.md` lists it.
#[cfg(test)]
pub(crate) struct Listed {
    pub(crate) option: &'static str,
    pub(crate) variable: &'static str,
    /// The default as written, when it is a value.
    pub(crate) default: Option<&'static str>,
}
