//! What the clients of one process share without a server: mock mode's
//! cluster.

use prosody_core::peer::Publication;
use prosody_core::store::AnyStores;
use prosody_memory::MemoryBroker;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// The publications of this process, by (subsystem, collection), with the
/// owners' stores.
pub(crate) type Publications = HashMap<(String, String), (Publication, AnyStores)>;

/// The process's in-process cluster: the broker every mock client given
/// none shares, and the publications of this process (mock mode's
/// directory of published state, and a shortcut for readers in the
/// owner's process).
///
/// Invariant: one per process, made on first use; clients share it and
/// nothing else of one another.
#[derive(Default)]
pub(crate) struct Cluster {
    broker: MemoryBroker,
    publications: Mutex<Publications>,
}

impl Cluster {
    /// The in-memory broker of mock clients given none.
    pub(crate) fn broker(&self) -> MemoryBroker {
        self.broker.clone()
    }

    /// The publications of this process. Nothing panics while holding the
    /// lock, so a poisoned one holds a consistent map.
    pub(crate) fn publications(&self) -> MutexGuard<'_, Publications> {
        self.publications
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The process's cluster.
pub(crate) fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(Cluster::default)
}
