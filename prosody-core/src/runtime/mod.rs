//! The partition runtime: polls a consumer, hands each record to the task of
//! its partition, and commits what has settled.
//!
//! Invariants it owns, each documented on the (internal) type that keeps it:
//! exclusivity and per-key order (`KeyQueues`), at-least-once commits
//! (`OffsetTracker`), bounded memory through backpressure (`PartitionState`),
//! and shutdown that drains before it commits (`PartitionTask`).

mod alarm;
mod attempt;
mod filter;
mod first;
mod lease;
mod offsets;
mod partition;
mod poll;
mod queues;
mod status;

pub use crate::answer::Answerer;
use crate::broker::Consumer;
use crate::broker::TopicPartition;
use crate::event::Encoded;
use crate::handler::EventService;
use crate::hash::FastMap;
use crate::metrics::{Held, Metrics, Readings};
use crate::state::Registry;
use crate::store::{DeferCounts, Stores};
use status::PartitionState;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How the runtime consumes.
///
/// The types rule out zero-sized limits; the facade validates the rest.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The consumer group; records whose `source-system` header equals it are
    /// skipped.
    pub group_id: Arc<str>,
    /// Prefixes of the payload's `type` field to handle; empty handles all.
    pub allowed_events: Arc<[String]>,
    /// Unsettled records of one partition before it is paused.
    pub max_uncommitted: NonZeroUsize,
    /// How often settled offsets are committed.
    pub commit_interval: Duration,
    /// How long to wait before polling again after a poll error.
    pub poll_interval: Duration,
    /// The budget to drain a partition on revocation or shutdown: on
    /// shutdown handlers see cancellation at 90% of it, on a revocation at
    /// once; what still runs at its end is abandoned.
    pub shutdown_timeout: Duration,
    /// First delay of the last-resort retry of transient failures.
    pub retry_base: Duration,
    /// Longest delay of the last-resort retry.
    pub max_retry_delay: Duration,
    /// How far ahead a partition holds its timers in memory: one slab of
    /// the timer store (`slab_size`, default 1h).
    pub slab_size: Duration,
    /// The keyed-state collections handlers may bind (empty: none).
    pub state: Arc<Registry>,
    /// Answers the requests this member's subsystem is asked (`None`: the
    /// member answers none).
    pub answerer: Option<Arc<dyn Answerer>>,
    /// The client's instruments ([`Metrics::off`] records nothing).
    pub metrics: Metrics,
    /// Whether the stack's codec takes a JSON parse of the payload
    /// ([`Codec::takes_parsed`](crate::Codec::takes_parsed)): then a
    /// record that is a JSON object is parsed once, for its `id` and for
    /// the handler. `false` parses the `id` alone, and the handler service
    /// decodes the bytes.
    pub keep_parse: bool,
}

impl RuntimeConfig {
    /// The defaults of the configuration tables for a group.
    #[must_use]
    pub fn new(group_id: impl Into<Arc<str>>) -> Self {
        Self {
            group_id: group_id.into(),
            allowed_events: Arc::from([]),
            max_uncommitted: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
            commit_interval: Duration::from_secs(1),
            poll_interval: Duration::from_millis(100),
            shutdown_timeout: Duration::from_secs(30),
            retry_base: Duration::from_millis(20),
            max_retry_delay: Duration::from_secs(300),
            slab_size: Duration::from_secs(3600),
            state: Arc::default(),
            answerer: None,
            metrics: Metrics::off(),
            keep_parse: false,
        }
    }
}

/// What a running consumer reports: its partitions, each with its state.
#[derive(Debug, Default)]
pub(crate) struct Status {
    partitions: Mutex<FastMap<TopicPartition, Arc<PartitionState>>>,
}

impl Status {
    fn partitions(&self) -> MutexGuard<'_, FastMap<TopicPartition, Arc<PartitionState>>> {
        // Nothing panics while holding it: a poisoned map is consistent.
        self.partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, tp: TopicPartition, state: Arc<PartitionState>) {
        self.partitions().insert(tp, state);
    }

    pub(crate) fn remove(&self, tp: &TopicPartition) {
        self.partitions().remove(tp);
    }
}

impl Held for Status {
    fn readings(&self) -> Vec<(TopicPartition, Readings)> {
        self.partitions()
            .iter()
            .map(|(tp, state)| (tp.clone(), state.readings()))
            .collect()
    }
}

/// A running consumer. Dropping it stops the consumer without draining (a
/// crash); [`Runtime::shutdown`] drains and commits first.
///
/// Invariant: every call of [`Runtime::shutdown`], concurrent or repeated,
/// returns only after the consumer task has ended.
#[derive(Debug)]
pub struct Runtime {
    stop: CancellationToken,
    /// Cancelled when the consumer task ends, however it ends.
    done: CancellationToken,
    task: JoinHandle<()>,
    status: Arc<Status>,
    /// The drain's deadline, when the shutdown gave one.
    deadline: Arc<OnceLock<Instant>>,
}

