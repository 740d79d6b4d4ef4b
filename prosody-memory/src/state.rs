//! Everything a memory broker holds, behind its one lock.

use crate::assignment::MemberId;
use crate::group::Group;
use crate::log::{AUTO_CREATE_PARTITIONS, Logs};
use prosody_contracts::broker::{BrokerError, Delivery, OutgoingRecord, TopicPartition};
use prosody_contracts::event::Topic;
use std::collections::BTreeMap;

/// The topics and groups of one broker.
///
/// Invariant: every group is rebalanced against the current topics after each
/// change of topics or membership, so a target owner never waits for a
/// partition that is free.
#[derive(Debug, Default)]
pub struct State {
    logs: Logs,
    groups: BTreeMap<String, Group>,
    next_member: MemberId,
}

impl State {
    /// The topics.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// Deletes a partition's records below `before`.
    pub fn delete_records(
        &mut self,
        partition: &TopicPartition,
        before: i64,
    ) -> Result<(), BrokerError> {
        self.logs.delete_records(partition, before)
    }

    /// Creates a topic and rebalances the groups. Returns whether it is new.
    pub fn create_topic(&mut self, name: &str, partitions: i32) -> Result<bool, BrokerError> {
        let created = self.logs.create(name, partitions)?;
        if created {
            tracing::debug!(topic = name, partitions, "memory broker creates topic");
            for group in self.groups.values_mut() {
                group.rebalance(&self.logs);
            }
        }
        Ok(created)
    }

    /// Appends a record, creating its topic with
    /// [`AUTO_CREATE_PARTITIONS`] partitions if it does not exist.
    pub fn produce(&mut self, record: OutgoingRecord) -> Result<Delivery, BrokerError> {
        if !self.logs.contains(&record.topic) {
            self.create_topic(&record.topic, AUTO_CREATE_PARTITIONS)?;
        }
        self.logs.append(record)
    }

    /// Adds a member to a group, creating the group if needed.
    pub fn join(&mut self, group: &str, topics: Vec<Topic>) -> MemberId {
        let id = self.next_member;
        self.next_member += 1;
        tracing::debug!(group, member = id, ?topics, "memory broker member joins");
        self.groups
            .entry(group.to_owned())
            .or_default()
            .join(id, topics, &self.logs);
        id
    }

    /// Runs `f` on a group and the topics; [`BrokerError::Closed`] if the
    /// group does not exist.
    pub fn with_group<R>(
        &mut self,
        group: &str,
        f: impl FnOnce(&mut Group, &Logs) -> Result<R, BrokerError>,
    ) -> Result<R, BrokerError> {
        let found = self.groups.get_mut(group).ok_or(BrokerError::Closed)?;
        f(found, &self.logs)
    }

    /// A group's committed offset of a partition.
    pub fn committed(&self, group: &str, partition: &TopicPartition) -> Option<i64> {
        self.groups.get(group).and_then(|g| g.committed(partition))
    }
}
