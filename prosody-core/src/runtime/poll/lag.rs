//! What the poll loop tells the lag gauge: the group's committed offsets
//! and the high watermarks of the partitions it holds.

use super::super::status::NO_OFFSET;
use super::PollLoop;
use crate::broker::{Consumer, TopicPartition};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::debug;

/// How long the poll loop waits, at an assignment, for the group's
/// committed offsets of the partitions assigned (for the lag gauge only).
const SEED_TIMEOUT: Duration = Duration::from_secs(2);

impl<C, S> PollLoop<C, S>
where
    C: Consumer,
{
    /// Publishes, for the lag gauge, the group's committed offsets of the
    /// partitions just assigned (one request for all of them, bounded by
    /// [`SEED_TIMEOUT`]) and their high watermarks, so a partition that
    /// receives nothing shows its lag from the first collection. A failed
    /// read, and a partition the group never committed, leave the lag
    /// counting from the first record received.
    pub(super) async fn seed_offsets(&mut self, fresh: &[TopicPartition]) {
        let Some(consumer) = self.consumer.as_mut() else {
            return;
        };
        if fresh.is_empty() || !self.config.metrics.enabled() {
            return;
        }
        let read = consumer.committed_offsets(fresh, SEED_TIMEOUT);
        match tokio::time::timeout(SEED_TIMEOUT, read).await {
            Ok(Ok(offsets)) => {
                for (tp, offset) in fresh.iter().zip(offsets) {
                    if let (Some(offset), Some(assigned)) = (offset, self.partitions.get(tp)) {
                        assigned.state.committed.store(offset, Ordering::Relaxed);
                    }
                }
            }
            Ok(Err(error)) => debug!(%error, "reading the assigned offsets failed"),
            Err(_) => debug!(timeout = ?SEED_TIMEOUT, "reading the assigned offsets timed out"),
        }
        for tp in fresh {
            if let (Some(high), Some(assigned)) =
                (consumer.high_watermark(tp), self.partitions.get(tp))
            {
                assigned.state.high.store(high, Ordering::Relaxed);
            }
        }
    }

    /// Publishes each partition's committed offset and the high watermark
    /// its consumer last saw, for the lag gauge.
    pub(super) fn publish_offsets(&self) {
        let Some(consumer) = self.consumer.as_ref() else {
            return;
        };
        for (tp, assigned) in &self.partitions {
            if !self.uncommitted && assigned.stored != NO_OFFSET {
                assigned
                    .state
                    .committed
                    .store(assigned.stored, Ordering::Relaxed);
            }
            if let Some(high) = consumer.high_watermark(tp) {
                assigned.state.high.store(high, Ordering::Relaxed);
            }
        }
    }
}
