//! The client's broker: in memory (mock mode) or Kafka, chosen at build
//! time. Opaque types over a private enum rather than a type parameter, so a
//! client's type does not depend on where it runs, and no public signature
//! names a backend.

use crate::erased::{ErasedBroker, ErasedConsumer, ErasedProducer};
use prosody_core::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
#[cfg(feature = "kafka")]
use prosody_kafka::{KafkaBroker, KafkaConsumer, KafkaProducer};
use prosody_memory::{MemoryBroker, MemoryConsumer, MemoryProducer};
use std::fmt;
use std::time::Duration;

/// Where a client's records live: the in-process broker of mock mode, a
/// Kafka cluster, or a broker of the caller's
/// ([`ClientBuilder::broker`](crate::ClientBuilder::broker)).
#[derive(Clone, Debug)]
pub struct Backend(Brokers);

#[derive(Clone)]
enum Brokers {
    Memory(MemoryBroker),
    #[cfg(feature = "kafka")]
    Kafka(KafkaBroker),
    Custom(ErasedBroker),
}

impl fmt::Debug for Brokers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory(broker) => broker.fmt(f),
            #[cfg(feature = "kafka")]
            Self::Kafka(broker) => broker.fmt(f),
            Self::Custom(_) => f.write_str("CustomBroker"),
        }
    }
}

/// A group member of the client's broker.
pub struct BackendConsumer(Consumers);

enum Consumers {
    Memory(MemoryConsumer),
    // Boxed: it is several times the memory consumer's size.
    #[cfg(feature = "kafka")]
    Kafka(Box<KafkaConsumer>),
    Custom(ErasedConsumer),
}

/// A producer of the client's broker.
#[derive(Clone, Debug)]
pub struct BackendProducer(Producers);

#[derive(Clone)]
enum Producers {
    Memory(MemoryProducer),
    #[cfg(feature = "kafka")]
    Kafka(KafkaProducer),
    Custom(ErasedProducer),
}

impl fmt::Debug for Producers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory(producer) => producer.fmt(f),
            #[cfg(feature = "kafka")]
            Self::Kafka(producer) => producer.fmt(f),
            Self::Custom(_) => f.write_str("CustomProducer"),
        }
    }
}

impl Backend {
    pub(crate) fn memory(broker: MemoryBroker) -> Self {
        Self(Brokers::Memory(broker))
    }

    #[cfg(feature = "kafka")]
    pub(crate) fn kafka(broker: KafkaBroker) -> Self {
        Self(Brokers::Kafka(broker))
    }

    /// A broker given to the builder: an in-memory one keeps its direct
    /// path, any other goes behind one pointer.
    pub(crate) fn given<B: Broker>(broker: B) -> Self {
        let any: &dyn std::any::Any = &broker;
        match any.downcast_ref::<MemoryBroker>() {
            Some(memory) => Self::memory(memory.clone()),
            None => Self(Brokers::Custom(ErasedBroker::new(broker))),
        }
    }

    /// The producer of sends a caller waits on (the client's `send` and
    /// requests): on Kafka one of its own that does not wait for a batch
    /// to fill ([`KafkaBroker::immediate`]), elsewhere the broker's.
    pub(crate) fn immediate_producer(&self) -> Result<BackendProducer, BrokerError> {
        match &self.0 {
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => Ok(BackendProducer(Producers::Kafka(
                broker.immediate().producer()?,
            ))),
            _ => self.producer(),
        }
    }

    /// Whether the records live in Kafka (not in this process).
    pub(crate) fn is_kafka(&self) -> bool {
        match self.0 {
            #[cfg(feature = "kafka")]
            Brokers::Kafka(_) => true,
            _ => false,
        }
    }
}

impl Broker for Backend {
    type Consumer = BackendConsumer;
    type Producer = BackendProducer;

    fn durable(&self) -> bool {
        match &self.0 {
            Brokers::Memory(broker) => broker.durable(),
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => broker.durable(),
            Brokers::Custom(broker) => broker.durable(),
        }
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<BackendConsumer, BrokerError> {
        Ok(BackendConsumer(match &self.0 {
            Brokers::Memory(broker) => Consumers::Memory(broker.consumer(config).await?),
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => Consumers::Kafka(Box::new(broker.consumer(config).await?)),
            Brokers::Custom(broker) => Consumers::Custom(broker.consumer(config).await?),
        }))
    }

    fn producer(&self) -> Result<BackendProducer, BrokerError> {
        Ok(BackendProducer(match &self.0 {
            Brokers::Memory(broker) => Producers::Memory(broker.producer()?),
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => Producers::Kafka(broker.producer()?),
            Brokers::Custom(broker) => Producers::Custom(broker.producer()?),
        }))
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        match &self.0 {
            Brokers::Memory(broker) => broker.read(partition, offset).await,
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => broker.read(partition, offset).await,
            Brokers::Custom(broker) => broker.read(partition, offset).await,
        }
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        match &self.0 {
            Brokers::Memory(broker) => broker.partitions(topic).await,
            #[cfg(feature = "kafka")]
            Brokers::Kafka(broker) => broker.partitions(topic).await,
            Brokers::Custom(broker) => broker.partitions(topic).await,
        }
    }
}

impl Consumer for BackendConsumer {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.poll().await,
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.poll().await,
            Consumers::Custom(consumer) => consumer.poll().await,
        }
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.store_offset(partition, offset),
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.store_offset(partition, offset),
            Consumers::Custom(consumer) => consumer.store_offset(partition, offset),
        }
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.commit().await,
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.commit().await,
            Consumers::Custom(consumer) => consumer.commit().await,
        }
    }

    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        match &self.0 {
            Consumers::Memory(consumer) => consumer.high_watermark(partition),
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.high_watermark(partition),
            Consumers::Custom(consumer) => consumer.high_watermark(partition),
        }
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.pause(partition),
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.pause(partition),
            Consumers::Custom(consumer) => consumer.pause(partition),
        }
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.resume(partition),
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.resume(partition),
            Consumers::Custom(consumer) => consumer.resume(partition),
        }
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.committed(partition).await,
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.committed(partition).await,
            Consumers::Custom(consumer) => consumer.committed(partition).await,
        }
    }

    async fn committed_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timeout: Duration,
    ) -> Result<Vec<Option<i64>>, BrokerError> {
        match &mut self.0 {
            Consumers::Memory(consumer) => consumer.committed_offsets(partitions, timeout).await,
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => consumer.committed_offsets(partitions, timeout).await,
            Consumers::Custom(consumer) => consumer.committed_offsets(partitions, timeout).await,
        }
    }

    async fn close(self) {
        match self.0 {
            Consumers::Memory(consumer) => consumer.close().await,
            #[cfg(feature = "kafka")]
            Consumers::Kafka(consumer) => (*consumer).close().await,
            Consumers::Custom(consumer) => consumer.close().await,
        }
    }
}

impl Producer for BackendProducer {
    async fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        match &self.0 {
            Producers::Memory(producer) => producer.send(record, timeout).await,
            #[cfg(feature = "kafka")]
            Producers::Kafka(producer) => producer.send(record, timeout).await,
            Producers::Custom(producer) => producer.send(record, timeout).await,
        }
    }
}
