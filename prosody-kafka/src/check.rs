//! A bounded check, before a client starts, that the cluster answers and
//! takes this client's credentials. librdkafka retries a refused login or
//! an unreachable broker forever in the background; without this check a
//! misconfigured service would hang in silence instead of failing with
//! the cause.

use crate::KafkaConfig;
use prosody_contracts::broker::BrokerError;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one metadata request of the check may wait.
const STEP: Duration = Duration::from_millis(500);

/// Keeps the last error librdkafka reported, and whether it is one that
/// trying again does not fix (a refused login, a TLS failure).
#[derive(Default)]
struct Watch {
    last: Mutex<Option<String>>,
    fatal: AtomicBool,
}

impl Watch {
    fn last(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn saw(&self, reason: &str, fatal: bool) {
        if fatal {
            self.fatal.store(true, Ordering::Release);
        }
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason.to_owned());
    }
}

/// Whether a librdkafka message reports a refusal that retrying does not
/// fix: a rejected login, a failed certificate check. A connection that
/// merely dropped (a broker restarting, a reset) is never one, whatever
/// step it dropped in.
fn refusal(message: &str) -> bool {
    let dropped = [
        "Disconnected",
        "transport failure",
        "Timed out",
        "timed out",
    ]
    .iter()
    .any(|sign| message.contains(sign));
    let refused = ["Authentication failed", "certificate verify failed"]
        .iter()
        .any(|sign| message.contains(sign));
    refused && !dropped
}

impl ClientContext for Watch {
    /// librdkafka's warnings and errors come here from its own threads, as
    /// they happen: the cause of a refusal is among them.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        use RDKafkaLogLevel::{Alert, Critical, Emerg, Error, Warning};
        if matches!(level, Emerg | Alert | Critical | Error | Warning) {
            self.saw(&format!("{facility}: {message}"), refusal(message));
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let refused_by_code = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::SSL
                    | RDKafkaErrorCode::Fatal
            )
        );
        let dropped = reason.contains("Disconnected") || reason.contains("transport failure");
        self.saw(reason, (refused_by_code && !dropped) || refusal(reason));
    }
}

impl ConsumerContext for Watch {}

/// Asks the cluster for its metadata until it answers, a refusal that
/// retrying does not fix is reported, or `timeout` passes. Blocks: call it
/// off the async runtime.
pub(crate) fn reachable(config: &KafkaConfig, timeout: Duration) -> Result<(), BrokerError> {
    let servers = config.bootstrap_servers();
    let client: BaseConsumer<Watch> = config
        .client(&[])
        .create_with_context(Watch::default())
        .map_err(|error| {
            let error = config.scrub(&error.to_string());
            BrokerError::Invalid(format!("the Kafka client settings are refused: {error}"))
        })?;
    let started = Instant::now();
    loop {
        let Err(error) = client.fetch_metadata(None, STEP) else {
            return Ok(());
        };
        // Serves the error events queued for the client (to `error`).
        let _ = client.poll(Duration::ZERO);
        let watch = client.context();
        let fatal = watch.fatal.load(Ordering::Acquire);
        if fatal || started.elapsed() >= timeout {
            let cause = config.scrub(&watch.last().unwrap_or_else(|| error.to_string()));
            let failure = if fatal {
                format!("Kafka at {servers} refused this client: {cause}")
            } else {
                format!(
                    "Kafka at {servers} did not answer within {timeout:?}: {cause}; the servers are down or unreachable, or the security protocol does not match the listener (a plaintext client on a TLS port, or the reverse)"
                )
            };
            return Err(BrokerError::Backend {
                retriable: !fatal,
                source: failure.into(),
            });
        }
    }
}
