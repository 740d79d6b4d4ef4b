//! The client's broker: in memory (mock mode) or Kafka, chosen at build
//! time. An enum rather than a type parameter, so a client's type does not
//! depend on where it runs.

use prosody_core::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
use prosody_kafka::{KafkaBroker, KafkaConsumer, KafkaProducer};
use prosody_memory::{MemoryBroker, MemoryConsumer, MemoryProducer};
use std::time::Duration;

/// Where a client's records live.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The in-process broker of mock mode.
    Memory(MemoryBroker),
    /// A Kafka cluster.
    Kafka(KafkaBroker),
}

/// A group member of either backend.
pub enum BackendConsumer {
    /// In memory.
    Memory(MemoryConsumer),
    /// On Kafka (boxed: it is several times the memory consumer's size).
    Kafka(Box<KafkaConsumer>),
}

/// A producer of either backend.
#[derive(Clone, Debug)]
pub enum BackendProducer {
    /// In memory.
    Memory(MemoryProducer),
    /// On Kafka.
    Kafka(KafkaProducer),
}

impl Broker for Backend {
    type Consumer = BackendConsumer;
    type Producer = BackendProducer;

    async fn consumer(&self, config: &ConsumerConfig) -> Result<BackendConsumer, BrokerError> {
        Ok(match self {
            Self::Memory(broker) => BackendConsumer::Memory(broker.consumer(config).await?),
            Self::Kafka(broker) => BackendConsumer::Kafka(Box::new(broker.consumer(config).await?)),
        })
    }

    fn producer(&self) -> Result<BackendProducer, BrokerError> {
        Ok(match self {
            Self::Memory(broker) => BackendProducer::Memory(broker.producer()?),
            Self::Kafka(broker) => BackendProducer::Kafka(broker.producer()?),
        })
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        match self {
            Self::Memory(broker) => broker.read(partition, offset).await,
            Self::Kafka(broker) => broker.read(partition, offset).await,
        }
    }
}

impl Consumer for BackendConsumer {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.poll().await,
            Self::Kafka(consumer) => consumer.poll().await,
        }
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.store_offset(partition, offset),
            Self::Kafka(consumer) => consumer.store_offset(partition, offset),
        }
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.commit().await,
            Self::Kafka(consumer) => consumer.commit().await,
        }
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.pause(partition),
            Self::Kafka(consumer) => consumer.pause(partition),
        }
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.resume(partition),
            Self::Kafka(consumer) => consumer.resume(partition),
        }
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        match self {
            Self::Memory(consumer) => consumer.committed(partition).await,
            Self::Kafka(consumer) => consumer.committed(partition).await,
        }
    }

    async fn close(self) {
        match self {
            Self::Memory(consumer) => consumer.close().await,
            Self::Kafka(consumer) => (*consumer).close().await,
        }
    }
}

impl Producer for BackendProducer {
    async fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        match self {
            Self::Memory(producer) => producer.send(record, timeout).await,
            Self::Kafka(producer) => producer.send(record, timeout).await,
        }
    }
}
