//! `PROSODY_LOG`: the log filter of the subscriber the library installs
//! when the application asks it to.

use super::{Env, OtelError, layer_from, process_env};
use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;

/// The variable of the log filter.
const VARIABLE: &str = "PROSODY_LOG";

/// The filter without the variable.
const DEFAULT: &str = "info";

/// Installs the process's global `tracing` subscriber: logs written to
/// standard output, filtered by `PROSODY_LOG` (a Rust log filter, such as
/// `info` or `prosody=debug`; default `info`), and the OpenTelemetry layer
/// of [`layer`](super::layer), so spans are exported as the `OTEL_*`
/// variables say. The filter applies to both. An application with a
/// subscriber of its own adds [`layer`](super::layer) to it instead, and
/// `PROSODY_LOG` plays no part.
///
/// # Errors
///
/// `PROSODY_LOG` is not a filter; the process already has a global
/// subscriber (which is kept); or the OpenTelemetry layer cannot be made
/// (see [`layer`](super::layer)).
pub fn install() -> Result<(), OtelError> {
    let ansi = std::io::stdout().is_terminal();
    install_from(&process_env, std::io::stdout, ansi)
}

/// Installs the subscriber `env` describes, writing logs to `writer`.
pub(super) fn install_from<W>(env: Env, writer: W, ansi: bool) -> Result<(), OtelError>
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let filter = filter(env)?;
    if tracing::dispatcher::has_been_set() {
        return Err(OtelError::Subscriber);
    }
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(ansi),
        )
        .with(layer_from(env)?);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| OtelError::Subscriber)
}

/// The filter `PROSODY_LOG` gives, `info` without it.
pub(super) fn filter(env: Env) -> Result<EnvFilter, OtelError> {
    let value = env(VARIABLE).filter(|value| !value.trim().is_empty());
    let text = value.as_deref().unwrap_or(DEFAULT);
    EnvFilter::builder()
        .parse(text)
        .map_err(|e| OtelError::Filter {
            variable: VARIABLE,
            value: text.to_owned(),
            reason: e.to_string(),
        })
}
