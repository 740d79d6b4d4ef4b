//! The Cassandra stores as an owner of partitions uses them, for the
//! conformance suites.

#![allow(clippy::unwrap_used, reason = "test code fails loudly")]

use prosody_cassandra::CassandraStores;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Batch, DeferCounts, DeferStore, Deferred, StoreError, Stores, Wrapped,
};
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

impl Wrapped for Owner {
    type Inner = CassandraStores;

    fn inner(&self) -> &CassandraStores {
        &self.inner
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.own(partition).await?;
        self.inner.commit(partition, batch).await
    }

    /// Every batch goes to `commit`, which owns the partition first.
    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
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

    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.own(partition).await?;
        self.inner.counts(partition).await
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
