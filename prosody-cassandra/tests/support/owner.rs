//! The Cassandra stores as an owner of partitions uses them, for the
//! conformance suites.

#![allow(clippy::unwrap_used, reason = "test code fails loudly")]

use bytes::Bytes;
use prosody_cassandra::CassandraStores;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Batch, DedupKey, DedupStore, DeferStore, Deferred, Direction, ItemRange, StateStore,
    StoreError, Stores, TimerEntry, TimerKind, TimerStore,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The stores with every partition opened before its first use, as the
/// runtime does: the defer suite then runs on what the owner knows and
/// caches, not only on reads.
#[derive(Clone)]
pub struct Owner {
    pub stores: CassandraStores,
    pub opened: Arc<Mutex<HashSet<TopicPartition>>>,
}

impl Owner {
    async fn own(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let first = self.opened.lock().unwrap().insert(partition.clone());
        if first {
            self.stores.open(partition).await?;
        }
        Ok(())
    }
}

impl Stores for Owner {
    fn durable(&self) -> bool {
        self.stores.durable()
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.own(partition).await?;
        self.stores.commit(partition, batch).await
    }
}

impl DeferStore for Owner {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.stores.peek(partition, key)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.own(partition).await?;
        self.stores.deferred(partition, key).await
    }
}

/// The reads the defer suite does not make, as the stores answer them.
impl TimerStore for Owner {
    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.stores.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.stores.load(partition, from, until).await
    }
}

impl DedupStore for Owner {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.stores.contains(key).await
    }
}

impl StateStore for Owner {
    async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        self.stores.identify(name, identity).await
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.stores.cell(partition, collection, key, item).await
    }

    async fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let stores = &self.stores;
        stores
            .cells(partition, collection, key, range, direction, limit)
            .await
    }
}
