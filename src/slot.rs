//! The client's one subscription slot.

use prosody_core::Runtime;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

enum Slot {
    Idle,
    /// A `subscribe` call is joining the group.
    Starting,
    Running(Arc<Runtime>),
}

/// Where the client's subscription is.
///
/// Invariant: at most one subscription starts or runs at a time; a start
/// abandoned midway frees the slot; every stop, concurrent or repeated,
/// returns only once the running consumer has drained and ended.
pub(crate) struct Subscription {
    slot: Mutex<Slot>,
}

/// A claimed slot; dropping it without [`Claim::install`] frees the slot.
pub(crate) struct Claim<'a> {
    subscription: &'a Subscription,
    installed: bool,
}

impl Subscription {
    pub(crate) fn new() -> Self {
        Self {
            slot: Mutex::new(Slot::Idle),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the slot for a new subscription; `None` when one starts or runs.
    pub(crate) fn claim(&self) -> Option<Claim<'_>> {
        let mut slot = self.lock();
        if !matches!(*slot, Slot::Idle) {
            return None;
        }
        *slot = Slot::Starting;
        Some(Claim {
            subscription: self,
            installed: false,
        })
    }

    /// The running consumer, if any.
    pub(crate) fn running(&self) -> Option<Arc<Runtime>> {
        match &*self.lock() {
            Slot::Running(runtime) => Some(Arc::clone(runtime)),
            Slot::Idle | Slot::Starting => None,
        }
    }

    /// Drains and stops the running consumer (until `deadline` when given,
    /// else within `shutdown_timeout` of its own), then frees the slot.
    pub(crate) async fn stop(&self, deadline: Option<Instant>) {
        let Some(runtime) = self.running() else {
            return;
        };
        match deadline {
            Some(deadline) => runtime.shutdown_by(deadline).await,
            None => runtime.shutdown().await,
        }
        let mut slot = self.lock();
        if matches!(&*slot, Slot::Running(current) if Arc::ptr_eq(current, &runtime)) {
            *slot = Slot::Idle;
        }
    }
}

impl Claim<'_> {
    /// Puts a started consumer in the slot.
    pub(crate) fn install(mut self, runtime: Runtime) {
        *self.subscription.lock() = Slot::Running(Arc::new(runtime));
        self.installed = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.installed {
            *self.subscription.lock() = Slot::Idle;
        }
    }
}
