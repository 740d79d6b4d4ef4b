//! One key's committed state in some stores, read-only: what a reader of
//! a published collection sees.

use super::attempt::{AttemptState, Slot};
use super::{Registry, Spec, StateError};
use crate::access::PartitionStores;
use crate::broker::TopicPartition;
use crate::key::Key;
use crate::store::Stores;
use std::sync::Arc;
use std::time::Duration;

/// A read-only view of one key's collection in a partition of `stores`.
///
/// Invariant: it reads only what was committed (it has no attempt whose
/// pending changes it could see), and it writes nothing: a write reaches
/// only its own pending changes, and a commit is refused.
pub struct Reading {
    attempt: Arc<AttemptState>,
    spec: Spec,
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reading")
            .field("collection", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl Reading {
    /// The view of `key`'s collection `spec` in `partition` of `stores`.
    ///
    /// # Errors
    ///
    /// [`StateError::Spec`] when `spec` breaks a rule of its own (see
    /// [`Registry::new`]).
    pub fn new<S: Stores>(
        stores: S,
        partition: TopicPartition,
        key: Key,
        spec: Spec,
    ) -> Result<Self, StateError> {
        // The recovery delay concerns writers; a reader checks only the
        // spec's own rules.
        let registry = Registry::new([spec], Duration::ZERO)?;
        let access = Arc::new(PartitionStores::reader(stores.erase(), partition));
        Ok(Self {
            attempt: AttemptState::new(access, Arc::new(registry), key),
            spec,
        })
    }

    /// The collection, for its typed handle.
    ///
    /// # Errors
    ///
    /// Never for the view's own spec; kept for the slot's signature.
    pub fn slot(&self) -> Result<Slot<'_>, StateError> {
        self.attempt.slot(&self.spec)
    }
}
