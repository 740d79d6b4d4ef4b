//! The dedup layer.

use super::{DedupConfig, DedupService, Shared};
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so messages already handled are skipped.
///
/// Every service this layer makes shares one cache, so build one layer per
/// process (or per client) and reuse it across partitions. The store is
/// the partition's own, reached through the event's unit of work: the
/// layer reads the dedup records from the stores the runtime commits its
/// batches to, and records a handled key as a rider of the attempt's batch
/// to those same stores. A context built outside the runtime has no
/// stores: there the cache alone answers.
pub struct DedupLayer {
    pub(super) shared: Arc<Shared>,
}

impl DedupLayer {
    /// A dedup layer with an empty cache of `config.cache_size` keys.
    #[must_use]
    pub fn new(config: DedupConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(config)),
        }
    }
}

impl Clone for DedupLayer {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl fmt::Debug for DedupLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupLayer")
            .field("version", &self.shared.version)
            .field("ttl", &self.shared.ttl)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for DedupLayer {
    type Service = DedupService<S>;

    fn layer(&self, inner: S) -> DedupService<S> {
        DedupService::new(inner, Arc::clone(&self.shared))
    }
}
