//! Stores that time each operation: `prosody.store.operation.duration`
//! and `prosody.store.operation.errors`, by operation.

use super::Metrics;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::state::{Direction, ItemRange};
use crate::store::timer::{TimerEntry, TimerKind};
use crate::store::{Batch, DedupKey, Deferred, StoreError, Stores, Wrapped};
use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundHistogram};
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

/// A store operation that may wait, measured under its own name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Commit,
    Scheduled,
    Load,
    Contains,
    Deferred,
    Identify,
    Cell,
    Cells,
    Open,
}

impl Operation {
    /// Every operation, in the order of its series.
    const ALL: [Self; 9] = [
        Self::Commit,
        Self::Scheduled,
        Self::Load,
        Self::Contains,
        Self::Deferred,
        Self::Identify,
        Self::Cell,
        Self::Cells,
        Self::Open,
    ];

    /// The value of `prosody.store.operation`.
    const fn name(self) -> &'static str {
        match self {
            Self::Commit => "commit",
            Self::Scheduled => "scheduled",
            Self::Load => "load",
            Self::Contains => "contains",
            Self::Deferred => "deferred",
            Self::Identify => "identify",
            Self::Cell => "cell",
            Self::Cells => "cells",
            Self::Open => "open",
        }
    }
}

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
            Operation::ALL
                .iter()
                .map(|operation| {
                    let attributes = [KeyValue::new("prosody.store.operation", operation.name())];
                    (
                        instruments.store_duration.bind(&attributes),
                        instruments.store_errors.bind(&attributes),
                    )
                })
                .collect()
        });
        Self { inner, series }
    }

    /// Runs `operation`, measuring it.
    fn measure<T>(
        &self,
        operation: Operation,
        call: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        let series = self.series.clone();
        async move {
            let Some(series) = series else {
                return call.await;
            };
            let started = Instant::now();
            let result = call.await;
            if let Some((duration, errors)) = series.get(operation as usize) {
                duration.record(started.elapsed().as_secs_f64());
                if result.is_err() {
                    errors.add(1);
                }
            }
            result
        }
    }
}

impl<S: Stores> Wrapped for Metered<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn open(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.measure(Operation::Open, self.inner.open(partition))
    }

    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.measure(Operation::Commit, self.inner.commit(partition, batch))
    }

    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        self.measure(
            Operation::Scheduled,
            self.inner.scheduled(partition, key, kind),
        )
    }

    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        self.measure(Operation::Load, self.inner.load(partition, from, until))
    }

    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.measure(Operation::Contains, self.inner.contains(key))
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        self.measure(Operation::Deferred, self.inner.deferred(partition, key))
    }

    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        self.measure(Operation::Identify, self.inner.identify(name, identity))
    }

    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        self.measure(
            Operation::Cell,
            self.inner.cell(partition, collection, key, item),
        )
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
            Operation::Cells,
            self.inner
                .cells(partition, collection, key, range, direction, limit),
        )
    }
}
