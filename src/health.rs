//! How the consumer is doing: its state, its liveness and its partitions
//! (what the probes report).

use crate::probe::Status;
use crate::slot::Subscription;
use prosody_core::broker::TopicPartition;
use prosody_core::store::DeferCounts;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where the consumer is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumerState {
    /// No topics are configured: the client only produces.
    Unconfigured,
    /// Configured but not subscribed.
    Configured,
    /// Subscribed and consuming.
    Running,
}

impl fmt::Display for ConsumerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unconfigured => "unconfigured",
            Self::Configured => "configured",
            Self::Running => "running",
        })
    }
}

/// The consumer's health, read from the client's subscription slot: what
/// the health methods of the client and the probes report.
///
/// Invariant: it reads the slot the client consumes through and holds
/// nothing else of the client; only the client holds it strongly (the
/// probe server weakly), so it lives no longer than the client.
pub(crate) struct ConsumerHealth {
    slot: Arc<Subscription>,
    /// Whether topics are configured.
    configured: bool,
    stall_threshold: Duration,
}

impl ConsumerHealth {
    pub(crate) fn new(
        slot: Arc<Subscription>,
        configured: bool,
        stall_threshold: Duration,
    ) -> Self {
        Self {
            slot,
            configured,
            stall_threshold,
        }
    }

    /// Where the consumer is in its life.
    pub(crate) fn consumer_state(&self) -> ConsumerState {
        if !self.configured {
            return ConsumerState::Unconfigured;
        }
        match self.slot.running() {
            Some(runtime) if !runtime.is_finished() => ConsumerState::Running,
            _ => ConsumerState::Configured,
        }
    }

    /// Whether the consumer is not live.
    pub(crate) fn is_stalled(&self) -> bool {
        !self.liveness_problems().is_empty()
    }

    /// What keeps the consumer from being live, one line each.
    pub(crate) fn liveness_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.slot.running().is_some_and(|runtime| runtime.failed()) {
            problems.push("the consumer stopped unexpectedly".to_owned());
        }
        if let Some(runtime) = self.slot.running() {
            problems.extend(
                runtime
                    .halts()
                    .iter()
                    .map(|(partition, reason)| format!("partition {partition} halted: {reason}")),
            );
        }
        problems.extend(
            self.stalled_partitions()
                .iter()
                .map(|partition| format!("partition {partition} is stalled")),
        );
        problems
    }

    /// The partitions with work pending and no progress for the stall
    /// threshold, in order.
    pub(crate) fn stalled_partitions(&self) -> Vec<TopicPartition> {
        self.slot
            .running()
            .map(|runtime| runtime.stalled_partitions(self.stall_threshold))
            .unwrap_or_default()
    }

    /// The partitions a terminal error stopped, in order.
    pub(crate) fn halted_partitions(&self) -> Vec<TopicPartition> {
        self.slot
            .running()
            .map(|runtime| runtime.halted_partitions())
            .unwrap_or_default()
    }

    /// Each partition consumed, in order, with its deferred keys and
    /// records; empty when not consuming.
    pub(crate) fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
        self.slot
            .running()
            .map(|runtime| runtime.deferred_counts())
            .unwrap_or_default()
    }

    /// How many partitions the client consumes now.
    pub(crate) fn assigned_partition_count(&self) -> usize {
        self.slot
            .running()
            .map_or(0, |runtime| runtime.assigned_partition_count())
    }
}

impl Status for ConsumerHealth {
    fn assigned_partition_count(&self) -> usize {
        ConsumerHealth::assigned_partition_count(self)
    }

    fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
        ConsumerHealth::deferred_counts(self)
    }

    fn liveness_problems(&self) -> Vec<String> {
        ConsumerHealth::liveness_problems(self)
    }
}
