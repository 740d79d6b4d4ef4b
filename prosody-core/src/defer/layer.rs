//! The defer layer.

use super::{DeferConfig, DeferService, Shared};
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so transient failures are set aside and retried later
/// (see the module documentation).
///
/// Every service this layer makes shares one store, loader, codec and
/// failure-rate gate: build one layer per client and reuse it across
/// partitions.
pub struct DeferLayer<D, L, K> {
    shared: Arc<Shared<D, L, K>>,
}

impl<D, L, K> DeferLayer<D, L, K> {
    /// A defer layer keeping offsets in `store`, reading records back with
    /// `loader` and decoding them with `codec` (the client's codec).
    #[must_use]
    pub fn new(config: DeferConfig, store: D, loader: L, codec: K) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, store, loader, codec)),
        }
    }
}

impl<D, L, K> Clone for DeferLayer<D, L, K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D, L, K> fmt::Debug for DeferLayer<D, L, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferLayer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S, D, L, K> Layer<S> for DeferLayer<D, L, K> {
    type Service = DeferService<S, D, L, K>;

    fn layer(&self, inner: S) -> DeferService<S, D, L, K> {
        DeferService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}
