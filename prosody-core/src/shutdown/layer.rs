//! The shutdown layer.

use super::ShutdownService;
use tower::Layer;

/// Wraps a service so no new attempt starts once its partition shuts down.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShutdownLayer;

impl ShutdownLayer {
    /// The shutdown layer.
    #[must_use]
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for ShutdownLayer {
    type Service = ShutdownService<S>;

    fn layer(&self, inner: S) -> ShutdownService<S> {
        ShutdownService { inner }
    }
}
