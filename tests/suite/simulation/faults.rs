//! Fault injection: wrappers around the broker and store traits that fail
//! some calls transiently (a store also partway through a batch, or after it
//! wrote, as a timeout does), drawn from the scenario's seed. The production
//! backends stay free of test hooks.

use super::handler::{Entry, Probe, What};
use super::scenario::Rng;
use super::scenario::Script;
use bytes::Bytes;
use prosody::MemoryStores;
use prosody::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
use prosody_core::Key;
use prosody_core::clock::Timestamp;
use prosody_core::store::dedup::{DedupKey, DedupStore};
use prosody_core::store::defer::{DeferCounts, DeferStore, Deferred};
use prosody_core::store::timer::{TimerEntry, TimerKind, TimerStore};
use prosody_core::store::{
    Batch, Direction, ItemRange, StateStore, StoreError, Stores, TimerChange, Wrapped,
};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Decides which calls fail: each with probability `percent` / 100.
#[derive(Clone)]
pub struct Faults {
    percent: u64,
    rng: Arc<Mutex<Rng>>,
}

impl Faults {
    pub fn new(seed: u64, percent: u64) -> Self {
        Self {
            percent,
            rng: Arc::new(Mutex::new(Rng::new(seed ^ 0xFA17))),
        }
    }

    fn strike(&self) -> bool {
        self.percent > 0
            && self
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .chance(self.percent)
    }

    fn broker(&self, what: &str) -> Result<(), BrokerError> {
        if self.strike() {
            return Err(BrokerError::Backend {
                retriable: true,
                source: format!("injected: {what} failed").into(),
            });
        }
        Ok(())
    }

    /// A number in `0..bound` (zero when `bound` is zero).
    fn below(&self, bound: usize) -> usize {
        let bound = u64::try_from(bound).unwrap_or(u64::MAX);
        if bound == 0 {
            return 0;
        }
        let draw = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next();
        usize::try_from(draw % bound).unwrap_or(0)
    }
}

/// A broker whose reads by offset and whose members' commits fail now and
/// then.
#[derive(Clone)]
pub struct FaultyBroker<B> {
    pub inner: B,
    pub faults: Faults,
    pub probe: Probe,
}

/// A producer whose sends fail now and then; it tells the probe which
/// records (by their script's number) reached the failure topic.
#[derive(Clone)]
pub struct FaultyProducer<P> {
    inner: P,
    faults: Faults,
    probe: Probe,
}

impl<P: Producer> Producer for FaultyProducer<P> {
    async fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        self.faults.broker("a send")?;
        let n = record.payload.as_deref().and_then(Script::number);
        let delivery = self.inner.send(record, timeout).await?;
        let mut observed = self.probe.lock();
        if let Some(n) = n {
            observed.routed.insert(n);
            // Where the record was consumed: its last call's entry.
            let last = observed
                .log
                .iter()
                .rev()
                .find(|entry| entry.n == n)
                .cloned();
            if let Some(last) = last {
                observed.log.push(Entry {
                    what: What::Routed,
                    ..last
                });
            }
        }
        drop(observed);
        self.probe.progress.notify_waiters();
        Ok(delivery)
    }
}

impl<B: Broker> Broker for FaultyBroker<B> {
    type Consumer = FaultyConsumer<B::Consumer>;
    type Producer = FaultyProducer<B::Producer>;

    fn durable(&self) -> bool {
        self.inner.durable()
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<Self::Consumer, BrokerError> {
        Ok(FaultyConsumer {
            inner: self.inner.consumer(config).await?,
            faults: self.faults.clone(),
        })
    }

    fn producer(&self) -> Result<Self::Producer, BrokerError> {
        Ok(FaultyProducer {
            inner: self.inner.producer()?,
            faults: self.faults.clone(),
            probe: self.probe.clone(),
        })
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.faults.broker("a read")?;
        self.inner.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.inner.partitions(topic).await
    }
}

pub struct FaultyConsumer<C> {
    inner: C,
    faults: Faults,
}

impl<C: Consumer> Consumer for FaultyConsumer<C> {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        self.inner.poll().await
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.inner.store_offset(partition, offset)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.faults.broker("a commit")?;
        self.inner.commit().await
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.inner.pause(partition)
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.inner.resume(partition)
    }

    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        self.inner.high_watermark(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        self.inner.committed(partition).await
    }

    async fn close(self) {
        self.inner.close().await;
    }
}

