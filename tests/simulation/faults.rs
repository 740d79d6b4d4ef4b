//! Fault injection: wrappers around the broker and store traits that fail
//! some calls transiently, drawn from the scenario's seed. The production
//! backends stay free of test hooks.

use crate::handler::{Entry, Probe, What};
use crate::scenario::Rng;
use crate::scenario::Script;
use prosody::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
use prosody_core::Key;
use prosody_core::clock::Timestamp;
use prosody_core::store::StoreError;
use prosody_core::store::dedup::{DedupKey, DedupStore};
use prosody_core::store::defer::{DeferStore, Deferral, Deferred};
use prosody_core::store::timer::{TimerEntry, TimerKind, TimerStore};
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

    fn store(&self, what: &str) -> Result<(), StoreError> {
        if self.strike() {
            return Err(StoreError::unavailable(format!("injected: {what} failed")));
        }
        Ok(())
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

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        self.inner.committed(partition).await
    }

    async fn close(self) {
        self.inner.close().await;
    }
}

/// A timer store whose every call fails now and then. It tells the probe
/// which application timers were written: a handler cannot know whether its
/// timers' commit, after it returned, succeeded.
#[derive(Clone)]
pub struct FaultyTimers<T> {
    pub inner: T,
    pub faults: Faults,
    pub probe: Probe,
}

impl<T: TimerStore> TimerStore for FaultyTimers<T> {
    async fn schedule(
        &self,
        partition: &TopicPartition,
        entry: TimerEntry,
    ) -> Result<(), StoreError> {
        self.faults.store("scheduling a timer")?;
        let written = (entry.kind == TimerKind::Application)
            .then(|| (entry.key.to_string(), entry.time.as_millis()));
        self.inner.schedule(partition, entry).await?;
        self.probe.lock().timers_written.extend(written);
        self.probe.progress.notify_waiters();
        Ok(())
    }

    async fn unschedule(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
        time: Timestamp,
    ) -> Result<(), StoreError> {
        self.faults.store("unscheduling a timer")?;
        self.inner.unschedule(partition, key, kind, time).await
    }

    async fn clear(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<(), StoreError> {
        self.faults.store("clearing timers")?;
        self.inner.clear(partition, key, kind).await
    }

    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.faults.store("reading a key's timers")?;
        self.inner.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.faults.store("loading timers")?;
        self.inner.load(partition, from, until).await
    }
}

/// A defer store whose every call fails now and then.
#[derive(Clone)]
pub struct FaultyDefer<D> {
    pub inner: D,
    pub faults: Faults,
}

impl<D: DeferStore> DeferStore for FaultyDefer<D> {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.inner.peek(partition, key)
    }

    async fn defer(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
        deferral: Deferral,
    ) -> Result<(), StoreError> {
        self.faults.store("deferring")?;
        self.inner.defer(partition, key, offset, deferral).await
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.faults.store("reading deferred offsets")?;
        self.inner.deferred(partition, key).await
    }

    async fn complete(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
    ) -> Result<Option<i64>, StoreError> {
        self.faults.store("completing a deferred offset")?;
        self.inner.complete(partition, key, offset).await
    }

    async fn failed(&self, partition: &TopicPartition, key: &Key) -> Result<u32, StoreError> {
        self.faults.store("counting a failure")?;
        self.inner.failed(partition, key).await
    }

    async fn keys(&self, partition: &TopicPartition) -> Result<Vec<Key>, StoreError> {
        self.faults.store("listing deferred keys")?;
        self.inner.keys(partition).await
    }
}

/// A dedup store whose every call fails now and then.
#[derive(Clone)]
pub struct FaultyDedup<D> {
    pub inner: D,
    pub faults: Faults,
}

impl<D: DedupStore + Clone> DedupStore for FaultyDedup<D> {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.faults.store("a dedup lookup")?;
        self.inner.contains(key).await
    }

    async fn insert(&self, key: DedupKey, ttl: Duration) -> Result<(), StoreError> {
        self.faults.store("a dedup insert")?;
        self.inner.insert(key, ttl).await
    }
}
