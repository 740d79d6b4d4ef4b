//! From resolved settings to backends: the Kafka broker, checked, and the
//! stores, chosen so that nothing defaults to a store that loses data.

use crate::backend::Backend;
use crate::config::{Cluster, ConfigError, Settings};
use crate::directory::{ClientDirectory, Rebind};
use prosody_core::broker::Broker;
use prosody_core::loader::BrokerLoader;
use prosody_core::metrics::{Metered, Metrics};
use prosody_core::state::Registry;
use prosody_core::store::{AnyStores, Stores};
use prosody_memory::MemoryStores;
use prosody_state::{CacheLookups, CachedStores, StateCache};
use std::sync::Arc;

#[cfg(feature = "cassandra")]
mod cassandra;
#[cfg(feature = "kafka")]
mod kafka;

#[cfg(feature = "kafka")]
pub(crate) use kafka::kafka;

/// Without the `kafka` feature there is no Kafka broker: a client that is
/// not in mock mode and names no broker of its own cannot be built.
#[cfg(not(feature = "kafka"))]
#[allow(clippy::unused_async)]
pub(crate) async fn kafka(
    _servers: &[String],
    _settings: &Settings,
    _properties: Vec<(String, String)>,
) -> Result<Backend, ConfigError> {
    Err(no_kafka())
}

/// A client on Kafka, in a build without the `kafka` feature.
#[cfg(not(feature = "kafka"))]
fn no_kafka() -> ConfigError {
    ConfigError::Invalid {
        option: "bootstrap_servers",
        reason: "this build has no Kafka broker: enable the `kafka` feature of prosody, \
                 set mock, or give the builder a broker"
            .to_owned(),
    }
}

/// A backend's stores as chosen, with their type: [`Backing::compose`]
/// wraps them once.
pub(crate) enum Backing {
    Memory(MemoryStores),
    #[cfg(feature = "cassandra")]
    Cassandra(prosody_cassandra::CassandraStores),
    Given(Given),
}

/// Stores given to the builder, kept with their type until composed.
pub(crate) type Given =
    Box<dyn FnOnce(&Metrics, &Settings) -> Result<Composed, ConfigError> + Send + Sync>;

/// The client's stores as its runtime and readers use them.
pub(crate) struct Composed {
    /// The backend's, metered, under the keyed-state cache when the client
    /// has collections, erased once.
    pub(crate) stores: AnyStores,
    /// How the cache answered, when there is one.
    pub(crate) lookups: Option<CacheLookups>,
}

impl Backing {
    /// The chosen stores, wrapped ([`compose`]).
    pub(crate) fn compose(
        self,
        metrics: &Metrics,
        settings: &Settings,
    ) -> Result<Composed, ConfigError> {
        match self {
            Self::Memory(stores) => compose(stores, metrics, settings),
            #[cfg(feature = "cassandra")]
            Self::Cassandra(stores) => compose(stores, metrics, settings),
            Self::Given(given) => given(metrics, settings),
        }
    }
}

/// `stores`, metered, under the partition owners' cache of state cells
/// ([`CachedStores`]) for clients with collections (others read no cell),
/// and erased: one pointer, and one boxed future for each read that waits.
/// Measured below the cache, so a read it answers is no store operation.
/// The cache's disk tier is for clients whose stores are durable (memory
/// stores are local already), or that name a `state_cache_dir`.
pub(crate) fn compose<S: Stores>(
    stores: S,
    metrics: &Metrics,
    settings: &Settings,
) -> Result<Composed, ConfigError> {
    let stores = Metered::new(stores, metrics);
    if settings.runtime.state.is_empty() {
        return Ok(Composed {
            stores: stores.erase(),
            lookups: None,
        });
    }
    let cache = &settings.state_cache;
    let disk = if Stores::durable(&stores) || cache.dir.is_some() {
        let disk = StateCache::open(cache.dir.as_deref(), cache.memory).map_err(|error| {
            ConfigError::Invalid {
                option: "state_cache_dir",
                reason: error.to_string(),
            }
        })?;
        Some(Arc::new(disk))
    } else {
        None
    };
    let cached = CachedStores::new(stores, disk);
    let lookups = Some(cached.lookups());
    Ok(Composed {
        stores: cached.erase(),
        lookups,
    })
}

/// The client's stores: the ones given; in memory where records die with
/// the process; else Cassandra with `cassandra_nodes`, else memory only when
/// `memory_stores` says so; with the peer directory of the Cassandra
/// stores (the others keep answers within the process).
///
/// # Errors
///
/// [`ConfigError::NoDurableStore`] when records outlive the process and no
/// store does; [`ConfigError::Cassandra`] when Cassandra refuses the login
/// or does not answer; [`ConfigError::Invalid`] naming `slab_size` when the
/// group's timers were stored with another slab size.
#[cfg_attr(not(feature = "cassandra"), allow(clippy::unused_async))]
pub(crate) async fn stores(
    given: Option<Given>,
    broker: Option<&Backend>,
    settings: &Settings,
) -> Result<(Backing, Option<ClientDirectory>, Option<Rebind>), ConfigError> {
    // Without the `kafka` feature a client on Kafka cannot be built: say
    // so before any store is reached.
    #[cfg(not(feature = "kafka"))]
    if broker.is_none() && settings.cluster != Cluster::Mock {
        return Err(no_kafka());
    }
    if let Some(given) = given {
        return Ok((Backing::Given(given), None, None));
    }
    let durable = broker.map_or(settings.cluster != Cluster::Mock, Broker::durable);
    if !durable {
        // Mock mode keeps every store in memory, whatever cassandra_nodes
        // says; answers stay within the process.
        return Ok((Backing::Memory(MemoryStores::new()), None, None));
    }
    if !settings.cassandra.nodes.is_empty() {
        #[cfg(feature = "cassandra")]
        return cassandra::stores(settings).await;
        #[cfg(not(feature = "cassandra"))]
        return Err(ConfigError::Invalid {
            option: "cassandra_nodes",
            reason: "this build has no Cassandra stores: enable the `cassandra` feature of \
                     prosody"
                .to_owned(),
        });
    }
    if settings.memory_stores {
        tracing::warn!(
            "memory_stores is set: timers, deferred records and dedup records are lost when \
             this process stops or its partitions move"
        );
        return Ok((Backing::Memory(MemoryStores::new()), None, None));
    }
    Err(ConfigError::NoDurableStore)
}

/// The client's collections, bound to its stores and loader: each
/// collection's identity recorded in (or compared with) the store, and
/// message collections reading back through the client's loader.
pub(crate) async fn state(
    registry: &Registry,
    stores: &AnyStores,
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
