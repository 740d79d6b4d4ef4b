//! The monopolization layer.

use super::{MonopolizationConfig, MonopolizationService, Shared};
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so keys that take too much handler time are rejected.
///
/// Every service this layer makes shares one set of tracked keys.
#[derive(Clone, Debug)]
pub struct MonopolizationLayer {
    /// `None` when detection is disabled.
    pub(super) shared: Option<Arc<Shared>>,
}

impl MonopolizationLayer {
    /// A monopolization layer with this configuration; a threshold outside
    /// `0..=1` is clamped (see [`MonopolizationConfig::validate`]).
    #[must_use]
    pub fn new(config: &MonopolizationConfig) -> Self {
        Self {
            shared: config.enabled.then(|| Arc::new(Shared::new(config))),
        }
    }
}

impl<S> Layer<S> for MonopolizationLayer {
    type Service = MonopolizationService<S>;

    fn layer(&self, inner: S) -> MonopolizationService<S> {
        MonopolizationService::new(inner, self.shared.clone())
    }
}
