//! The failure-topic layer.

use super::{FailureConfig, FailureService};
use crate::broker::Producer;
use std::sync::Arc;
use tower::Layer;

/// Wraps a service so events that fail for good go to the failure topic.
#[derive(Clone, Debug)]
pub struct FailureLayer<Pr> {
    producer: Pr,
    config: Arc<FailureConfig>,
}

impl<Pr: Producer> FailureLayer<Pr> {
    /// A failure-topic layer producing with `producer`.
    #[must_use]
    pub fn new(producer: Pr, config: FailureConfig) -> Self {
        Self {
            producer,
            config: Arc::new(config),
        }
    }
}

impl<S, Pr: Producer> Layer<S> for FailureLayer<Pr> {
    type Service = FailureService<S, Pr>;

    fn layer(&self, inner: S) -> FailureService<S, Pr> {
        FailureService {
            inner,
            producer: self.producer.clone(),
            config: Arc::clone(&self.config),
        }
    }
}
