//! The retry layer.

use super::{RetryConfig, RetryService};
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so transient failures are tried again.
#[derive(Clone, Debug)]
pub struct RetryLayer {
    config: Arc<RetryConfig>,
}

impl RetryLayer {
    /// A retry layer with this configuration.
    #[must_use]
    pub fn new(config: RetryConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S: Clone> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::new(inner, Arc::clone(&self.config))
    }
}
