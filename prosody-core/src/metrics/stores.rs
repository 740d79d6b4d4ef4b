//! Stores that time each operation: `prosody.store.operation.duration`
//! and `prosody.store.operation.errors`, by operation.

use super::Metrics;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::state::{Direction, ItemRange};
use crate::store::timer::{TimerEntry, TimerKind};
use crate::store::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, StateStore, StoreError, Stores,
    TimerStore,
};
use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundHistogram};
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// The operations measured, in the order of their series.
const OPERATIONS: [&str; 9] = [
    "commit",
    "scheduled",
    "load",
    "contains",
    "deferred",
    "identify",
    "cell",
    "cells",
    "open",
];

/// One operation's series: its durations and its errors.
type Series = (BoundHistogram<f64>, BoundCounter<u64>);

/// Stores whose every operation that may wait is timed, and its errors
/// counted; answers given at once without I/O (`contains_now`, `peek`,
/// `commit_now`) are not, as they cost less than measuring them.
///
/// Invariant: an operation is measured once, when it completes, under its
/// own name; what it returns is the inner store's answer, unchanged.
#[derive(Clone, Debug)]
pub struct Metered<S> {
    inner: S,
    series: Option<Arc<[Series]>>,
}

impl<S> Metered<S> {
    /// `inner`, measured into `metrics` (not at all when they are off).
    pub fn new(inner: S, metrics: &Metrics) -> Self {
        let series = metrics.0.as_ref().map(|instruments| {
            OPERATIONS
                .iter()
                .map(|operation| {
                    let attributes = [KeyValue::new("prosody.store.operation", *operation)];
                    (
                        instruments.store_duration.bind(&attributes),
                        instruments.store_errors.bind(&attributes),
                    )
                })
                .collect()
        });
        Self { inner, series }
    }

    /// Runs `operation` (an index of [`OPERATIONS`]), measuring it.
    fn measure<T>(
        &self,
        operation: usize,
        call: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        let series = self.series.clone();
        async move {
            let Some(series) = series else {
                return call.await;
            };
            let started = Instant::now();
            let result = call.await;
            if let Some((duration, errors)) = series.get(operation) {
                duration.record(started.elapsed().as_secs_f64());
                if result.is_err() {
                    errors.add(1);
                }
            }
            result
        }
    }
}

impl<S: Stores> Stores for Metered<S> {
    fn durable(&self) -> bool {
        self.inner.durable()
    }

    fn open(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.measure(8, self.inner.open(partition))
    }

    fn close(&self, partition: &TopicPartition) {
        self.inner.close(partition);
    }

    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.measure(0, self.inner.commit(partition, batch))
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        self.inner.commit_now(partition, batch)
    }
}

impl<S: TimerStore> TimerStore for Metered<S> {
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        self.measure(1, self.inner.scheduled(partition, key, kind))
    }

    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        self.measure(2, self.inner.load(partition, from, until))
    }
}

impl<S: DedupStore> DedupStore for Metered<S> {
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.measure(3, self.inner.contains(key))
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.inner.contains_now(key)
    }
}

impl<S: DeferStore> DeferStore for Metered<S> {
    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        self.inner.counts(partition)
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.inner.counts_now(partition)
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.inner.peek(partition, key)
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        self.measure(4, self.inner.deferred(partition, key))
    }
}

impl<S: StateStore> StateStore for Metered<S> {
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        self.measure(5, self.inner.identify(name, identity))
    }

    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        self.measure(6, self.inner.cell(partition, collection, key, item))
    }

    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        self.measure(
            7,
            self.inner
                .cells(partition, collection, key, range, direction, limit),
        )
    }
}
