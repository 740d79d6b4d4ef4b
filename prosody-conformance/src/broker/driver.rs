//! Drives the members of one group and checks every event they get.

use super::fixture::{Fixture, ensure_eq};
use super::{Checked, Failure};
use prosody_contracts::broker::{
    Broker, BrokerError, Consumer, ConsumerEvent, Record, TopicPartition,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use tokio::time::{Instant, timeout_at};

/// A consumer and what its events told it.
pub(super) struct Member<C> {
    pub(super) label: String,
    pub(super) consumer: C,
    /// Assigned and not revoked.
    pub(super) owned: BTreeSet<TopicPartition>,
    pub(super) received: Vec<Record>,
    /// Offsets received per partition since its latest assignment.
    pub(super) since_assigned: BTreeMap<TopicPartition, Vec<i64>>,
}

impl<C> Member<C> {
    pub(super) fn offsets(&self, partition: &TopicPartition) -> &[i64] {
        self.since_assigned
            .get(partition)
            .map_or(&[], Vec::as_slice)
    }

    pub(super) fn has_offset(&self, partition: &TopicPartition, offset: i64) -> bool {
        self.offsets(partition).contains(&offset)
    }
}

/// The members of one group, polled together.
///
/// Each step polls every member concurrently, so a member that must
/// acknowledge a revocation polls again while the others wait for the
/// partitions, and checks every event against what all members were told.
pub(super) struct Group<C> {
    pub(super) members: Vec<Member<C>>,
    pub(super) turn: usize,
}

impl<C: Consumer> Group<C> {
    pub(super) fn new(members: Vec<Member<C>>) -> Self {
        Self { members, turn: 0 }
    }

    pub(super) fn member(&self, index: usize) -> Checked<&Member<C>> {
        self.members
            .get(index)
            .ok_or_else(|| Failure(format!("the suite has no member {index}")))
    }

    pub(super) fn member_mut(&mut self, index: usize) -> Checked<&mut Member<C>> {
        self.members
            .get_mut(index)
            .ok_or_else(|| Failure(format!("the suite has no member {index}")))
    }

    pub(super) fn describe(&self) -> String {
        let mut text = String::new();
        for m in &self.members {
            let owned: Vec<String> = m.owned.iter().map(ToString::to_string).collect();
            let _ = write!(
                text,
                "[{} owns {owned:?}, received {} records] ",
                m.label,
                m.received.len()
            );
        }
        text
    }

    /// Polls all members; the first event wins, the other polls are dropped
    /// (polls are cancel-safe). The member polled first rotates.
    pub(super) async fn poll_first(&mut self) -> (usize, Result<ConsumerEvent, BrokerError>) {
        let count = self.members.len();
        let start = self.turn % count.max(1);
        self.turn = self.turn.wrapping_add(1);
        let mut polls: Vec<Pin<Box<_>>> = self
            .members
            .iter_mut()
            .map(|m| Box::pin(m.consumer.poll()))
            .collect();
        std::future::poll_fn(|cx| {
            for k in 0..count {
                let index = (start + k) % count;
                if let Some(poll) = polls.get_mut(index)
                    && let Poll::Ready(result) = poll.as_mut().poll(cx)
                {
                    return Poll::Ready((index, result));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// The next event of any member, checked and applied to its view.
    pub(super) async fn step(&mut self) -> Checked<(usize, ConsumerEvent)> {
        let (index, result) = self.poll_first().await;
        let label = self.member(index)?.label.clone();
        let event = result.map_err(|e| Failure(format!("{label}'s poll failed: {e}")))?;
        match &event {
            ConsumerEvent::Assigned(list) => {
                for tp in list {
                    if let Some(other) = self.members.iter().find(|m| m.owned.contains(tp)) {
                        return Err(Failure(format!(
                            "{tp} was assigned to {label} while {} still owned it",
                            other.label
                        )));
                    }
                }
                let member = self.member_mut(index)?;
                for tp in list {
                    member.owned.insert(tp.clone());
                    member.since_assigned.insert(tp.clone(), Vec::new());
                }
            }
            ConsumerEvent::Revoked(list) => {
                let member = self.member_mut(index)?;
                for tp in list {
                    if !member.owned.remove(tp) {
                        return Err(Failure(format!(
                            "{tp} was revoked from {label}, which did not own it"
                        )));
                    }
                }
            }
            ConsumerEvent::Record(record) => {
                let member = self.member_mut(index)?;
                let tp = record.topic_partition();
                if !member.owned.contains(&tp) {
                    return Err(Failure(format!(
                        "{label} received offset {} of {tp}, which it does not own",
                        record.offset
                    )));
                }
                let offsets = member.since_assigned.entry(tp.clone()).or_default();
                if let Some(last) = offsets.last()
                    && record.offset <= *last
                {
                    return Err(Failure(format!(
                        "{label} received offset {} of {tp} after offset {last}",
                        record.offset
                    )));
                }
                offsets.push(record.offset);
                member.received.push(record.clone());
            }
        }
        Ok((index, event))
    }

    /// [`Group::step`], failing at `deadline` with the group's state.
    pub(super) async fn step_before(
        &mut self,
        deadline: Instant,
        what: &str,
    ) -> Checked<(usize, ConsumerEvent)> {
        match timeout_at(deadline, self.step()).await {
            Ok(result) => result,
            Err(_) => Err(Failure(format!(
                "timed out waiting for {what}; {}",
                self.describe()
            ))),
        }
    }

    /// Steps until `done` holds.
    pub(super) async fn until(
        &mut self,
        deadline: Instant,
        what: &str,
        done: impl Fn(&Self) -> bool,
    ) -> Checked {
        while !done(self) {
            self.step_before(deadline, what).await?;
        }
        Ok(())
    }

    pub(super) fn received(&self) -> usize {
        self.members.iter().map(|m| m.received.len()).sum()
    }
}

/// Joins `first`, lets it take every partition, then joins `second` and
/// drives both until the partitions are split evenly.
pub(super) async fn split_pair<B: Broker>(fixture: &Fixture<B>) -> Checked<Group<B::Consumer>> {
    let mut group = Group::new(vec![fixture.join("first member", &fixture.group).await?]);
    let all = fixture.all_partitions();
    group
        .until(
            fixture.deadline(),
            "the first member to own every partition",
            |g| g.members.first().is_some_and(|m| m.owned == all),
        )
        .await?;
    group
        .members
        .push(fixture.join("second member", &fixture.group).await?);
    let half = all.len() / 2;
    group
        .until(
            fixture.deadline(),
            "the two members to split the partitions",
            |g| g.members.iter().all(|m| m.owned.len() == half),
        )
        .await?;
    let union: BTreeSet<TopicPartition> = group
        .members
        .iter()
        .flat_map(|m| m.owned.iter().cloned())
        .collect();
    ensure_eq(
        "the partitions owned by the two members together",
        &all,
        &union,
    )?;
    Ok(group)
}
