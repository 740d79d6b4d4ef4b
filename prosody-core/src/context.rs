//! What a handler knows about the event it handles, and how it learns that
//! it should stop.

use crate::event::Topic;
use crate::key::Key;
use std::future::Future;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Which scheduling class an event belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Demand {
    /// Fresh work: a message, timer or excise tried for the first time.
    #[default]
    Normal,
    /// Work that failed before and is being tried again.
    Failure,
}

/// The context of one handler call.
///
/// Invariant: once [`Context::should_cancel`] returns `true` it stays `true`,
/// and every [`Context::on_cancel`] future of this context has completed or
/// completes at once.
#[derive(Clone, Debug)]
pub struct Context {
    key: Key,
    topic: Topic,
    partition: i32,
    demand: Demand,
    attempt: u32,
    shutdown: CancellationToken,
    cancel: CancellationToken,
}

impl Context {
    /// A context for an event of `key` on `topic` and `partition`. Its
    /// partition starts shutting down when `shutdown` fires, and the handler
    /// should stop when `cancel` fires.
    #[must_use]
    pub fn new(
        key: Key,
        topic: Topic,
        partition: i32,
        shutdown: CancellationToken,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            key,
            topic,
            partition,
            demand: Demand::Normal,
            attempt: 1,
            shutdown,
            cancel,
        }
    }

    /// The key of the event.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The topic of the partition the key belongs to.
    #[must_use]
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// The partition the key belongs to.
    #[must_use]
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Whether this is fresh work or a retry of failed work.
    #[must_use]
    pub fn demand(&self) -> Demand {
        self.demand
    }

    /// The same context in another scheduling class.
    #[must_use]
    pub fn with_demand(mut self, demand: Demand) -> Self {
        self.demand = demand;
        self
    }

    /// Which attempt at the event this is, from 1.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The same context for another attempt.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// A context whose cancellation fires when this one's does, or earlier
    /// through the returned token (a deadline, for example).
    #[must_use]
    pub fn child(&self) -> (Self, CancellationToken) {
        let token = self.cancel.child_token();
        let mut child = self.clone();
        child.cancel = token.clone();
        (child, token)
    }

    /// Whether the partition is being revoked or the client is shutting down.
    /// Running handlers may finish; no new attempt should start. Cancellation
    /// follows near the end of the shutdown timeout.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Completes when the partition starts shutting down.
    pub fn on_shutdown(&self) -> impl Future<Output = ()> + Send + 'static {
        self.on_shutdown_owned()
    }

    /// [`Context::on_shutdown`] as a nameable future, for layers.
    pub fn on_shutdown_owned(&self) -> WaitForCancellationFutureOwned {
        self.shutdown.clone().cancelled_owned()
    }

    /// Whether the handler should stop: the shutdown timeout is nearly over,
    /// or the attempt timed out.
    #[must_use]
    pub fn should_cancel(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the handler should stop.
    pub fn on_cancel(&self) -> impl Future<Output = ()> + Send + 'static {
        self.cancel.clone().cancelled_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::Context;
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn cancellation_reaches_children_and_stays() {
        let root = CancellationToken::new();
        let context = Context::new(
            "k".into(),
            "t".into(),
            0,
            CancellationToken::new(),
            root.clone(),
        );
        let (child, deadline) = context.child();
        deadline.cancel();
        assert!(child.should_cancel());
        assert!(!context.should_cancel());
        let waiting = context.on_cancel();
        root.cancel();
        waiting.await;
        assert!(context.should_cancel());
        context.on_cancel().await;
    }
}
