//! Topics and their append-only partition logs.

use bytes::Bytes;
use prosody_contracts::broker::{
    BrokerError, Delivery, OutgoingRecord, Record, TopicPartition, partition_for_key,
};
use prosody_contracts::clock;
use prosody_contracts::event::Topic;
use std::collections::BTreeMap;

/// The partition count of a topic created by producing to it, as in Kafka's
/// mock cluster.
pub const AUTO_CREATE_PARTITIONS: i32 = 4;

/// The records of one partition.
///
/// Invariant: `records[i].offset == i` for every `i`; records are only ever
/// appended, so an offset names the same record for the log's whole life,
/// until it falls below `start` (records deleted, as retention deletes
/// them): from then on it names none.
#[derive(Debug, Default)]
struct PartitionLog {
    records: Vec<Record>,
    start: i64,
}

impl PartitionLog {
    /// The offset the next appended record gets.
    fn end_offset(&self) -> i64 {
        i64::try_from(self.records.len()).unwrap_or(i64::MAX)
    }

    /// The record at `offset`, if one was written there and not deleted.
    fn get(&self, offset: i64) -> Option<&Record> {
        if offset < self.start {
            return None;
        }
        usize::try_from(offset)
            .ok()
            .and_then(|index| self.records.get(index))
    }
}

/// One topic and its partitions.
///
/// Invariant: the partition count is positive and fixed at creation;
/// `next_unkeyed` only chooses among existing partitions.
#[derive(Debug)]
struct TopicLog {
    partitions: Vec<PartitionLog>,
    next_unkeyed: usize,
}

impl TopicLog {
    fn partition_count(&self) -> i32 {
        i32::try_from(self.partitions.len()).unwrap_or(i32::MAX)
    }

    fn partition(&self, partition: i32) -> Option<&PartitionLog> {
        usize::try_from(partition)
            .ok()
            .and_then(|index| self.partitions.get(index))
    }

    fn partition_mut(&mut self, partition: i32) -> Option<&mut PartitionLog> {
        usize::try_from(partition)
            .ok()
            .and_then(|index| self.partitions.get_mut(index))
    }

    /// The partition a record goes to: the explicit one, else the key's,
    /// else the next in round robin.
    fn choose(&mut self, explicit: Option<i32>, key: Option<&Bytes>) -> i32 {
        if let Some(partition) = explicit {
            return partition;
        }
        let count = self.partition_count();
        if let Some(key) = key {
            return partition_for_key(key, count);
        }
        let index = self.next_unkeyed % self.partitions.len().max(1);
        self.next_unkeyed = index + 1;
        i32::try_from(index).unwrap_or(0)
    }
}

/// Every topic of a broker, by name.
///
/// Invariant: a topic, once created, keeps its partition count and records.
#[derive(Debug, Default)]
pub struct Logs {
    topics: BTreeMap<Topic, TopicLog>,
}

impl Logs {
    /// Creates a topic. Returns whether it is new; creating an existing topic
    /// with the same partition count does nothing.
    pub fn create(&mut self, name: &str, partitions: i32) -> Result<bool, BrokerError> {
        let count = usize::try_from(partitions)
            .ok()
            .filter(|&count| count > 0)
            .ok_or_else(|| {
                BrokerError::Invalid(format!(
                    "topic {name} needs a positive partition count, got {partitions}"
                ))
            })?;
        if name.is_empty() {
            return Err(BrokerError::Invalid(
                "a topic name must not be empty".into(),
            ));
        }
        if let Some(existing) = self.topics.get(name) {
            let existing = existing.partition_count();
            return if existing == partitions {
                Ok(false)
            } else {
                Err(BrokerError::Invalid(format!(
                    "topic {name} exists with {existing} partitions, not {partitions}"
                )))
            };
        }
        let partitions = std::iter::repeat_with(PartitionLog::default)
            .take(count)
            .collect();
        self.topics.insert(
            Topic::from(name),
            TopicLog {
                partitions,
                next_unkeyed: 0,
            },
        );
        Ok(true)
    }

    /// Whether the topic exists.
    pub fn contains(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// The partition count of a topic, if it exists.
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        self.topics.get(topic).map(TopicLog::partition_count)
    }

    /// Appends a record to an existing topic; its timestamp defaults to now.
    pub fn append(&mut self, record: OutgoingRecord) -> Result<Delivery, BrokerError> {
        let log = self
            .topics
            .get_mut(&*record.topic)
            .ok_or_else(|| BrokerError::UnknownTopic(record.topic.clone()))?;
        let partition = log.choose(record.partition, record.key.as_ref());
        let slot = usize::try_from(partition)
            .ok()
            .and_then(|index| log.partitions.get_mut(index))
            .ok_or_else(|| {
                BrokerError::UnknownPartition(TopicPartition::new(record.topic.clone(), partition))
            })?;
        let offset = slot.end_offset();
        slot.records.push(Record {
            topic: record.topic,
            partition,
            offset,
            timestamp: record.timestamp.unwrap_or_else(clock::now),
            key: record.key,
            payload: record.payload,
            headers: record.headers,
        });
        Ok(Delivery { partition, offset })
    }

    /// The record at `offset` of a partition, `None` if none was written
    /// there; an error if the partition does not exist.
    pub fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<&Record>, BrokerError> {
        let log = self
            .topics
            .get(&partition.topic)
            .ok_or_else(|| BrokerError::UnknownTopic(partition.topic.clone()))?;
        let log = log
            .partition(partition.partition)
            .ok_or_else(|| BrokerError::UnknownPartition(partition.clone()))?;
        Ok(log.get(offset))
    }

