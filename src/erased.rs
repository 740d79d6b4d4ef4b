//! A broker of the caller's behind one pointer: the broker traits with
//! boxed futures, for [`ClientBuilder::broker`](crate::ClientBuilder::broker).
//! The built-in brokers do not pass through here.

use prosody_core::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, BrokerError>> + Send + 'a>>;

/// [`Broker`], object-safe.
trait DynBroker: Send + Sync {
    fn durable(&self) -> bool;
    fn consumer<'a>(&'a self, config: &'a ConsumerConfig) -> Call<'a, Box<dyn DynConsumer>>;
    fn producer(&self) -> Result<Arc<dyn DynProducer>, BrokerError>;
    fn read<'a>(&'a self, partition: &'a TopicPartition, offset: i64) -> Call<'a, Option<Record>>;
    fn partitions<'a>(&'a self, topic: &'a str) -> Call<'a, Option<i32>>;
}

/// [`Consumer`], object-safe.
trait DynConsumer: Send {
    fn poll(&mut self) -> Call<'_, ConsumerEvent>;
    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError>;
    fn commit(&mut self) -> Call<'_, ()>;
    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError>;
    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError>;
    fn committed<'a>(&'a mut self, partition: &'a TopicPartition) -> Call<'a, Option<i64>>;
    fn committed_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
        timeout: Duration,
    ) -> Call<'a, Vec<Option<i64>>>;
    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64>;
    fn close(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// [`Producer`], object-safe.
trait DynProducer: Send + Sync {
    fn send(&self, record: OutgoingRecord, timeout: Duration) -> Call<'_, Delivery>;
}

impl<B: Broker> DynBroker for B {
    fn durable(&self) -> bool {
        Broker::durable(self)
    }

    fn consumer<'a>(&'a self, config: &'a ConsumerConfig) -> Call<'a, Box<dyn DynConsumer>> {
        Box::pin(async move {
            let consumer = Broker::consumer(self, config).await?;
            Ok(Box::new(consumer) as Box<dyn DynConsumer>)
        })
    }

    fn producer(&self) -> Result<Arc<dyn DynProducer>, BrokerError> {
        Ok(Arc::new(Broker::producer(self)?))
    }

    fn read<'a>(&'a self, partition: &'a TopicPartition, offset: i64) -> Call<'a, Option<Record>> {
        Box::pin(Broker::read(self, partition, offset))
    }

    fn partitions<'a>(&'a self, topic: &'a str) -> Call<'a, Option<i32>> {
        Box::pin(Broker::partitions(self, topic))
    }
}

impl<C: Consumer> DynConsumer for C {
    fn poll(&mut self) -> Call<'_, ConsumerEvent> {
        Box::pin(Consumer::poll(self))
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        Consumer::store_offset(self, partition, offset)
    }

    fn commit(&mut self) -> Call<'_, ()> {
        Box::pin(Consumer::commit(self))
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        Consumer::pause(self, partition)
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        Consumer::resume(self, partition)
    }

    fn committed<'a>(&'a mut self, partition: &'a TopicPartition) -> Call<'a, Option<i64>> {
        Box::pin(Consumer::committed(self, partition))
    }

    fn committed_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
        timeout: Duration,
    ) -> Call<'a, Vec<Option<i64>>> {
        Box::pin(Consumer::committed_offsets(self, partitions, timeout))
    }

    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        Consumer::high_watermark(self, partition)
    }

    fn close(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(Consumer::close(*self))
    }
}

impl<P: Producer> DynProducer for P {
    fn send(&self, record: OutgoingRecord, timeout: Duration) -> Call<'_, Delivery> {
        Box::pin(Producer::send(self, record, timeout))
    }
}

/// Any broker, as one type.
#[derive(Clone)]
pub(crate) struct ErasedBroker(Arc<dyn DynBroker>);

/// Any broker's consumer, as one type.
pub(crate) struct ErasedConsumer(Box<dyn DynConsumer>);

/// Any broker's producer, as one type.
#[derive(Clone)]
pub(crate) struct ErasedProducer(Arc<dyn DynProducer>);

impl ErasedBroker {
    pub(crate) fn new(broker: impl Broker) -> Self {
        Self(Arc::new(broker))
    }
}

impl Broker for ErasedBroker {
    type Consumer = ErasedConsumer;
    type Producer = ErasedProducer;

    fn durable(&self) -> bool {
        self.0.durable()
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<ErasedConsumer, BrokerError> {
        Ok(ErasedConsumer(self.0.consumer(config).await?))
    }

    fn producer(&self) -> Result<ErasedProducer, BrokerError> {
        Ok(ErasedProducer(self.0.producer()?))
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.0.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.0.partitions(topic).await
    }
}

impl Consumer for ErasedConsumer {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        self.0.poll().await
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.0.store_offset(partition, offset)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.0.commit().await
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.0.pause(partition)
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.0.resume(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        self.0.committed(partition).await
    }

    async fn committed_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timeout: Duration,
    ) -> Result<Vec<Option<i64>>, BrokerError> {
        self.0.committed_offsets(partitions, timeout).await
    }

    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        self.0.high_watermark(partition)
    }

    async fn close(self) {
        self.0.close().await;
    }
}

impl Producer for ErasedProducer {
    async fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        self.0.send(record, timeout).await
    }
}
