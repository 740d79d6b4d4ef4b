//! The broker contract: a consumer in a group and a producer.
//!
//! Kafka and the in-memory broker implement it, and both run the one
//! conformance suite in `prosody-conformance`.

mod partitioner;

pub use partitioner::{murmur2, partition_for_key};

use crate::clock::Timestamp;
use crate::error::BoxError;
use crate::event::{Headers, Topic};
use bytes::Bytes;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// How a group member joins its consumer group.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum GroupProtocol {
    /// The classic protocol, with the cooperative-sticky assignor: a
    /// rebalance moves only the partitions that change owner.
    #[default]
    Classic,
    /// Kafka 4's consumer group protocol (KIP-848): the broker assigns partitions, incrementally. It needs a
    /// broker that has it (Kafka 4.0 or newer); session timeouts are the
    /// broker's settings under it.
    Consumer,
}

impl GroupProtocol {
    /// The name Kafka's `group.protocol` and the environment use: `classic` or `consumer`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
        }
    }
}

impl std::str::FromStr for GroupProtocol {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "classic" => Ok(Self::Classic),
            "consumer" => Ok(Self::Consumer),
            other => Err(format!("{other:?} is not classic or consumer")),
        }
    }
}

impl std::fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One partition of one topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic.
    pub topic: Topic,
    /// The partition number, from zero.
    pub partition: i32,
}

impl TopicPartition {
    /// Names a partition.
    #[must_use]
    pub fn new(topic: impl Into<Topic>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// A record as stored in a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its topic.
    pub topic: Topic,
    /// Its partition.
    pub partition: i32,
    /// Its offset; offsets grow within a partition.
    pub offset: i64,
    /// Its timestamp.
    pub timestamp: Timestamp,
    /// Its key, if it has one.
    pub key: Option<Bytes>,
    /// Its payload; `None` is a tombstone.
    pub payload: Option<Bytes>,
    /// Its headers.
    pub headers: Headers,
}

impl Record {
    /// The partition the record belongs to.
    #[must_use]
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }
}

/// A record to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingRecord {
    /// The topic to write to.
    pub topic: Topic,
    /// A fixed partition; `None` chooses by key with Kafka's partitioner.
    pub partition: Option<i32>,
    /// The key.
    pub key: Option<Bytes>,
    /// The payload; `None` writes a tombstone.
    pub payload: Option<Bytes>,
    /// The headers.
    pub headers: Headers,
    /// The timestamp; `None` takes the producer's current time.
    pub timestamp: Option<Timestamp>,
}

impl OutgoingRecord {
    /// A keyed record with a payload and no headers.
    #[must_use]
    pub fn new(topic: impl Into<Topic>, key: impl Into<Bytes>, payload: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            partition: None,
            key: Some(key.into()),
            payload: Some(payload.into()),
            headers: Headers::new(),
            timestamp: None,
        }
    }

    /// A tombstone for a key.
    #[must_use]
    pub fn tombstone(topic: impl Into<Topic>, key: impl Into<Bytes>) -> Self {
        Self {
            payload: None,
            ..Self::new(topic, key, Bytes::new())
        }
    }
}

/// Where a produced record landed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// What a consumer's poll yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumerEvent {
    /// The next record of an assigned, unpaused partition.
    Record(Record),
    /// Partitions newly assigned to this member. Reading starts at the
    /// group's committed offset, or at the earliest offset when there is none.
    Assigned(Vec<TopicPartition>),
    /// Partitions leaving this member. They stay this member's, and their
    /// offsets can still be stored and committed, until the next call of
    /// [`Consumer::poll`]: the caller drains and commits before polling again.
    Revoked(Vec<TopicPartition>),
}

/// A broker operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A send was not acknowledged in time. `unsent` says whether the
    /// record may still be written after this error
    /// ([`Unsent::MayArrive`]) or never will be ([`Unsent::GivenUp`]).
    #[error("sending to topic {topic} timed out after {timeout:?}: {unsent}")]
    SendTimeout {
        /// The topic.
        topic: Topic,
        /// The time that ran out: the producer's delivery timeout when it
        /// gave the record up, else the wait the caller allowed.
        timeout: Duration,
        /// What became of the record.
        unsent: Unsent,
    },
    /// The topic does not exist.
    #[error("unknown topic {0}")]
    UnknownTopic(Topic),
    /// The partition does not exist.
    #[error("unknown partition {0}")]
    UnknownPartition(TopicPartition),
    /// The partition is not assigned to this member.
    #[error("partition {0} is not assigned to this consumer")]
    NotAssigned(TopicPartition),
    /// An invalid argument, named in the message.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The consumer or producer is closed.
    #[error("the broker connection is closed")]
    Closed,
    /// Any other failure of the backend.
    #[error("broker failure: {source}")]
    Backend {
        /// Whether trying again may succeed.
        retriable: bool,
        /// The backend's error.
        source: BoxError,
    },
}

impl BrokerError {
    /// A short fixed name of the error's kind, for a metric attribute.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SendTimeout { .. } => "timeout",
            Self::UnknownTopic(_) => "unknown_topic",
            Self::UnknownPartition(_) => "unknown_partition",
            Self::NotAssigned(_) => "not_assigned",
            Self::Invalid(_) => "invalid",
            Self::Closed => "closed",
            Self::Backend { .. } => "backend",
        }
    }

    /// Whether trying the same operation again may succeed.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::SendTimeout { .. } => true,
            Self::Backend { retriable, .. } => *retriable,
            Self::UnknownTopic(_)
            | Self::UnknownPartition(_)
            | Self::NotAssigned(_)
            | Self::Invalid(_)
            | Self::Closed => false,
        }
    }
}

