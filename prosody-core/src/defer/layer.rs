//! The defer layer.

use super::{DeferConfig, DeferService, Shared};
use std::fmt;
use std::sync::Arc;
use tower::Layer;
use tower::layer::util::Identity;

/// Wraps a service so transient failures are set aside and retried later
/// (see the module documentation).
///
/// Every service this layer makes shares one loader and failure-rate
/// gate: build one layer per client and reuse it across
/// partitions. The records a backlog retries reach the inner service
/// through `drain`, a layer of their own ([`Identity`] unless
/// [`DeferLayer::drain_through`] sets one).
pub struct DeferLayer<L, X = Identity> {
    shared: Arc<Shared<L>>,
    drain: X,
}

impl<L> DeferLayer<L> {
    /// A defer layer reading records back with `loader`. It keeps offsets
    /// in the partition's stores, reached through the event's unit of work
    /// (the stores its commits write to).
    #[must_use]
    pub fn new(config: DeferConfig, loader: L) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, loader)),
            drain: Identity::new(),
        }
    }
}

impl<L, X> DeferLayer<L, X> {
    /// The same layer, passing the records a backlog retries through
    /// `layer` before the inner service. The stages outside this one never
    /// see those retries; the pipeline passes them through its dedup layer,
    /// so a record handled from a backlog is recorded and its duplicates
    /// are skipped.
    #[must_use]
    pub fn drain_through<Y>(self, layer: Y) -> DeferLayer<L, Y> {
        DeferLayer {
            shared: self.shared,
            drain: layer,
        }
    }
}

impl<L, X: Clone> Clone for DeferLayer<L, X> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            drain: self.drain.clone(),
        }
    }
}

impl<L, X> fmt::Debug for DeferLayer<L, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferLayer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S: Clone, L, X: Layer<S>> Layer<S> for DeferLayer<L, X> {
    type Service = DeferService<S, X::Service, L>;

    fn layer(&self, inner: S) -> Self::Service {
        DeferService {
            drain: Arc::new(self.drain.layer(inner.clone())),
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}
