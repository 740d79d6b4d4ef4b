//! What keeps a dropped member in its group until its handler calls are
//! gone.

use std::sync::{Mutex, PoisonError};

/// Holds a consumer that was dropped without closing (a crash) until every
/// task that could still run one of its handler calls is gone too.
///
/// Invariant: the partition tasks and every attempt they start hold the
/// lease (through the partition's shared parts; a record settled on its
/// first poll runs and ends inside its partition task), so the parked
/// consumer (and with it the group membership) is dropped only after the
/// last of them: no other member is given a partition while a call of this
/// one is still alive. Aborted tasks are dropped asynchronously, one
/// scheduling round or more after the abort; without the lease the
/// consumer would leave first.
#[derive(Default)]
pub(crate) struct Lease {
    parked: Mutex<Option<Box<dyn Send>>>,
}

impl Lease {
    /// Keeps `consumer` until the lease's last holder is dropped.
    pub(crate) fn park(&self, consumer: impl Send + 'static) {
        // Nothing panics while holding it: a poisoned slot is consistent.
        *self.parked.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(consumer));
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::Lease;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_parked_value_goes_with_the_last_holder() {
        let dropped = Arc::new(AtomicBool::new(false));
        let lease = Arc::new(Lease::default());
        let holder = Arc::clone(&lease);
        lease.park(Flag(Arc::clone(&dropped)));
        drop(lease);
        assert!(!dropped.load(Ordering::SeqCst), "a holder is left");
        drop(holder);
        assert!(dropped.load(Ordering::SeqCst));
    }
}
