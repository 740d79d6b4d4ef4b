//! The defer layer.

use super::{DeferConfig, DeferService, Shared};
use std::fmt;
use std::sync::Arc;
use tower::Layer;
use tower::layer::util::Identity;

/// Wraps a service so transient failures are set aside and retried later
/// (see the module documentation).
///
/// Every service this layer makes shares one store, loader and
/// failure-rate gate: build one layer per client and reuse it across
/// partitions. The records a backlog retries reach the inner service
/// through `drain`, a layer of their own ([`Identity`] unless
/// [`DeferLayer::drain_through`] sets one).
pub struct DeferLayer<D, L, X = Identity> {
    shared: Arc<Shared<D, L>>,
    drain: X,
}

impl<D, L> DeferLayer<D, L> {
    /// A defer layer keeping offsets in `store` and reading records back
    /// with `loader`.
    #[must_use]
    pub fn new(config: DeferConfig, store: D, loader: L) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, store, loader)),
            drain: Identity::new(),
        }
    }
}

impl<D, L, X> DeferLayer<D, L, X> {
    /// The same layer, passing the records a backlog retries through
    /// `layer` before the inner service. The stages outside this one never
    /// see those retries; the pipeline passes them through its dedup layer,
    /// so a record handled from a backlog is recorded and its duplicates
    /// are skipped.
    #[must_use]
    pub fn drain_through<Y>(self, layer: Y) -> DeferLayer<D, L, Y> {
        DeferLayer {
            shared: self.shared,
            drain: layer,
        }
    }
}

impl<D, L, X: Clone> Clone for DeferLayer<D, L, X> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            drain: self.drain.clone(),
        }
    }
}

impl<D, L, X> fmt::Debug for DeferLayer<D, L, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferLayer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S: Clone, D, L, X: Layer<S>> Layer<S> for DeferLayer<D, L, X> {
    type Service = DeferService<S, X::Service, D, L>;

    fn layer(&self, inner: S) -> Self::Service {
        DeferService {
            drain: Arc::new(self.drain.layer(inner.clone())),
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}
