//! The dedup layer.

use super::{DedupConfig, DedupService, Shared};
use crate::store::dedup::DedupStore;
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so messages already handled are skipped.
///
/// Every service this layer makes shares one cache and one store, so build
/// one layer per process (or per client) and reuse it across partitions.
/// The store must be the one the client's runtime commits its batches to
/// (its stores' dedup store): the layer records a handled key as a rider
/// of the attempt's batch, so a store of its own would never learn of it.
pub struct DedupLayer<D> {
    pub(super) shared: Arc<Shared<D>>,
}

impl<D: DedupStore> DedupLayer<D> {
    /// A dedup layer over `store`, with an empty cache of
    /// `config.cache_size` keys.
    #[must_use]
    pub fn new(config: DedupConfig, store: D) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, store)),
        }
    }
}

impl<D> Clone for DedupLayer<D> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D> fmt::Debug for DedupLayer<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupLayer")
            .field("version", &self.shared.version)
            .field("ttl", &self.shared.ttl)
            .finish_non_exhaustive()
    }
}

impl<S, D> Layer<S> for DedupLayer<D> {
    type Service = DedupService<S, D>;

    fn layer(&self, inner: S) -> DedupService<S, D> {
        DedupService::new(inner, Arc::clone(&self.shared))
    }
}
