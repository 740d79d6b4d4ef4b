//! A consumer group: its members, their hand-overs and committed offsets.

use crate::assignment::{self, MemberId};
use crate::log::Logs;
use crate::member::Member;
use prosody_contracts::broker::{BrokerError, ConsumerEvent, TopicPartition};
use prosody_contracts::event::Topic;
use std::collections::{BTreeMap, BTreeSet};

/// A consumer group with cooperative rebalancing.
///
/// Invariants:
/// - Exclusive ownership: a partition is owned by at most one member at any
///   moment, including while it is being revoked.
/// - Hand-over: a partition reaches its target owner only once it is free,
///   that is after the previous owner acknowledged the revocation (polled
///   again after receiving it), left the group, or never heard of it; the new
///   owner starts at the committed offset, or 0 without one.
/// - `committed` only changes through [`Group::commit`] and [`Group::leave`]
///   with `commit` set, and holds offsets of members that owned the partition
///   at that moment.
#[derive(Debug, Default)]
pub struct Group {
    /// In join order, which the target assignment follows.
    members: Vec<Member>,
    committed: BTreeMap<TopicPartition, i64>,
}

impl Group {
    /// Adds a member and rebalances.
    pub fn join(&mut self, id: MemberId, topics: Vec<Topic>, logs: &Logs) {
        self.members.push(Member::new(id, topics));
        self.rebalance(logs);
    }

    /// Removes a member, freeing its partitions at once, and rebalances. With
    /// `commit`, its stored offsets are committed first. Returns whether the
    /// member was in the group.
    pub fn leave(&mut self, id: MemberId, commit: bool, logs: &Logs) -> bool {
        let Some(index) = self.members.iter().position(|m| m.id() == id) else {
            return false;
        };
        let member = self.members.remove(index);
        if commit {
            Self::commit_member(&mut self.committed, &member);
        }
        self.rebalance(logs);
        true
    }

    /// The member with this id; [`BrokerError::Closed`] once it left.
    pub fn member_mut(&mut self, id: MemberId) -> Result<&mut Member, BrokerError> {
        self.members
            .iter_mut()
            .find(|m| m.id() == id)
            .ok_or(BrokerError::Closed)
    }

    /// A member's next event, after acknowledging the revocation it received
    /// before. The flag tells whether partitions moved, so other members may
    /// have events now.
    pub fn next_event(
        &mut self,
        id: MemberId,
        logs: &Logs,
    ) -> Result<(Option<ConsumerEvent>, bool), BrokerError> {
        let released = self.member_mut(id)?.acknowledge();
        if released {
            self.rebalance(logs);
        }
        let event = self.member_mut(id)?.next_event(logs);
        Ok((event, released))
    }

    /// Commits a member's stored offsets.
    pub fn commit(&mut self, id: MemberId) -> Result<(), BrokerError> {
        let member = self
            .members
            .iter()
            .find(|m| m.id() == id)
            .ok_or(BrokerError::Closed)?;
        Self::commit_member(&mut self.committed, member);
        Ok(())
    }

    fn commit_member(committed: &mut BTreeMap<TopicPartition, i64>, member: &Member) {
        for (tp, offset) in member.stored() {
            committed.insert(tp.clone(), offset);
        }
    }

    /// The group's committed offset of a partition.
    pub fn committed(&self, partition: &TopicPartition) -> Option<i64> {
        self.committed.get(partition).copied()
    }

    /// Moves the group towards its target assignment: revokes partitions from
    /// members that should not own them and gives free partitions to their
    /// target owners. Returns whether any partition was released or assigned.
    pub fn rebalance(&mut self, logs: &Logs) -> bool {
        let subscriptions: Vec<(MemberId, &[Topic])> =
            self.members.iter().map(|m| (m.id(), m.topics())).collect();
        let target = assignment::range(&subscriptions, logs);
        let mut moved = false;
        for member in &mut self.members {
            moved |= member.revoke_outside(&target);
        }
        let taken: BTreeSet<TopicPartition> = self
            .members
            .iter()
            .flat_map(|m| m.owned().cloned())
            .collect();
        for (tp, id) in target {
            if taken.contains(&tp) {
                continue;
            }
            let position = self.committed(&tp).unwrap_or(0);
            if let Ok(member) = self.member_mut(id) {
                tracing::debug!(partition = %tp, member = id, position, "memory broker assigns");
                member.assign(tp, position);
                moved = true;
            }
        }
        moved
    }

    /// Every partition's owners, for invariant checks.
    #[cfg(test)]
    pub fn owners(&self) -> BTreeMap<TopicPartition, Vec<MemberId>> {
        let mut owners: BTreeMap<TopicPartition, Vec<MemberId>> = BTreeMap::new();
        for member in &self.members {
            for tp in member.owned() {
                owners.entry(tp.clone()).or_default().push(member.id());
            }
        }
        owners
    }

    /// The members' ids in join order.
    #[cfg(test)]
    pub fn member_ids(&self) -> Vec<MemberId> {
        self.members.iter().map(Member::id).collect()
    }

    /// Whether no hand-over is in progress.
    #[cfg(test)]
    pub fn is_settled(&self) -> bool {
        self.members.iter().all(Member::is_settled)
    }
}

#[cfg(test)]
mod tests;
