//! The timeout layer.

use super::{TimeoutConfig, TimeoutService};
use tower::Layer;

/// Wraps a service so each attempt has a deadline.
#[derive(Clone, Copy, Debug)]
pub struct TimeoutLayer {
    config: TimeoutConfig,
}

impl TimeoutLayer {
    /// A timeout layer with this configuration.
    #[must_use]
    pub fn new(config: TimeoutConfig) -> Self {
        Self { config }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = TimeoutService<S>;

    fn layer(&self, inner: S) -> TimeoutService<S> {
        TimeoutService::new(inner, self.config)
    }
}
