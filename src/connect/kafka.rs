//! The Kafka broker (feature `kafka`).

use crate::backend::Backend;
use crate::config::{ConfigError, Settings};
use prosody_core::broker::BrokerError;
use prosody_kafka::{KafkaBroker, KafkaConfig};

/// The Kafka broker of `servers`, with the settings' options and then the
/// caller's librdkafka `properties`, once the cluster answered.
///
/// # Errors
///
/// An invalid setting, or a cluster that refused or did not answer within
/// `connect_timeout` ([`ConfigError::Unreachable`]).
pub(crate) async fn kafka(
    servers: &[String],
    settings: &Settings,
    properties: Vec<(String, String)>,
) -> Result<Backend, ConfigError> {
    let broker = KafkaBroker::new(kafka_config(servers, settings, properties)?);
    broker
        .check(settings.kafka.connect_timeout)
        .await
        .map_err(|e| match e {
            // librdkafka refused a setting (it names which).
            BrokerError::Invalid(reason) => ConfigError::Invalid {
                option: "kafka_property",
                reason,
            },
            e => ConfigError::Unreachable {
                retriable: e.is_retriable(),
                reason: e.to_string(),
            },
        })?;
    Ok(Backend::kafka(broker))
}

/// The settings of the Kafka clients of `servers`: the settings' options,
/// then the caller's librdkafka `properties` (so they win).
///
/// The producer's delivery timeout (librdkafka's `message.timeout.ms`) is
/// `send_timeout`: librdkafka gives a record up when it passes, and a send
/// waits for that verdict, so a send that reports a failure is never
/// delivered afterwards. A `message.timeout.ms` among `properties` wins,
/// and sends then wait for it.
fn kafka_config(
    servers: &[String],
    settings: &Settings,
    properties: Vec<(String, String)>,
) -> Result<KafkaConfig, ConfigError> {
    let invalid = |e: BrokerError| ConfigError::Invalid {
        option: "bootstrap_servers",
        reason: e.to_string(),
    };
    let mut config = KafkaConfig::new(servers.iter().cloned())
        .map_err(invalid)?
        .discard_threshold(settings.qos.loader.discard_threshold)
        .statistics_interval(settings.observe.statistics_interval)
        .delivery_timeout(settings.send_timeout)
        .group_protocol(settings.kafka.group_protocol);
    // Where the user names the authorities themselves (`ssl.ca.pem`, say),
    // no probing for the system's.
    let own_ca = properties.iter().any(|(key, _)| key.starts_with("ssl.ca."));
    for (key, value) in settings.kafka.properties() {
        if !(own_ca && key == "ssl.ca.location") {
            config = config.with(key, value);
        }
    }
    // `kafka_property` comes last, so it wins.
    for (key, value) in properties {
        config = config.with(key, value);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::kafka_config;
    use crate::config::{ConfigError, Options, Settings};
    use crate::env::Env;
    use std::time::Duration;

    fn settings(send_timeout: Duration) -> Result<Settings, ConfigError> {
        Options {
            group_id: Some("g".to_owned()),
            mock: Some(true),
            send_timeout: Some(send_timeout),
            ..Options::default()
        }
        .resolve(&Env::from_fn(|_: &str| None))
    }

    /// The producer gives a record up at `send_timeout` (so a send that
    /// failed is not delivered later), unless a `kafka_property` says
    /// otherwise; its sends wait for whichever holds.
    #[test]
    fn the_delivery_timeout_is_send_timeout_unless_a_property_overrides_it()
    -> Result<(), ConfigError> {
        let servers = ["127.0.0.1:9092".to_owned()];
        let settings = settings(Duration::from_millis(2500))?;
        let derived = kafka_config(&servers, &settings, Vec::new())?;
        assert_eq!(
            derived.effective_delivery_timeout(),
            Duration::from_millis(2500)
        );
        let property = vec![("message.timeout.ms".to_owned(), "60000".to_owned())];
        let overridden = kafka_config(&servers, &settings, property)?;
        assert_eq!(
            overridden.effective_delivery_timeout(),
            Duration::from_secs(60)
        );
        Ok(())
    }
}