    /// The record at `offset`, if the partition exists and holds one there.
    pub fn get(&self, partition: &TopicPartition, offset: i64) -> Option<&Record> {
        self.read(partition, offset).ok().flatten()
    }

    /// The first offset of a partition that still names a record (or the
    /// end offset, once every record was deleted), if it exists.
    pub fn start_offset(&self, partition: &TopicPartition) -> Option<i64> {
        self.topics
            .get(&partition.topic)
            .and_then(|log| log.partition(partition.partition))
            .map(|log| log.start)
    }

    /// Deletes the records of a partition below `before` (at most up to its
    /// end), as retention or Kafka's `DeleteRecords` does: reads of their
    /// offsets find nothing, and a consumer positioned among them goes on
    /// from the first record kept.
    pub fn delete_records(
        &mut self,
        partition: &TopicPartition,
        before: i64,
    ) -> Result<(), BrokerError> {
        let log = self
            .topics
            .get_mut(&partition.topic)
            .ok_or_else(|| BrokerError::UnknownTopic(partition.topic.clone()))?
            .partition_mut(partition.partition)
            .ok_or_else(|| BrokerError::UnknownPartition(partition.clone()))?;
        log.start = log.start.max(before.min(log.end_offset()));
        Ok(())
    }

    /// The offset the next record of a partition gets, if it exists.
    pub fn end_offset(&self, partition: &TopicPartition) -> Option<i64> {
        self.topics
            .get(&partition.topic)
            .and_then(|log| log.partition(partition.partition))
            .map(PartitionLog::end_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::Logs;
    use prosody_contracts::broker::{
        BrokerError, OutgoingRecord, TopicPartition, partition_for_key,
    };

    #[test]
    fn offsets_count_from_zero_per_partition() -> Result<(), BrokerError> {
        let mut logs = Logs::default();
        logs.create("t", 2)?;
        for expected in 0..3 {
            let mut record = OutgoingRecord::new("t", "k", "v");
            record.partition = Some(1);
            assert_eq!(logs.append(record)?.offset, expected);
        }
        let tp = TopicPartition::new("t", 1);
        assert_eq!(logs.end_offset(&tp), Some(3));
        assert_eq!(logs.end_offset(&TopicPartition::new("t", 0)), Some(0));
        assert_eq!(logs.read(&tp, 1)?.map(|r| r.offset), Some(1));
        assert_eq!(logs.read(&tp, 3)?, None);
        assert_eq!(logs.read(&tp, -1)?, None);
        Ok(())
    }

    /// Deleted records read as none; the start never passes the end and
    /// never moves back; the records kept keep their offsets.
    #[test]
    fn deleted_records_are_gone_for_good() -> Result<(), BrokerError> {
        let mut logs = Logs::default();
        logs.create("t", 1)?;
        let tp = TopicPartition::new("t", 0);
        for _ in 0..4 {
            logs.append(OutgoingRecord::new("t", "k", "v"))?;
        }
        logs.delete_records(&tp, 2)?;
        assert_eq!(logs.start_offset(&tp), Some(2));
        assert_eq!(logs.read(&tp, 1)?, None);
        assert_eq!(logs.read(&tp, 2)?.map(|r| r.offset), Some(2));
        logs.delete_records(&tp, 1)?;
        assert_eq!(logs.start_offset(&tp), Some(2));
        logs.delete_records(&tp, 99)?;
        assert_eq!(logs.start_offset(&tp), Some(4));
        assert_eq!(logs.read(&tp, 3)?, None);
        assert_eq!(logs.append(OutgoingRecord::new("t", "k", "v"))?.offset, 4);
        assert_eq!(logs.read(&tp, 4)?.map(|r| r.offset), Some(4));
        assert!(matches!(
            logs.delete_records(&TopicPartition::new("t", 1), 0),
            Err(BrokerError::UnknownPartition(_))
        ));
        Ok(())
    }

    #[test]
    fn keyed_records_follow_the_kafka_partitioner_and_unkeyed_rotate() -> Result<(), BrokerError> {
        let mut logs = Logs::default();
        logs.create("t", 3)?;
        let delivery = logs.append(OutgoingRecord::new("t", "user-7", "v"))?;
        assert_eq!(delivery.partition, partition_for_key(b"user-7", 3));
        let mut partitions = Vec::new();
        for _ in 0..4 {
            let mut record = OutgoingRecord::new("t", "k", "v");
            record.key = None;
            partitions.push(logs.append(record)?.partition);
        }
        assert_eq!(partitions, [0, 1, 2, 0]);
        Ok(())
    }

    #[test]
    fn bad_topics_and_partitions_are_rejected() -> Result<(), BrokerError> {
        let mut logs = Logs::default();
        assert!(matches!(logs.create("t", 0), Err(BrokerError::Invalid(_))));
        assert!(logs.create("t", 2)?);
        assert!(!logs.create("t", 2)?);
        assert!(matches!(logs.create("t", 3), Err(BrokerError::Invalid(_))));
        let mut record = OutgoingRecord::new("t", "k", "v");
        record.partition = Some(2);
        assert!(matches!(
            logs.append(record),
            Err(BrokerError::UnknownPartition(_))
        ));
        assert!(matches!(
            logs.append(OutgoingRecord::new("missing", "k", "v")),
            Err(BrokerError::UnknownTopic(_))
        ));
        assert!(matches!(
            logs.read(&TopicPartition::new("t", 5), 0),
            Err(BrokerError::UnknownPartition(_))
        ));
        Ok(())
    }
}
