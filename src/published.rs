//! Published state: a subsystem's JSON collections, read by other clients
//! (see the README's Published state section).

use crate::backend::Backend;
use crate::config::{ConfigError, ReadTtl, Settings};
use crate::directory::{ClientDirectory, Rebind};
use crate::error::ClientError;
use crate::gate::Gate;
use crate::mock;
use prosody_core::broker::Broker;
use prosody_core::peer::{Publication, check_subsystem};
use prosody_core::state::{Payload, ReadCache, Registry, Spec, StateError};
use prosody_core::store::AnyStores;
use prosody_core::store::{PeerDirectory, StateStore};
use prosody_state::{CacheLookups, CachedReads, Publishable, SharedReads, Source};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The stores a published reader reads: the owning group's, through the
/// readers' cache.
pub type ClientReads = CachedReads<AnyStores>;

/// A client's side of published state: its readers' shared cache, and how
/// it reaches other groups' cells.
///
/// Invariant: once the client's gate is closed, no reader is made.
pub(crate) struct Readers {
    gate: Arc<Gate>,
    shared: SharedReads,
    ttl: ReadTtl,
    rebind: Option<Rebind>,
    /// Where other groups' publications are found, beside this process's.
    directory: Option<ClientDirectory>,
    /// Where the publications' topics' partitions are counted.
    broker: Backend,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Readers {
    /// The readers' cache's hits and misses.
    pub(crate) fn lookups(&self) -> &CacheLookups {
        self.shared.lookups()
    }

    /// The readers of a client closed by `gate`, reading other groups'
    /// publications through `directory` and their stores through `rebind`
    /// (`reach`), and their topics' partitions on `broker`.
    pub(crate) fn new(
        settings: &Settings,
        gate: Arc<Gate>,
        reach: (Option<ClientDirectory>, Option<Rebind>),
        broker: Backend,
    ) -> Self {
        let (directory, rebind) = reach;
        Self {
            gate,
            shared: SharedReads::new(settings.reads.bytes(&settings.state_cache)),
            ttl: settings.reads.ttl,
            rebind,
            directory,
            broker,
        }
    }

    /// A read-only reader of `subsystem`'s published collection
    /// `definition`, unless the client's gate is closed: the body of the
    /// client's `state`.
    pub(crate) async fn state<D: Publishable>(
        &self,
        subsystem: &str,
        definition: &D,
    ) -> Result<D::Reader<ClientReads>, ClientError> {
        self.gate.check()?;
        check_subsystem(subsystem)
            .map_err(|error| ClientError::InvalidRequest(error.to_string()))?;
        let spec = definition.spec();
        let Some((publication, stores, found)) =
            find(subsystem, spec.name, self.directory.as_ref()).await?
        else {
            return Err(unpublished(subsystem, &spec).into());
        };
        if let Some(refusal) = refused(&spec, &publication) {
            return Err(refusal.into());
        }
        let stores = match (stores, &self.rebind) {
            (Some(stores), _) => stores,
            (None, Some(rebind)) => rebind(&publication.group),
            (None, None) => return Err(unpublished(subsystem, &spec).into()),
        };
        // The owners recorded the collection's identity; reading it back
        // tells the stores how its cells are laid out.
        let identity = spec.identity();
        let recorded = stores
            .identify(spec.name, &identity)
            .await
            .map_err(StateError::from)?;
        if recorded != identity {
            return Err(StateError::Unpublished {
                collection: spec.name,
                reason: format!("its owners recorded it as {recorded}, not {identity}"),
            }
            .into());
        }
        let partitions = self
            .broker
            .partitions(&publication.topic)
            .await?
            .ok_or_else(|| StateError::Unpublished {
                collection: spec.name,
                reason: format!("its topic {} does not exist", publication.topic),
            })?;
        let ttl = match spec.read_cache {
            ReadCache::Inherit => self.ttl.duration(),
            ReadCache::Disabled => Duration::ZERO,
            ReadCache::For(ttl) => ttl,
        };
        let recheck = Recheck {
            subsystem: subsystem.to_owned(),
            spec,
            found,
            window: ttl,
            last: tokio::sync::Mutex::new((Instant::now(), None)),
        };
        let source = Source::new(
            CachedReads::new(stores, &self.shared, ttl),
            publication.topic.as_str(),
            partitions,
        )
        .gated(Arc::new(recheck));
        Ok(definition.reader(source))
    }
}

/// Advertises the client's JSON collections under its subsystem: each with
/// its `published` flag, so a collection deployed with `published(false)`
/// is retired. Without a subsystem, or a topic, nothing is advertised.
///
/// # Errors
///
/// [`ConfigError::StateStore`] when the directory refuses a publication.
pub(crate) async fn advertise(
    settings: &Settings,
    registry: &Registry,
    stores: &AnyStores,
    directory: Option<&ClientDirectory>,
) -> Result<(), ConfigError> {
    let (Some(subsystem), Some(topic)) = (
        &settings.peer.subsystem,
        settings.subscribed_topics.as_ref().and_then(|t| t.first()),
    ) else {
        return Ok(());
    };
    for spec in registry
        .specs()
        .iter()
        .filter(|s| s.payload == Payload::Json)
    {
        let publication = Publication {
            subsystem: subsystem.to_string(),
            collection: spec.name.to_owned(),
            group: settings.runtime.group_id.to_string(),
            topic: topic.to_string(),
            identity: spec.identity(),
            published: spec.published,
        };
        if let Some(directory) = directory {
            directory
                .publish(&publication)
                .await
                .map_err(|error| ConfigError::StateStore {
                    retriable: error.is_retriable(),
                    reason: format!("publishing {} failed: {error}", spec.name),
                })?;
        }
        let key = (
            publication.subsystem.clone(),
            publication.collection.clone(),
        );
        mock::cluster()
            .publications()
            .insert(key, (publication, stores.clone()));
    }
    Ok(())
}

/// Where a reader finds its publication again, to see a retirement.
#[derive(Clone)]
enum Found {
    Local,
    Directory(ClientDirectory),
}

/// The publication of `subsystem`'s `collection`: this process's, else the
/// directory's.
async fn find(
    subsystem: &str,
    collection: &str,
    directory: Option<&ClientDirectory>,
) -> Result<Option<(Publication, Option<AnyStores>, Found)>, StateError> {
    let key = (subsystem.to_owned(), collection.to_owned());
    let local = mock::cluster().publications().get(&key).cloned();
    if let Some((publication, stores)) = local {
        return Ok(Some((publication, Some(stores), Found::Local)));
    }
    let Some(directory) = directory else {
        return Ok(None);
    };
    let publication = directory.publication(subsystem, collection).await?;
    Ok(publication.map(|p| (p, None, Found::Directory(directory.clone()))))
}

/// Why `publication` cannot be read as `spec`, if it cannot.
fn refused(spec: &Spec, publication: &Publication) -> Option<StateError> {
    let reason = if !publication.published {
        format!(
            "subsystem {} retired it (published is false)",
            publication.subsystem
        )
    } else if publication.identity != spec.identity() {
        format!(
            "subsystem {} publishes it as {}, not {}",
            publication.subsystem,
            publication.identity,
            spec.identity()
        )
    } else {
        return None;
    };
    Some(StateError::Unpublished {
        collection: spec.name,
        reason,
    })
}

/// Re-reads a reader's publication at most once per window, and refuses
/// reads once it is retired.
struct Recheck {
    subsystem: String,
    spec: Spec,
    found: Found,
    window: Duration,
    last: tokio::sync::Mutex<(Instant, Option<StateError>)>,
}

impl prosody_state::Gate for Recheck {
    fn check(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StateError>> + Send + '_>>
    {
        Box::pin(async move {
            let mut last = self.last.lock().await;
            if last.0.elapsed() >= self.window {
                let directory = match &self.found {
                    Found::Local => None,
                    Found::Directory(directory) => Some(directory),
                };
                let now = find(&self.subsystem, self.spec.name, directory).await?;
                let refusal = match now {
                    Some((publication, ..)) => refused(&self.spec, &publication),
                    None => Some(unpublished(&self.subsystem, &self.spec)),
                };
                *last = (Instant::now(), refusal);
            }
            match &last.1 {
                Some(StateError::Unpublished { collection, reason }) => {
                    Err(StateError::Unpublished {
                        collection,
                        reason: reason.clone(),
                    })
                }
                _ => Ok(()),
            }
        })
    }
}

fn unpublished(subsystem: &str, spec: &Spec) -> StateError {
    StateError::Unpublished {
        collection: spec.name,
        reason: format!("subsystem {subsystem} does not publish it"),
    }
}
