//! A broker that never delivers the records of some partitions: they stay
//! assigned to their member, which receives nothing from them, as from a
//! partition whose fetches stall.

use prosody::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Record, TopicPartition,
};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// `inner`, except that its consumers never deliver a record of
/// `withheld`.
#[derive(Clone)]
pub struct Withholding<B> {
    pub inner: B,
    pub withheld: Arc<HashSet<TopicPartition>>,
}

impl<B: Broker> Broker for Withholding<B> {
    type Consumer = WithholdingConsumer<B::Consumer>;
    type Producer = B::Producer;

    fn durable(&self) -> bool {
        self.inner.durable()
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<Self::Consumer, BrokerError> {
        Ok(WithholdingConsumer {
            inner: self.inner.consumer(config).await?,
            withheld: Arc::clone(&self.withheld),
        })
    }

    fn producer(&self) -> Result<Self::Producer, BrokerError> {
        self.inner.producer()
    }

    fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> impl Future<Output = Result<Option<Record>, BrokerError>> + Send {
        self.inner.read(partition, offset)
    }

    fn partitions(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Option<i32>, BrokerError>> + Send {
        self.inner.partitions(topic)
    }
}

/// A consumer that skips the records of the withheld partitions.
pub struct WithholdingConsumer<C> {
    inner: C,
    withheld: Arc<HashSet<TopicPartition>>,
}

impl<C: Consumer> Consumer for WithholdingConsumer<C> {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        loop {
            match self.inner.poll().await? {
                ConsumerEvent::Record(record)
                    if self.withheld.contains(&record.topic_partition()) => {}
                event => return Ok(event),
            }
        }
    }

    fn store_offset(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.inner.store_offset(tp, offset)
    }

    fn commit(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send {
        self.inner.commit()
    }

    fn pause(&mut self, tp: &TopicPartition) -> Result<(), BrokerError> {
        self.inner.pause(tp)
    }

    fn resume(&mut self, tp: &TopicPartition) -> Result<(), BrokerError> {
        self.inner.resume(tp)
    }

    fn committed(
        &mut self,
        tp: &TopicPartition,
    ) -> impl Future<Output = Result<Option<i64>, BrokerError>> + Send {
        self.inner.committed(tp)
    }

    fn committed_offsets(
        &mut self,
        tps: &[TopicPartition],
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<Option<i64>>, BrokerError>> + Send {
        self.inner.committed_offsets(tps, timeout)
    }

    fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.inner.high_watermark(tp)
    }

    fn close(self) -> impl Future<Output = ()> + Send {
        self.inner.close()
    }
}
