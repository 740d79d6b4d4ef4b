//! The Cassandra stores (feature `cassandra`).

use super::Backing;
use crate::config::{ConfigError, Settings};
use crate::directory::{ClientDirectory, Rebind};
use prosody_cassandra::{CassandraConfig, CassandraStores, ConnectError};
use prosody_core::store::AnyStores;
use prosody_core::store::timer::SlabSize;
use std::sync::Arc;

/// The Cassandra stores of the settings' group: reached and logged in
/// within `connect_timeout`, then migrated (waiting for another client's
/// migration up to two minutes).
pub(super) async fn stores(
    settings: &Settings,
) -> Result<(Backing, Option<ClientDirectory>, Option<Rebind>), ConfigError> {
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
        .map(|stores| {
            let directory = ClientDirectory::new(stores.clone());
            let owners = stores.clone();
            let rebind: Rebind =
                Arc::new(move |group: &str| AnyStores::new(owners.for_group(group)));
            (Backing::Cassandra(stores), Some(directory), Some(rebind))
        })
}