/// How a store call goes wrong.
enum StoreFault {
    /// It fails before it writes anything.
    Unavailable,
    /// A batch writes its first writes, then fails.
    Partway,
    /// It writes everything, but answers only after a while, with a timeout:
    /// the caller cannot tell that it landed.
    TimedOut,
}

impl Faults {
    fn store_fault(&self) -> Option<StoreFault> {
        if !self.strike() {
            return None;
        }
        let draw = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next()
            % 3;
        Some(match draw {
            0 => StoreFault::Unavailable,
            1 => StoreFault::Partway,
            _ => StoreFault::TimedOut,
        })
    }
}

/// How long a timed-out store call takes before it answers.
const STORE_TIMEOUT: Duration = Duration::from_secs(3);

/// The members' stores, whose every call fails now and then: before it
/// writes, partway through a batch, or after it wrote (a timeout). It
/// tells the probe which application timers were written: a handler cannot
/// know whether its timers' commit, after it returned, succeeded.
#[derive(Clone)]
pub struct FaultyStores {
    pub inner: MemoryStores,
    pub faults: Faults,
    pub probe: Probe,
}

impl FaultyStores {
    /// A read, or a write outside a batch: fails before it runs, or after
    /// (it ran: a write landed).
    async fn call<T>(
        &self,
        what: &str,
        run: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.faults.store_fault() {
            None => run.await,
            Some(StoreFault::Unavailable | StoreFault::Partway) => {
                Err(StoreError::unavailable(format!("injected: {what} failed")))
            }
            Some(StoreFault::TimedOut) => {
                let _ = run.await;
                tokio::time::sleep(STORE_TIMEOUT).await;
                Err(StoreError::unavailable(format!(
                    "injected: {what} timed out"
                )))
            }
        }
    }

    fn written(&self, batch: &Batch) {
        let written = batch.timers.iter().filter_map(|write| match &write.change {
            TimerChange::Schedule { time, .. } if write.kind == TimerKind::Application => {
                Some((write.key.to_string(), time.as_millis()))
            }
            _ => None,
        });
        self.probe.lock().timers_written.extend(written);
        self.probe.progress.notify_waiters();
    }
}

/// The first `count` writes of `batch`, in the order a batch applies them.
fn prefix(batch: &Batch, count: usize) -> Batch {
    let timers: Vec<_> = batch.timers.iter().take(count).cloned().collect();
    let count = count - timers.len();
    let deferrals: Vec<_> = batch.deferrals.iter().take(count).cloned().collect();
    let count = count - deferrals.len();
    let state: Vec<_> = batch.state.iter().take(count).cloned().collect();
    let count = count - state.len();
    Batch {
        timers,
        deferrals,
        state,
        dedup: batch.dedup.iter().take(count).copied().collect(),
    }
}

impl Wrapped for FaultyStores {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    /// Every batch goes to `commit`, where the faults are.
    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }

    /// Every lookup goes to `contains`, where the faults are.
    fn contains_now(&self, _: DedupKey) -> Option<bool> {
        None
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        let landed = match self.faults.store_fault() {
            None => batch,
            Some(StoreFault::Unavailable) => {
                return Err(StoreError::unavailable("injected: a commit failed"));
            }
            Some(StoreFault::Partway) => {
                let count = self.faults.below(batch.len());
                let landed = prefix(&batch, count);
                self.inner.commit(partition, landed.clone()).await?;
                self.written(&landed);
                return Err(StoreError::unavailable(format!(
                    "injected: a commit failed after {count} of {} writes",
                    batch.len()
                )));
            }
            Some(StoreFault::TimedOut) => {
                self.inner.commit(partition, batch.clone()).await?;
                self.written(&batch);
                tokio::time::sleep(STORE_TIMEOUT).await;
                return Err(StoreError::unavailable("injected: a commit timed out"));
            }
        };
        self.inner.commit(partition, landed.clone()).await?;
        self.written(&landed);
        Ok(())
    }
    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.call(
            "reading a key's timers",
            self.inner.scheduled(partition, key, kind),
        )
        .await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.call("loading timers", self.inner.load(partition, from, until))
            .await
    }
    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.call("reading deferred counts", self.inner.counts(partition))
            .await
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.call(
            "reading deferred offsets",
            DeferStore::deferred(&self.inner, partition, key),
        )
        .await
    }
    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.call(
            "a state read",
            self.inner.cell(partition, collection, key, item),
        )
        .await
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
        self.call(
            "a state scan",
            self.inner
                .cells(partition, collection, key, range, direction, limit),
        )
        .await
    }
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.call("a dedup lookup", self.inner.contains(key)).await
    }
}
