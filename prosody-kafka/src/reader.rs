//! Reading one record back at an offset.

use crate::consumer::{list, record};
use crate::error::{backend, retriable_failure};
use prosody_core::broker::{BrokerError, Record, TopicPartition};
use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message as _;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest one read may block its thread.
pub(crate) const READ_DEADLINE: Duration = Duration::from_secs(30);

/// How long the metadata check of a read may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one rdkafka poll of a read waits.
const POLL: Duration = Duration::from_millis(50);

/// A consumer outside any group, assigned one partition per read.
///
/// Invariant: one read at a time (the lock), and the consumer holds no
/// assignment between reads, so it fetches nothing in the background.
pub(crate) struct Reader {
    consumer: Mutex<BaseConsumer>,
}

impl Reader {
    pub(crate) fn new(consumer: BaseConsumer) -> Self {
        Self {
            consumer: Mutex::new(consumer),
        }
    }

    /// The record at exactly `offset`, `None` if the log holds none there
    /// (past the end, removed, or compacted away).
    pub(crate) fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        let consumer = self.consumer.lock().unwrap_or_else(PoisonError::into_inner);
        Self::check_exists(&consumer, partition)?;
        let list = list(partition, Offset::Offset(offset))?;
        consumer.assign(&list).map_err(backend)?;
        let found = Self::find(&consumer, partition, offset);
        let _ = consumer.unassign();
        found
    }

    /// An unknown topic or partition is an error at once, not a read that
    /// waits out its deadline.
    fn check_exists(
        consumer: &BaseConsumer,
        partition: &TopicPartition,
    ) -> Result<(), BrokerError> {
        let metadata = consumer
            .fetch_metadata(Some(&partition.topic), METADATA_TIMEOUT)
            .map_err(backend)?;
        let topic = metadata
            .topics()
            .iter()
            .find(|topic| topic.name() == &*partition.topic);
        match topic {
            Some(topic) if topic.error().is_none() => {
                let known = topic
                    .partitions()
                    .iter()
                    .any(|p| p.id() == partition.partition);
                if known {
                    Ok(())
                } else {
                    Err(BrokerError::UnknownPartition(partition.clone()))
                }
            }
            _ => Err(BrokerError::UnknownTopic(partition.topic.clone())),
        }
    }

    fn find(
        consumer: &BaseConsumer,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        let start = Instant::now();
        let mut topics = HashMap::new();
        while start.elapsed() < READ_DEADLINE {
            match consumer.poll(POLL) {
                None => {}
                Some(Ok(message)) => {
                    let ours = message.topic() == &*partition.topic
                        && message.partition() == partition.partition;
                    if !ours || message.offset() < offset {
                        continue;
                    }
                    if message.offset() > offset {
                        // The offset was compacted away.
                        return Ok(None);
                    }
                    return Ok(Some(record(&message, &mut topics)));
                }
                Some(Err(KafkaError::PartitionEOF(p))) if p == partition.partition => {
                    return Ok(None);
                }
                Some(Err(error)) => {
                    return match error.rdkafka_error_code() {
                        Some(
                            RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset,
                        ) => Ok(None),
                        Some(
                            RDKafkaErrorCode::UnknownTopicOrPartition
                            | RDKafkaErrorCode::UnknownTopic,
                        ) => Err(BrokerError::UnknownTopic(partition.topic.clone())),
                        Some(RDKafkaErrorCode::UnknownPartition) => {
                            Err(BrokerError::UnknownPartition(partition.clone()))
                        }
                        _ => Err(backend(error)),
                    };
                }
            }
        }
        Err(retriable_failure(format!(
            "reading offset {offset} of {partition} took over {READ_DEADLINE:?}"
        )))
    }
}
