//! From resolved settings to backends: the Kafka broker, checked, and the
//! stores, chosen so that nothing defaults to a store that loses data.

use crate::backend::Backend;
use crate::config::{Cluster, ConfigError, Settings};
use crate::stores::ClientStores;
use prosody_cassandra::{CassandraConfig, CassandraStores, ConnectError};
use prosody_core::broker::BrokerError;
use prosody_core::loader::BrokerLoader;
use prosody_core::state::{Registry, StateCache};
use prosody_core::store::timer::SlabSize;
use prosody_kafka::{KafkaBroker, KafkaConfig};
use prosody_memory::{MemoryBroker, MemoryStores};
use std::sync::{Arc, OnceLock};

/// A broker given to the builder.
pub(crate) enum Given {
    /// An in-memory broker: records, and so stores, die with the process.
    Memory(MemoryBroker),
    /// The caller's: records may outlive the process.
    Custom(Backend),
}

/// The in-memory broker every mock client of this process shares, unless
/// the builder names another.
pub(crate) fn shared_mock_broker() -> MemoryBroker {
    static BROKER: OnceLock<MemoryBroker> = OnceLock::new();
    BROKER.get_or_init(MemoryBroker::new).clone()
}

/// The client's stores: the ones given; in memory where records die with
/// the process; else Cassandra with `cassandra_nodes`, else memory only when
/// `memory_stores` says so.
///
/// # Errors
///
/// [`ConfigError::NoDurableStore`] when records outlive the process and no
/// store does; [`ConfigError::Cassandra`] when Cassandra refuses the login
/// or does not answer; [`ConfigError::Invalid`] naming `slab_size` when the
/// group's timers were stored with another slab size.
pub(crate) async fn stores(
    given: Option<ClientStores>,
    broker: Option<&Given>,
    settings: &Settings,
) -> Result<ClientStores, ConfigError> {
    if let Some(stores) = given {
        return Ok(stores);
    }
    let durable = match broker {
        Some(Given::Memory(_)) => false,
        Some(Given::Custom(_)) => true,
        None => settings.cluster != Cluster::Mock,
    };
    if !durable {
        // Mock mode keeps every store in memory, whatever cassandra_nodes
        // says.
        return Ok(ClientStores::new(MemoryStores::new()));
    }
    if !settings.cassandra.nodes.is_empty() {
        return cassandra(settings).await.map(ClientStores::cassandra);
    }
    if settings.memory_stores {
        tracing::warn!(
            "memory_stores is set: timers, deferred records and dedup records are lost when \
             this process stops or its partitions move"
        );
        return Ok(ClientStores::new(MemoryStores::new()));
    }
    Err(ConfigError::NoDurableStore)
}

/// The Cassandra stores of the settings' group: reached and logged in
/// within `connect_timeout`, then migrated (waiting for another client's
/// migration up to two minutes).
async fn cassandra(settings: &Settings) -> Result<CassandraStores, ConfigError> {
    let options = &settings.cassandra;
    let mut config = CassandraConfig::new(options.nodes.iter().cloned())
        .keyspace(options.keyspace.clone())
        .retention(options.retention)
        .defer_cache_size(options.defer_store_cache_size)
        .slab_size(SlabSize::new(settings.runtime.slab_size))
        .recovery_delay(settings.runtime.state.recovery_delay())
        .connect_timeout(settings.kafka.connect_timeout);
    if let (Some(user), Some(password)) = (&options.user, &options.password) {
        config = config.credentials(user.clone(), password.expose());
    }
    if let Some(datacenter) = &options.datacenter {
        config = config.datacenter(datacenter.clone());
    }
    if let Some(rack) = &options.rack {
        config = config.rack(rack.clone());
    }
    CassandraStores::connect(&config, &settings.runtime.group_id)
        .await
        .map_err(|error| match error {
            ConnectError::Invalid { option, reason } => ConfigError::Invalid { option, reason },
            // The group's timers were stored with another slab size.
            error @ ConnectError::SlabSizeChanged { .. } => ConfigError::Invalid {
                option: "slab_size",
                reason: error.to_string(),
            },
            error => ConfigError::Cassandra {
                retriable: error.is_retriable(),
                reason: error.to_string(),
            },
        })
}

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

/// The client's collections, bound to its stores and loader: each
/// collection's identity recorded in (or compared with) the store, and
/// message collections reading back through the client's loader.
pub(crate) async fn state(
    registry: &Registry,
    stores: &ClientStores,
    loader: BrokerLoader<Backend>,
) -> Result<Arc<Registry>, ConfigError> {
    let mut registry = registry.clone();
    registry
        .identify(stores)
        .await
        .map_err(|error| ConfigError::StateStore {
            retriable: error.is_retriable(),
            reason: error.to_string(),
        })?;
    registry.read_messages_with(loader);
    Ok(Arc::new(registry))
}

/// The owners' disk cache of state cells: for clients whose stores are
/// Cassandra's (memory stores are local already), or that name a
/// `state_cache_dir`.
pub(crate) fn state_cache(
    settings: &Settings,
    stores: &ClientStores,
) -> Result<Option<Arc<StateCache>>, ConfigError> {
    let cache = &settings.state_cache;
    if settings.runtime.state.is_empty() || !(stores.is_remote() || cache.dir.is_some()) {
        return Ok(None);
    }
    StateCache::open(cache.dir.as_deref(), cache.memory)
        .map(|cache| Some(Arc::new(cache)))
        .map_err(|error| ConfigError::Invalid {
            option: "state_cache_dir",
            reason: error.to_string(),
        })
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
