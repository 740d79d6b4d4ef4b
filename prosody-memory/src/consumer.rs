//! The consumer of the memory broker: one member of a group.

use crate::Shared;
use crate::assignment::MemberId;
use crate::member::Member;
use prosody_contracts::broker::{BrokerError, Consumer, ConsumerEvent, TopicPartition};
use std::sync::Arc;
use std::time::Duration;

/// A member of a consumer group of a [`MemoryBroker`](crate::MemoryBroker).
///
/// Invariants:
/// - `member` is a member of `group` from creation until [`Consumer::close`]
///   or drop; then it is gone from the group and its partitions are free.
///   Every operation after that fails with [`BrokerError::Closed`].
/// - [`Consumer::poll`] changes the shared state only inside one critical
///   section that ends right before it returns, so a poll dropped while
///   waiting loses nothing.
#[derive(Debug)]
pub struct MemoryConsumer {
    shared: Arc<Shared>,
    group: String,
    member: MemberId,
}

impl MemoryConsumer {
    pub(crate) fn new(shared: Arc<Shared>, group: String, member: MemberId) -> Self {
        Self {
            shared,
            group,
            member,
        }
    }

    /// Acknowledges a pending revocation and takes the next event, if any.
    fn try_next(&self) -> Result<Option<ConsumerEvent>, BrokerError> {
        let (event, released) = self.shared.lock().with_group(&self.group, |group, logs| {
            group.next_event(self.member, logs)
        })?;
        if released {
            self.shared.changed();
        }
        Ok(event)
    }

    fn with_member<R>(
        &self,
        f: impl FnOnce(&mut Member) -> Result<R, BrokerError>,
    ) -> Result<R, BrokerError> {
        self.shared
            .lock()
            .with_group(&self.group, |group, _| f(group.member_mut(self.member)?))
    }

    /// Leaves the group, committing stored offsets when `commit` is set.
    fn leave(&self, commit: bool) {
        let left = self
            .shared
            .lock()
            .with_group(&self.group, |group, logs| {
                Ok(group.leave(self.member, commit, logs))
            })
            .unwrap_or(false);
        if left {
            tracing::debug!(group = %self.group, member = self.member, commit, "memory broker member leaves");
            self.shared.changed();
        }
    }
}

impl Consumer for MemoryConsumer {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        loop {
            // Registered before the state is checked, so a change made after
            // the check still wakes this poll.
            let notified = self.shared.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(event) = self.try_next()? {
                return Ok(event);
            }
            notified.await;
        }
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.with_member(|member| member.store_offset(partition, offset))
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.shared
            .lock()
            .with_group(&self.group, |group, _| group.commit(self.member))
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.with_member(|member| member.set_paused(partition, true))
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.with_member(|member| member.set_paused(partition, false))?;
        self.shared.changed();
        Ok(())
    }

    /// Exact: the log's end now.
    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        self.shared.lock().logs().end_offset(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        Ok(self.shared.lock().committed(&self.group, partition))
    }

    /// One look at the group's offsets, under one lock.
    async fn committed_offsets(
        &mut self,
        partitions: &[TopicPartition],
        _timeout: Duration,
    ) -> Result<Vec<Option<i64>>, BrokerError> {
        let shared = self.shared.lock();
        Ok(partitions
            .iter()
            .map(|partition| shared.committed(&self.group, partition))
            .collect())
    }

    /// Commits the stored offsets, as Kafka's final auto-commit does, and
    /// leaves; the partitions go to the other members at once.
    async fn close(self) {
        self.leave(true);
    }
}

impl Drop for MemoryConsumer {
    /// A crash: leaves at once without committing.
    fn drop(&mut self) {
        self.leave(false);
    }
}