impl Runtime {
    /// Starts consuming: each record goes through `service` as it came off
    /// the broker (the handler service at its end decodes it); attempts
    /// write their changes to `stores`, where handlers' timers live, and due
    /// timers go through `service` too. Intervals shorter than a
    /// millisecond count as one.
    pub fn spawn<C, S, T>(consumer: C, service: S, stores: T, mut config: RuntimeConfig) -> Self
    where
        C: Consumer,
        S: EventService<Encoded>,
        T: Stores,
    {
        let floor = Duration::from_millis(1);
        config.commit_interval = config.commit_interval.max(floor);
        config.poll_interval = config.poll_interval.max(floor);
        let stop = CancellationToken::new();
        let done = CancellationToken::new();
        let status = Arc::new(Status::default());
        let deadline = Arc::new(OnceLock::new());
        let held: Arc<dyn Held> = status.clone();
        config.metrics.watch(Arc::downgrade(&held));
        let poll = poll::PollLoop::new(
            consumer,
            service,
            stores.erase(),
            config,
            stop.clone(),
            Arc::clone(&status),
            Arc::clone(&deadline),
        );
        let guard = done.clone().drop_guard();
        let task = tokio::spawn(async move {
            let _done = guard;
            poll.run().await;
        });
        Self {
            stop,
            done,
            task,
            status,
            deadline,
        }
    }

    /// How many partitions this member holds now (none once it stopped).
    #[must_use]
    pub fn assigned_partition_count(&self) -> usize {
        if self.is_finished() {
            return 0;
        }
        self.status.partitions().len()
    }

    /// Records handed to this member's partitions and not yet settled, in
    /// all (none once it stopped).
    #[must_use]
    pub fn unsettled_records(&self) -> usize {
        if self.is_finished() {
            return 0;
        }
        self.status
            .partitions()
            .values()
            .map(|state| state.unsettled.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether the consumer stopped without being asked to: its consumer
    /// closed, or its task panicked.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.done.is_cancelled() && !self.stop.is_cancelled()
    }

    /// The partitions that have work pending and made no progress (no
    /// record or timer settled) for `threshold`, in order.
    #[must_use]
    pub fn stalled_partitions(&self, threshold: Duration) -> Vec<TopicPartition> {
        self.partitions_where(|state| state.stalled(threshold))
    }

    /// The partitions a terminal error stopped, in order.
    #[must_use]
    pub fn halted_partitions(&self) -> Vec<TopicPartition> {
        self.partitions_where(PartitionState::halted)
    }

    /// The halted partitions, in order, each with the error that halted it.
    #[must_use]
    pub fn halts(&self) -> Vec<(TopicPartition, Arc<str>)> {
        let mut halts: Vec<_> = self
            .status
            .partitions()
            .iter()
            .filter_map(|(tp, state)| Some((tp.clone(), state.halt_reason()?)))
            .collect();
        halts.sort_unstable();
        halts
    }

    /// Each partition held whose stores reported their deferrals, in
    /// order, with its deferred keys and records: read when the partition
    /// opened, and kept current by each commit that changes deferrals.
    #[must_use]
    pub fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
        if self.is_finished() {
            return Vec::new();
        }
        let mut counts: Vec<_> = self
            .status
            .partitions()
            .iter()
            .filter_map(|(tp, state)| Some((tp.clone(), state.deferred.get()?)))
            .collect();
        counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        counts
    }

    fn partitions_where(&self, pick: impl Fn(&PartitionState) -> bool) -> Vec<TopicPartition> {
        let mut picked: Vec<TopicPartition> = self
            .status
            .partitions()
            .iter()
            .filter(|(_, state)| pick(state))
            .map(|(tp, _)| tp.clone())
            .collect();
        picked.sort_unstable();
        picked
    }

    /// Whether the consumer has stopped (after shutdown, or after its
    /// consumer closed).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.done.is_cancelled()
    }

    /// Drains every partition within the shutdown timeout, commits what
    /// settled, and leaves the group. Concurrent and repeated calls all wait
    /// for the same drain; dropping a call does not interrupt it.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.done.cancelled().await;
    }

    /// As [`Runtime::shutdown`], with the drain's deadline given rather
    /// than `shutdown_timeout` from when the consumer task sees the stop
    /// (which waits for a commit in progress): the partitions drain until
    /// `deadline`, handlers seeing cancellation a tenth of
    /// `shutdown_timeout` before it. The first deadline given holds.
    pub async fn shutdown_by(&self, deadline: Instant) {
        let _ = self.deadline.set(deadline);
        self.shutdown().await;
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.stop.is_cancelled() {
            self.task.abort();
        }
    }
}
