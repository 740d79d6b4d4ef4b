//! How the consumer is doing: its state, its liveness and its partitions
//! (what the probes report).

use crate::client::ProsodyClient;
use prosody_core::Codec;
use prosody_core::broker::TopicPartition;
use prosody_core::store::DeferCounts;
use std::fmt;

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

impl<C: Codec> ProsodyClient<C> {
    /// Where the consumer is in its life.
    #[must_use]
    pub fn consumer_state(&self) -> ConsumerState {
        if self.inner.settings.subscribed_topics.is_none() {
            return ConsumerState::Unconfigured;
        }
        match self.inner.subscription.running() {
            Some(runtime) if !runtime.is_finished() => ConsumerState::Running,
            _ => ConsumerState::Configured,
        }
    }

    /// Whether the consumer is not live (what `/livez` reports): it
    /// stopped without being asked to, a partition halted on a terminal
    /// error, or a partition with work pending made no progress for
    /// `stall_threshold`.
    #[must_use]
    pub fn is_stalled(&self) -> bool {
        !self.liveness_problems().is_empty()
    }

    /// What keeps the consumer from being live, one line each; empty when
    /// live.
    #[must_use]
    pub fn liveness_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self
            .inner
            .subscription
            .running()
            .is_some_and(|runtime| runtime.failed())
        {
            problems.push("the consumer stopped unexpectedly".to_owned());
        }
        if let Some(runtime) = self.inner.subscription.running() {
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

    /// The partitions with work pending and no progress for
    /// `stall_threshold`, in order.
    #[must_use]
    pub fn stalled_partitions(&self) -> Vec<TopicPartition> {
        let threshold = self.inner.settings.qos.stall_threshold;
        self.inner
            .subscription
            .running()
            .map(|runtime| runtime.stalled_partitions(threshold))
            .unwrap_or_default()
    }

    /// The partitions a terminal error stopped, in order: nothing more is
    /// handled or committed on them until they move to another member (or
    /// this one subscribes again).
    #[must_use]
    pub fn halted_partitions(&self) -> Vec<TopicPartition> {
        self.inner
            .subscription
            .running()
            .map(|runtime| runtime.halted_partitions())
            .unwrap_or_default()
    }

    /// Where the probe server listens, once the first `subscribe` started
    /// it (`None` when disabled, or when its port could not be bound).
    #[must_use]
    pub fn probe_address(&self) -> Option<std::net::SocketAddr> {
        self.inner.probe.address()
    }

    /// Each partition this client consumes, in order, with how many of its
    /// keys have deferred records and how many records are deferred (see
    /// the `prosody.defer.keys` and `prosody.defer.records` gauges): read
    /// from the defer store when the partition opened, then kept current
    /// by each commit that changes deferrals. A partition whose stores
    /// have not answered yet is left out; empty when not consuming.
    #[must_use]
    pub fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
        self.inner
            .subscription
            .running()
            .map(|runtime| runtime.deferred_counts())
            .unwrap_or_default()
    }

    /// How many partitions this client consumes now.
    #[must_use]
    pub fn assigned_partition_count(&self) -> usize {
        self.inner
            .subscription
            .running()
            .map_or(0, |runtime| runtime.assigned_partition_count())
    }
}