/// What became of a record whose send timed out
/// ([`BrokerError::SendTimeout`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unsent {
    /// The producer gave the record up and will never send it again:
    /// nothing arrives after the error. Only if the record was in flight
    /// when it timed out (sent to the broker, its acknowledgement missing)
    /// may the broker have written it already; which of the two held, the
    /// producer cannot tell. A retry may duplicate it then, never lose it.
    GivenUp,
    /// The wait ended while the producer still held the record: it may be
    /// written after the error, and a retry may duplicate it.
    MayArrive,
}

impl fmt::Display for Unsent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::GivenUp => {
                "the producer gave it up and will not send it again \
                 (the broker may have written it only if it was in flight then)"
            }
            Self::MayArrive => "the producer still holds it, so it may still be written later",
        })
    }
}

/// How a consumer joins its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// The consumer group.
    pub group_id: String,
    /// The topics to consume.
    pub topics: Vec<Topic>,
}

/// A broker: makes consumers and producers, and reads records back by offset.
pub trait Broker: Clone + Send + Sync + 'static {
    /// Its consumer.
    type Consumer: Consumer;
    /// Its producer.
    type Producer: Producer;

    /// Whether its records outlive this process (a cluster's do; an
    /// in-process broker's do not). A client keeps its stores in memory
    /// only behind a broker whose records die with it, unless told.
    fn durable(&self) -> bool;

    /// Joins a consumer group.
    fn consumer(
        &self,
        config: &ConsumerConfig,
    ) -> impl Future<Output = Result<Self::Consumer, BrokerError>> + Send;

    /// A producer.
    fn producer(&self) -> Result<Self::Producer, BrokerError>;

    /// The record at exactly `offset`, or `None` if the partition holds no
    /// record there (not yet written, or removed by retention or compaction).
    /// An unknown topic or partition is an error.
    fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> impl Future<Output = Result<Option<Record>, BrokerError>> + Send;

    /// How many partitions `topic` has; `None` when the topic does not exist.
    ///
    /// With it a client computes the partition a key lands on
    /// ([`partition_for_key`]) for a topic it does not consume. After a
    /// topic is created with `N` partitions, it reports `Some(N)`. An
    /// unknown topic is `Ok(None)`, not an error, and asking never creates
    /// the topic (a backend whose broker creates topics on first use does
    /// not do so for this call). A broker that cannot be reached, or does
    /// not answer in the backend's time, is an error: a retriable
    /// [`BrokerError::Backend`].
    fn partitions(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Option<i32>, BrokerError>> + Send;
}

/// A member of a consumer group.
///
/// Offsets are "next to read": storing offset `n` for a partition means every
/// record before `n` is settled.
pub trait Consumer: Send + 'static {
    /// The next record or assignment change. Cancel-safe: dropping the future
    /// before it completes loses nothing.
    fn poll(&mut self) -> impl Future<Output = Result<ConsumerEvent, BrokerError>> + Send;

    /// Marks every record of an assigned partition before `offset` as settled;
    /// the next [`Consumer::commit`] makes it durable.
    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError>;

    /// Commits the stored offsets of the assigned partitions.
    fn commit(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Stops delivering records of an assigned partition.
    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError>;

    /// Delivers records of a paused partition again, from where it stopped.
    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError>;

    /// The group's committed offset for a partition.
    fn committed(
        &mut self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<Option<i64>, BrokerError>> + Send;

    /// The group's committed offsets of `partitions`, in their order:
    /// `None` for a partition the group never committed, or that does not
    /// exist. A backend that can asks the broker once for all of them, and
    /// waits about `timeout` at most; the default asks
    /// [`committed`](Self::committed) for each in turn.
    fn committed_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<Option<i64>>, BrokerError>> + Send {
        let _ = timeout;
        async move {
            let mut offsets = Vec::with_capacity(partitions.len());
            for partition in partitions {
                offsets.push(self.committed(partition).await?);
            }
            Ok(offsets)
        }
    }

    /// The high watermark of an assigned partition (the offset one past its
    /// last record) as the consumer last learned it, if it knows one. It
    /// does not ask the broker: it may be as old as the backend's refresh
    /// interval. The lag gauge reads it; the default knows none.
    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        let _ = partition;
        None
    }

    /// Leaves the group; the member's partitions move to the others. Whether
    /// stored but uncommitted offsets are committed on the way out is the
    /// backend's choice: callers commit first.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Sends records.
pub trait Producer: Clone + Send + Sync + 'static {
    /// Sends one record and waits for the broker's acknowledgement.
    ///
    /// `timeout` is how long the caller allows. A backend whose producer
    /// has a delivery timeout of its own (Kafka's `message.timeout.ms`, one
    /// per producer) waits instead, when `timeout` is at least that long,
    /// for the producer's own verdict: at most the delivery timeout plus a
    /// small margin the backend documents. A send that returns an error is
    /// then never delivered afterwards; only [`BrokerError::SendTimeout`]
    /// with [`Unsent::MayArrive`] leaves a record that may still be written.
    fn send(
        &self,
        record: OutgoingRecord,
        timeout: Duration,
    ) -> impl Future<Output = Result<Delivery, BrokerError>> + Send;
}
