//! Properties of the group's assignment over join, leave and poll sequences.

use super::Group;
use crate::assignment::{self, MemberId};
use crate::log::Logs;
use proptest::prelude::*;
use prosody_contracts::broker::{BrokerError, ConsumerEvent, TopicPartition};
use prosody_contracts::event::Topic;
use std::collections::{BTreeMap, BTreeSet};

const TOPICS: [(&str, i32); 3] = [("a", 3), ("b", 5), ("late", 2)];

#[derive(Clone, Debug)]
enum Op {
    /// A member joins, subscribing to the topics whose bits are set.
    Join(u8),
    /// The n-th member (modulo the count) leaves, committing or not.
    Leave(usize, bool),
    /// The n-th member polls once.
    Poll(usize),
    /// The topic "late" is created.
    CreateLate,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1_u8..8).prop_map(Op::Join),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, c)| Op::Leave(n, c)),
        5 => any::<usize>().prop_map(Op::Poll),
        1 => Just(Op::CreateLate),
    ]
}

/// The group plus, per member, the partitions its events told it it owns.
#[derive(Default)]
struct Sim {
    logs: Logs,
    group: Group,
    next_id: MemberId,
    subscriptions: BTreeMap<MemberId, Vec<Topic>>,
    views: BTreeMap<MemberId, BTreeSet<TopicPartition>>,
}

impl Sim {
    fn new() -> Result<Self, BrokerError> {
        let mut sim = Self::default();
        for (name, partitions) in TOPICS.iter().take(2) {
            sim.logs.create(name, *partitions)?;
        }
        Ok(sim)
    }

    fn nth(&self, n: usize) -> Option<MemberId> {
        let ids = self.group.member_ids();
        ids.get(n % ids.len().max(1)).copied()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Join(mask) => {
                let topics: Vec<Topic> = TOPICS
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| mask & (1 << bit) != 0)
                    .map(|(_, (name, _))| Topic::from(*name))
                    .collect();
                let id = self.next_id;
                self.next_id += 1;
                self.subscriptions.insert(id, topics.clone());
                self.views.insert(id, BTreeSet::new());
                self.group.join(id, topics, &self.logs);
            }
            Op::Leave(n, commit) => {
                if let Some(id) = self.nth(n) {
                    prop_assert!(self.group.leave(id, commit, &self.logs));
                    self.subscriptions.remove(&id);
                    self.views.remove(&id);
                }
            }
            Op::Poll(n) => {
                if let Some(id) = self.nth(n) {
                    self.poll(id)?;
                }
            }
            Op::CreateLate => {
                if self
                    .logs
                    .create("late", 2)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?
                {
                    self.group.rebalance(&self.logs);
                }
            }
        }
        self.check_exclusive()
    }

    /// Polls a member once and checks its event against its view.
    fn poll(&mut self, id: MemberId) -> Result<bool, TestCaseError> {
        let (event, _) = self
            .group
            .next_event(id, &self.logs)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let view = self.views.entry(id).or_default();
        match event {
            Some(ConsumerEvent::Assigned(list)) => {
                for tp in list {
                    prop_assert!(view.insert(tp.clone()), "{tp} assigned twice to {id}");
                }
            }
            Some(ConsumerEvent::Revoked(list)) => {
                for tp in list {
                    prop_assert!(
                        view.remove(&tp),
                        "{tp} revoked from {id}, which did not own it"
                    );
                }
            }
            Some(ConsumerEvent::Record(record)) => {
                prop_assert!(false, "no records were produced, got {record:?}");
            }
            None => return Ok(false),
        }
        Ok(true)
    }

    /// No partition has two owners, and no member's view holds a partition
    /// the group does not give it.
    fn check_exclusive(&self) -> Result<(), TestCaseError> {
        let owners = self.group.owners();
        for (tp, ids) in &owners {
            prop_assert_eq!(ids.len(), 1, "{} owned by {:?}", tp, ids);
        }
        for (id, view) in &self.views {
            for tp in view {
                prop_assert_eq!(
                    owners.get(tp),
                    Some(&vec![*id]),
                    "{} believes it owns {}",
                    id,
                    tp
                );
            }
        }
        Ok(())
    }

    /// Polls every member until none has an event left.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..100 {
            let mut any = false;
            for id in self.group.member_ids() {
                any |= self.poll(id)?;
                self.check_exclusive()?;
            }
            if !any {
                return Ok(());
            }
        }
        Err(TestCaseError::fail(
            "the group did not settle in 100 rounds",
        ))
    }
}

proptest! {
    #[test]
    fn every_partition_has_exactly_one_owner_once_revocations_are_acknowledged(
        ops in prop::collection::vec(op(), 0..60)
    ) {
        let mut sim = Sim::new().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for op in &ops {
            sim.apply(op)?;
        }
        sim.settle()?;
        prop_assert!(sim.group.is_settled());

        let subscriptions: Vec<(MemberId, &[Topic])> =
            sim.subscriptions.iter().map(|(id, topics)| (*id, topics.as_slice())).collect();
        let target = assignment::range(&subscriptions, &sim.logs);
        let mut expected: BTreeSet<TopicPartition> = BTreeSet::new();
        for (name, partitions) in TOPICS {
            let subscribed = sim.subscriptions.values().any(|t| t.iter().any(|t| &**t == name));
            if subscribed && sim.logs.contains(name) {
                expected.extend((0..partitions).map(|p| TopicPartition::new(name, p)));
            }
        }
        // Disjoint views that cover every subscribed partition, each held by
        // its target owner.
        let mut covered = BTreeSet::new();
        for (id, view) in &sim.views {
            for tp in view {
                prop_assert!(covered.insert(tp.clone()), "{} in two views", tp);
                prop_assert_eq!(target.get(tp), Some(id));
            }
        }
        prop_assert_eq!(&covered, &expected);
        let owned: BTreeSet<TopicPartition> = sim.group.owners().into_keys().collect();
        prop_assert_eq!(&owned, &expected);
    }
}

#[test]
fn a_revoked_partition_moves_only_after_the_owner_polls_again() -> Result<(), BrokerError> {
    let mut logs = Logs::default();
    logs.create("t", 2)?;
    let topics: Vec<Topic> = vec!["t".into()];
    let mut group = Group::default();
    group.join(1, topics.clone(), &logs);
    let (event, _) = group.next_event(1, &logs)?;
    assert!(matches!(event, Some(ConsumerEvent::Assigned(ref l)) if l.len() == 2));
    group.join(2, topics, &logs);
    // Member 2 waits: partition t/1 is still member 1's.
    assert_eq!(group.next_event(2, &logs)?.0, None);
    let (event, _) = group.next_event(1, &logs)?;
    assert_eq!(
        event,
        Some(ConsumerEvent::Revoked(vec![TopicPartition::new("t", 1)]))
    );
    assert_eq!(group.next_event(2, &logs)?.0, None);
    // Member 1 still owns it and may store and commit.
    group
        .member_mut(1)?
        .store_offset(&TopicPartition::new("t", 1), 5)?;
    group.commit(1)?;
    // Member 1 polls again: the partition moves, starting at the commit.
    let (event, released) = group.next_event(1, &logs)?;
    assert!(released);
    assert_eq!(event, None);
    assert_eq!(
        group.next_event(2, &logs)?.0,
        Some(ConsumerEvent::Assigned(vec![TopicPartition::new("t", 1)]))
    );
    assert!(
        group
            .member_mut(1)?
            .store_offset(&TopicPartition::new("t", 1), 6)
            .is_err()
    );
    Ok(())
}
