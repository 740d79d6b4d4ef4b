//! One member of a consumer group: what it owns and where it reads.

use crate::assignment::MemberId;
use crate::log::Logs;
use prosody_contracts::broker::{BrokerError, ConsumerEvent, Record, TopicPartition};
use prosody_contracts::event::Topic;
use std::collections::{BTreeMap, BTreeSet};

/// Where a member stands in one owned partition.
///
/// Invariant: `position` is the offset of the next record to deliver; it only
/// grows, by one per delivered record, so nothing is skipped or repeated while
/// the member owns the partition.
#[derive(Clone, Debug)]
struct Cursor {
    position: i64,
    paused: bool,
    stored: Option<i64>,
}

/// A member's partitions and the state of their hand-over.
///
/// Invariants:
/// - `unannounced`, `revoking` and `revoked` are disjoint subsets of the keys
///   of `owned`.
/// - A partition in `revoked` was reported in a [`ConsumerEvent::Revoked`] and
///   stays owned until [`Member::acknowledge`] (the member's next poll).
/// - Records are delivered only from owned partitions that were announced,
///   are not being revoked and are not paused.
#[derive(Debug)]
pub struct Member {
    id: MemberId,
    topics: Vec<Topic>,
    owned: BTreeMap<TopicPartition, Cursor>,
    /// Owned, not yet reported in an `Assigned` event.
    unannounced: BTreeSet<TopicPartition>,
    /// Leaving the member, not yet reported in a `Revoked` event.
    revoking: BTreeSet<TopicPartition>,
    /// Reported revoked, released at the next poll.
    revoked: BTreeSet<TopicPartition>,
    last_served: Option<TopicPartition>,
}

impl Member {
    /// A member with no partitions.
    pub fn new(id: MemberId, topics: Vec<Topic>) -> Self {
        Self {
            id,
            topics,
            owned: BTreeMap::new(),
            unannounced: BTreeSet::new(),
            revoking: BTreeSet::new(),
            revoked: BTreeSet::new(),
            last_served: None,
        }
    }

    /// The member's id.
    pub fn id(&self) -> MemberId {
        self.id
    }

    /// The topics the member subscribes to.
    pub fn topics(&self) -> &[Topic] {
        &self.topics
    }

    /// The partitions the member owns, including those being revoked.
    pub fn owned(&self) -> impl Iterator<Item = &TopicPartition> {
        self.owned.keys()
    }

    /// Whether no hand-over is pending: every owned partition is announced
    /// and none is being revoked.
    #[cfg(test)]
    pub fn is_settled(&self) -> bool {
        self.unannounced.is_empty() && self.revoking.is_empty() && self.revoked.is_empty()
    }

    /// Takes a free partition, reading from `position`.
    pub fn assign(&mut self, partition: TopicPartition, position: i64) {
        self.unannounced.insert(partition.clone());
        self.owned.insert(
            partition,
            Cursor {
                position,
                paused: false,
                stored: None,
            },
        );
    }

    /// Starts revoking every owned partition whose target owner is another
    /// member. A partition the member never heard of is released at once.
    /// Returns whether any partition was released.
    pub fn revoke_outside(&mut self, target: &BTreeMap<TopicPartition, MemberId>) -> bool {
        let leaving: Vec<TopicPartition> = self
            .owned
            .keys()
            .filter(|tp| target.get(*tp) != Some(&self.id))
            .cloned()
            .collect();
        let mut released = false;
        for tp in leaving {
            if self.unannounced.remove(&tp) {
                self.owned.remove(&tp);
                released = true;
            } else if !self.revoked.contains(&tp) {
                self.revoking.insert(tp);
            }
        }
        // A revocation not yet reported is cancelled when the partition's
        // target owner is this member again.
        self.revoking.retain(|tp| target.get(tp) != Some(&self.id));
        released
    }

    /// Releases the partitions reported revoked: the member polled again.
    /// Returns whether any was released.
    pub fn acknowledge(&mut self) -> bool {
        let revoked = std::mem::take(&mut self.revoked);
        for tp in &revoked {
            self.owned.remove(tp);
        }
        if self
            .last_served
            .as_ref()
            .is_some_and(|tp| revoked.contains(tp))
        {
            self.last_served = None;
        }
        !revoked.is_empty()
    }

    /// The next event for the member: a revocation, then an assignment, then
    /// a record, round robin over the partitions that can deliver one.
    pub fn next_event(&mut self, logs: &Logs) -> Option<ConsumerEvent> {
        if !self.revoking.is_empty() {
            let revoking = std::mem::take(&mut self.revoking);
            self.revoked.extend(revoking.iter().cloned());
            return Some(ConsumerEvent::Revoked(revoking.into_iter().collect()));
        }
        if !self.unannounced.is_empty() {
            let assigned = std::mem::take(&mut self.unannounced);
            return Some(ConsumerEvent::Assigned(assigned.into_iter().collect()));
        }
        self.next_record(logs).map(ConsumerEvent::Record)
    }

    fn next_record(&mut self, logs: &Logs) -> Option<Record> {
        let partitions: Vec<&TopicPartition> = self.owned.keys().collect();
        let start = self
            .last_served
            .as_ref()
            .map_or(0, |last| partitions.partition_point(|tp| *tp <= last));
        let (before, after) = partitions.split_at(start.min(partitions.len()));
        let (tp, record) = after
            .iter()
            .chain(before)
            .filter(|tp| {
                !self.unannounced.contains(**tp)
                    && !self.revoking.contains(**tp)
                    && !self.revoked.contains(**tp)
            })
            .find_map(|tp| {
                let cursor = self.owned.get(*tp)?;
                if cursor.paused {
                    return None;
                }
                // Below the log's start (records deleted), it goes on
                // from the first record kept.
                let at = cursor.position.max(logs.start_offset(tp).unwrap_or(0));
                logs.get(tp, at)
                    .map(|record| ((*tp).clone(), record.clone()))
            })?;
        if let Some(cursor) = self.owned.get_mut(&tp) {
            cursor.position = record.offset + 1;
        }
        self.last_served = Some(tp);
        Some(record)
    }

    fn cursor_mut(&mut self, partition: &TopicPartition) -> Result<&mut Cursor, BrokerError> {
        self.owned
            .get_mut(partition)
            .ok_or_else(|| BrokerError::NotAssigned(partition.clone()))
    }

    /// Stores the next offset to read of an owned partition.
    pub fn store_offset(
        &mut self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<(), BrokerError> {
        if offset < 0 {
            return Err(BrokerError::Invalid(format!(
                "offset {offset} stored for {partition} is negative"
            )));
        }
        self.cursor_mut(partition)?.stored = Some(offset);
        Ok(())
    }

    /// The stored offsets of the owned partitions.
    pub fn stored(&self) -> impl Iterator<Item = (&TopicPartition, i64)> {
        self.owned
            .iter()
            .filter_map(|(tp, cursor)| cursor.stored.map(|offset| (tp, offset)))
    }

    /// Pauses or resumes an owned partition.
    pub fn set_paused(
        &mut self,
        partition: &TopicPartition,
        paused: bool,
    ) -> Result<(), BrokerError> {
        self.cursor_mut(partition)?.paused = paused;
        Ok(())
    }
}
