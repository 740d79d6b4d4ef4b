//! Reading one record back at an offset.

use crate::consumer::{list, record};
use crate::error::{backend, retriable_failure};
use prosody_contracts::broker::{BrokerError, Record, TopicPartition};
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

/// A consumer outside any group that reads single records back, and
/// answers metadata requests (a topic's partition count).
///
/// Invariant: one read at a time (the lock). Between reads the consumer
/// holds at most one partition, and only right after a read that found its
/// record: `position` then names it and the offset its queue delivers next.
/// A read at or up to `discard_threshold` records past `position` reads on
/// from there, discarding what lies between; any other read seeks afresh.
/// A read that finds nothing, or fails, gives the partition up.
pub(crate) struct Reader {
    /// Outside the lock: a metadata request needs no cursor, and librdkafka
    /// takes it from any thread while a read polls.
    consumer: BaseConsumer,
    /// Where the consumer's queue stands: the partition and the offset it
    /// delivers next, after a read that found its record.
    position: Mutex<Option<(TopicPartition, i64)>>,
    discard_threshold: i64,
}

/// How a read begins.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// Read on from the queue's position.
    Continue,
    /// Assign the partition at the offset.
    Seek,
}

/// Reads on when `offset` is at most `threshold` records past `position`
/// on the same partition; seeks otherwise.
fn start(
    position: Option<&(TopicPartition, i64)>,
    partition: &TopicPartition,
    offset: i64,
    threshold: i64,
) -> Start {
    match position {
        Some((at, next)) if at == partition && offset >= *next && offset - next <= threshold => {
            Start::Continue
        }
        _ => Start::Seek,
    }
}

impl Reader {
    pub(crate) fn new(consumer: BaseConsumer, discard_threshold: i64) -> Self {
        Self {
            consumer,
            position: Mutex::new(None),
            discard_threshold,
        }
    }

    /// How many partitions `topic` has; `None` if the cluster does not know
    /// it. The consumer does not ask the broker to create topics
    /// (`allow.auto.create.topics` is off for consumers), so asking never
    /// creates one.
    pub(crate) fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .map_err(backend)?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        match found.error().map(RDKafkaErrorCode::from) {
            None => Ok(Some(
                i32::try_from(found.partitions().len()).unwrap_or(i32::MAX),
            )),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                Ok(None)
            }
            Some(code) => Err(backend(KafkaError::MetadataFetch(code))),
        }
    }

    /// The record at exactly `offset`, `None` if the log holds none there
    /// (past the end, removed, or compacted away).
    pub(crate) fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        let deadline = Instant::now()
            .checked_add(READ_DEADLINE)
            .unwrap_or_else(Instant::now);
        let mut cursor = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        let position = cursor.take();
        let how = start(position.as_ref(), partition, offset, self.discard_threshold);
        let consumer = &self.consumer;
        let mut found = match how {
            Start::Continue => Self::find(consumer, partition, offset, deadline),
            Start::Seek => Self::seek(consumer, partition, offset, deadline),
        };
        if how == Start::Continue && !matches!(found, Ok(Some(_))) {
            // The queue may hold an end-of-partition event from before the
            // record was written, or an error of the long-lived fetch: only
            // a fresh seek can say the record is absent. (Assigning anew
            // makes librdkafka discard what the old queue still holds.)
            found = Self::seek(consumer, partition, offset, deadline);
        }
        if matches!(found, Ok(Some(_))) {
            *cursor = Some((partition.clone(), offset.saturating_add(1)));
        } else {
            let _ = consumer.unassign();
        }
        found
    }

    /// Assigns the partition at `offset` and reads the record there.
    fn seek(
        consumer: &BaseConsumer,
        partition: &TopicPartition,
        offset: i64,
        deadline: Instant,
    ) -> Result<Option<Record>, BrokerError> {
        Self::check_exists(consumer, partition, deadline)?;
        let list = list(partition, Offset::Offset(offset))?;
        consumer.assign(&list).map_err(backend)?;
        Self::find(consumer, partition, offset, deadline)
    }

    /// An unknown topic or partition is an error at once, not a read that
    /// waits out its deadline.
    fn check_exists(
        consumer: &BaseConsumer,
        partition: &TopicPartition,
        deadline: Instant,
    ) -> Result<(), BrokerError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let metadata = consumer
            .fetch_metadata(Some(&partition.topic), METADATA_TIMEOUT.min(left))
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
        deadline: Instant,
    ) -> Result<Option<Record>, BrokerError> {
        let mut topics = HashMap::new();
        while Instant::now() < deadline {
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

#[cfg(test)]
mod tests {
    use super::{Start, start};
    use prosody_contracts::broker::TopicPartition;

    #[test]
    fn reads_on_only_forward_within_the_threshold_on_the_same_partition() {
        let here = TopicPartition::new("orders", 0);
        let there = TopicPartition::new("orders", 1);
        let position = Some((here.clone(), 50));
        let at =
            |partition: &TopicPartition, offset| start(position.as_ref(), partition, offset, 100);
        assert_eq!(at(&here, 50), Start::Continue);
        assert_eq!(at(&here, 150), Start::Continue);
        assert_eq!(at(&here, 151), Start::Seek);
        assert_eq!(at(&here, 49), Start::Seek);
        assert_eq!(at(&there, 50), Start::Seek);
        assert_eq!(start(None, &here, 50, 100), Start::Seek);
        assert_eq!(start(position.as_ref(), &here, 51, 0), Start::Seek);
        assert_eq!(start(position.as_ref(), &here, 50, 0), Start::Continue);
    }
}
