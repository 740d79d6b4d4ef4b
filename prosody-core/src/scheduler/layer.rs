//! The layer that wraps a stack's inner service in the fair scheduler.

use super::SchedulerService;
use super::config::SchedulerConfig;
use super::state::Shared;
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// Wraps services in one fair scheduler.
///
/// Build ONE layer per client: every service it wraps, and every clone of
/// those, shares its permits, queues and virtual times, so
/// `max_concurrency` holds across all partitions.
#[derive(Clone)]
pub struct SchedulerLayer {
    shared: Arc<Shared>,
}

impl SchedulerLayer {
    /// A scheduler with `config`. It does not fail: values that
    /// [`SchedulerConfig::validate`] rejects take their defaults, so validate
    /// user input first.
    #[must_use]
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// The shared state, for tests.
    #[cfg(test)]
    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl<S> Layer<S> for SchedulerLayer {
    type Service = SchedulerService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SchedulerService::new(inner, Arc::clone(&self.shared))
    }
}

impl fmt::Debug for SchedulerLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerLayer").finish_non_exhaustive()
    }
}
