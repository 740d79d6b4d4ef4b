//! The log layer.

use super::LogService;
use tower::Layer;

/// Wraps a service so failures are logged and settled (best-effort mode).
#[derive(Clone, Copy, Debug, Default)]
pub struct LogLayer;

impl LogLayer {
    /// The log layer.
    #[must_use]
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for LogLayer {
    type Service = LogService<S>;

    fn layer(&self, inner: S) -> LogService<S> {
        LogService { inner }
    }
}
