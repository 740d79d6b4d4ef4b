//! The Cassandra stores as an owner of partitions uses them, for the
//! conformance suites.

#![allow(clippy::unwrap_used, reason = "test code fails loudly")]

use prosody_cassandra::CassandraStores;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{Batch, DeferCounts, DeferStore, Deferred, StoreError, Stores};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The stores with every partition opened before its first use, as the
/// runtime does: the defer suite then runs on what the owner knows and
/// caches, not only on reads.
#[derive(Clone)]
pub struct Owner {
    pub inner: CassandraStores,
    pub opened: Arc<Mutex<HashSet<TopicPartition>>>,
}

impl Owner {
    async fn own(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let first = self.opened.lock().unwrap().insert(partition.clone());
        if first {
            self.inner.open(partition).await?;
        }
        Ok(())
    }
}

impl Stores for Owner {
    fn durable(&self) -> bool {
        self.inner.durable()
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.own(partition).await?;
        self.inner.commit(partition, batch).await
    }

    /// Opens the partition now unless this owner holds it.
    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.own(partition).await
    }

    /// Lets the partition go: its next use opens it again, as a new
    /// owner.
    fn close(&self, partition: &TopicPartition) {
        self.opened.lock().unwrap().remove(partition);
        self.inner.close(partition);
    }
}

impl DeferStore for Owner {
    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.own(partition).await?;
        self.inner.counts(partition).await
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.inner.counts_now(partition)
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.inner.peek(partition, key)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.own(partition).await?;
        self.inner.deferred(partition, key).await
    }
}

// The reads the defer suite does not make, as the stores answer them.
prosody_conformance::forward_timer!([] Owner);
prosody_conformance::forward_dedup!([] Owner);
prosody_conformance::forward_state!([] Owner);
