//! The poll loop: the one owner of the consumer.

use super::alarm::Alarm;
use super::attempt::Shared;
use super::filter::Filters;
use super::lease::Lease;
use super::offsets::OffsetTracker;
use super::partition::{Command, PartitionTask};
use super::queues::KeyQueues;
use super::status::{NO_OFFSET, PartitionState};
use super::{RuntimeConfig, Status};
use crate::Backoff;
use crate::access::PartitionStores;
use crate::broker::{BrokerError, Consumer, ConsumerEvent, Record, TopicPartition};
use crate::context::Scope;
use crate::event::Encoded;
use crate::handler::EventService;
use crate::hash::FastMap;
use crate::store::AnyStores;
use futures_util::FutureExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

mod lag;
mod leave;

use leave::{Leave, leave};

/// The most events the poll loop takes from the consumer in one go, when
/// they are ready without waiting.
const BATCH: usize = 512;

/// An assigned partition, as the poll loop sees it.
struct Assigned {
    commands: mpsc::UnboundedSender<Command>,
    state: Arc<PartitionState>,
    /// The offset last stored with the consumer.
    stored: i64,
    /// Records routed and not yet handed to the task.
    held: Vec<Record>,
}

/// Owns the consumer: polls it, routes records, pauses and resumes
/// partitions, and commits.
///
/// Invariant: an offset is stored for a partition only as reported by its
/// task's tracker, so a commit never passes an unsettled record. Dropped
/// without draining (a crash), it parks the consumer in its [`Lease`], so
/// the member stays in its group until its last handler call is gone.
pub(crate) struct PollLoop<C: Consumer, S> {
    /// `None` only once closed or parked.
    consumer: Option<C>,
    lease: Arc<Lease>,
    service: S,
    stores: AnyStores,
    config: RuntimeConfig,
    stop: CancellationToken,
    status: Arc<Status>,
    filters: Filters,
    partitions: FastMap<TopicPartition, Assigned>,
    tasks: JoinSet<()>,
    resume_tx: mpsc::UnboundedSender<TopicPartition>,
    resume_rx: mpsc::UnboundedReceiver<TopicPartition>,
    /// Partitions with records held for their task, in routing order.
    holding: Vec<TopicPartition>,
    /// Offsets were stored but their last commit failed.
    uncommitted: bool,
    /// The shutdown's deadline for the drain, when it gave one.
    deadline: Arc<OnceLock<Instant>>,
}

impl<C, S> PollLoop<C, S>
where
    C: Consumer,
    S: EventService<Encoded>,
{
    pub(crate) fn new(
        consumer: C,
        service: S,
        stores: AnyStores,
        config: RuntimeConfig,
        stop: CancellationToken,
        status: Arc<Status>,
        deadline: Arc<OnceLock<Instant>>,
    ) -> Self {
        let (resume_tx, resume_rx) = mpsc::unbounded_channel();
        Self {
            consumer: Some(consumer),
            lease: Arc::default(),
            service,
            stores,
            filters: Filters::new(
                Arc::clone(&config.group_id),
                Arc::clone(&config.allowed_events),
            ),
            config,
            stop,
            status,
            partitions: FastMap::default(),
            tasks: JoinSet::new(),
            resume_tx,
            resume_rx,
            holding: Vec::new(),
            uncommitted: false,
            deadline,
        }
    }

    pub(crate) async fn run(mut self) {
        let mut commit = tokio::time::interval(self.config.commit_interval);
        commit.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                Some(tp) = self.resume_rx.recv() => self.resume(&tp),
                _ = commit.tick() => self.commit().await,
                event = next(&mut self.consumer) => {
                    if !self.take(event).await {
                        break;
                    }
                }
            }
        }
        let deadline = match self.deadline.get() {
            Some(deadline) => *deadline,
            None => Instant::now()
                .checked_add(self.config.shutdown_timeout)
                .unwrap_or_else(far_future),
        };
        // In order, so a run is the same from one process to the next.
        let mut all: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        all.sort_unstable();
        self.revoke(all, Leave::Shutdown(deadline)).await;
        if let Some(consumer) = self.consumer.take() {
            leave(consumer, deadline, !self.uncommitted).await;
        }
        info!("consumer stopped");
    }

    /// Handles a polled event, and with a record every record the consumer
    /// has ready now, up to [`BATCH`]: each partition's records go to its
    /// task together. `false` once the consumer closed.
    async fn take(&mut self, event: Result<ConsumerEvent, BrokerError>) -> bool {
        let mut event = Some(event);
        let mut taken = 0;
        let mut open = true;
        while let Some(polled) = event.take() {
            match polled {
                Ok(ConsumerEvent::Record(record)) => {
                    self.route(record);
                    taken += 1;
                    if taken < BATCH {
                        event = next(&mut self.consumer).now_or_never();
                    }
                }
                Ok(ConsumerEvent::Assigned(tps)) => {
                    self.flush();
                    let fresh = self.assign(tps);
                    self.seed_offsets(&fresh).await;
                }
                Ok(ConsumerEvent::Revoked(tps)) => {
                    self.flush();
                    self.revoke(tps, Leave::Revoked).await;
                }
                Err(BrokerError::Closed) => {
                    error!("the consumer closed; consuming stops");
                    open = false;
                }
                Err(error) => {
                    self.flush();
                    warn!(%error, "poll failed; polling again");
                    tokio::select! {
                        () = tokio::time::sleep(self.config.poll_interval) => {}
                        () = self.stop.cancelled() => {}
                    }
                }
            }
        }
        self.flush();
        open
    }

    /// Starts a task for each partition not held yet; returns those.
    fn assign(&mut self, tps: Vec<TopicPartition>) -> Vec<TopicPartition> {
        let mut fresh = Vec::with_capacity(tps.len());
        for tp in tps {
            if self.partitions.contains_key(&tp) {
                continue;
            }
            fresh.push(tp.clone());
            debug!(partition = %tp, "assigned");
            let (commands, rx) = mpsc::unbounded_channel();
            // Cancellation implies shutdown; shutdown alone comes first.
            let cancel = CancellationToken::new();
            let shutdown = cancel.child_token();
            let state = Arc::new(PartitionState::default());
            let max = self.config.max_uncommitted.get();
            let (notices, notices_rx) = mpsc::unbounded_channel();
            let stores: Arc<PartitionStores> = Arc::new(PartitionStores::new(
                self.stores.clone(),
                tp.clone(),
                notices,
                Arc::clone(&state.deferred),
            ));
            let task = PartitionTask {
                tp: tp.clone(),
                commands: rx,
                state: Arc::clone(&state),
                resume: self.resume_tx.clone(),
                resume_at: max / 2,
                filters: self.filters.clone(),
                service: self.service.clone(),
                spare: None,
                shared: Arc::new(Shared {
                    scope: Arc::new(Scope {
                        topic: Arc::clone(&tp.topic),
                        partition: tp.partition,
                        shutdown,
                        cancel,
                        meter: self.config.metrics.partition(&tp.topic, tp.partition),
                        answerer: self.config.answerer.clone(),
                    }),
                    backoff: Backoff::new(self.config.retry_base, self.config.max_retry_delay),
                    stores: Arc::clone(&stores),
                    state: (!self.config.state.is_empty()).then(|| Arc::clone(&self.config.state)),
                    keep_parse: self.config.keep_parse,
                    lease: Arc::clone(&self.lease),
                    stack: std::sync::Mutex::new(self.service.clone()),
                }),
                alarm: Alarm::new(stores, notices_rx, self.config.slab_size),
                tracker: OffsetTracker::default(),
                queues: KeyQueues::default(),
                running: JoinSet::new(),
                halted: false,
                progressed: false,
                busy: false,
            };
            self.tasks.spawn(task.run());
            self.status.insert(tp.clone(), Arc::clone(&state));
            self.partitions.insert(
                tp,
                Assigned {
                    commands,
                    state,
                    stored: NO_OFFSET,
                    held: Vec::new(),
                },
            );
        }
        fresh
    }

    /// Counts a record against its partition's backpressure and holds it
    /// for the partition's task until the next [`flush`](Self::flush).
    fn route(&mut self, record: Record) {
        let tp = record.topic_partition();
        let Some(assigned) = self.partitions.get_mut(&tp) else {
            warn!(partition = %tp, offset = record.offset, "record of a partition not assigned here; dropped");
            return;
        };
        let unsettled = assigned.state.unsettled.fetch_add(1, Ordering::SeqCst) + 1;
        if assigned.state.committed.load(Ordering::Relaxed) == NO_OFFSET {
            // A group that never committed (or whose offsets could not be
            // read at assignment): its offset is where this member started
            // reading.
            assigned
                .state
                .committed
                .store(record.offset, Ordering::Relaxed);
        }
        if unsettled == 1 && assigned.state.running.load(Ordering::Acquire) == 0 {
            // Job reaches an idle partition: stalls count from now.
            assigned.state.stamp();
        }
        if assigned.held.is_empty() {
            self.holding.push(tp.clone());
        }
        assigned.held.push(record);
        if unsettled < self.config.max_uncommitted.get()
            || assigned.state.paused.load(Ordering::SeqCst)
        {
            return;
        }
        // Mark paused before pausing, then look again: a task that drained
        // meanwhile either saw the mark (and will ask to resume) or left the
        // count low enough for us to take the mark back.
        assigned.state.paused.store(true, Ordering::SeqCst);
        let resume_at = self.config.max_uncommitted.get() / 2;
        if assigned.state.unsettled.load(Ordering::SeqCst) <= resume_at
            && assigned.state.paused.swap(false, Ordering::SeqCst)
        {
            return;
        }
        debug!(partition = %tp, unsettled, "pausing");
        if let Err(error) = self.consumer().and_then(|consumer| consumer.pause(&tp)) {
            warn!(partition = %tp, %error, "pause failed");
        }
    }

    /// Hands each partition's held records to its task, in one message.
    fn flush(&mut self) {
        for tp in self.holding.drain(..) {
            let Some(assigned) = self.partitions.get_mut(&tp) else {
                continue;
            };
            let records = std::mem::take(&mut assigned.held);
            if assigned.commands.send(Command::Records(records)).is_err() {
                warn!(partition = %tp, "partition task is gone; records dropped");
            }
        }
    }

    /// The consumer, until it is closed.
    fn consumer(&mut self) -> Result<&mut C, BrokerError> {
        self.consumer.as_mut().ok_or(BrokerError::Closed)
    }

    fn resume(&mut self, tp: &TopicPartition) {
        if !self.partitions.contains_key(tp) {
            return;
        }
        debug!(partition = %tp, "resuming");
        if let Err(error) = self.consumer().and_then(|consumer| consumer.resume(tp)) {
            warn!(partition = %tp, %error, "resume failed");
        }
    }

    /// Stores every watermark that moved, then commits.
    async fn commit(&mut self) {
        let mut moved = self.uncommitted;
        for (tp, assigned) in &mut self.partitions {
            let watermark = assigned.state.watermark.load(Ordering::Acquire);
            if watermark == NO_OFFSET || watermark == assigned.stored {
                continue;
            }
            let Some(consumer) = self.consumer.as_mut() else {
                return;
            };
            match consumer.store_offset(tp, watermark) {
                Ok(()) => {
                    assigned.stored = watermark;
                    moved = true;
                }
                Err(error) => warn!(partition = %tp, %error, "storing the offset failed"),
            }
        }
        if let (true, Some(consumer)) = (moved, self.consumer.as_mut()) {
            self.uncommitted = consumer.commit().await.is_err_and(|error| {
                warn!(%error, "commit failed; it is retried at the next interval");
                true
            });
        }
        self.publish_offsets();
    }

    /// Drains the partitions, commits what settled, and forgets them.
    ///
    /// On shutdown (and `unsubscribe`) running handlers run freely until a
    /// tenth of `shutdown_timeout` before the drain's deadline (90% of it
    /// from the stop, unless the shutdown gave an earlier deadline); on a
    /// revocation they see cancellation at once,
    /// so a slow handler holds up neither the partition nor the group's
    /// rebalance. Either way what still runs at `shutdown_timeout` is
    /// abandoned, and what settled is committed.
    async fn revoke(&mut self, tps: Vec<TopicPartition>, leave: Leave) {
        let now = Instant::now();
        let timeout = self.config.shutdown_timeout;
        let later = |by: Duration| now.checked_add(by).unwrap_or_else(far_future);
        let (cancel_at, deadline) = match leave {
            Leave::Revoked => (now, later(timeout)),
            // The budget's last tenth, counted back from the deadline.
            Leave::Shutdown(deadline) => (
                deadline.checked_sub(timeout / 10).unwrap_or(now).max(now),
                deadline,
            ),
        };
        let mut replies = Vec::new();
        for tp in tps {
            let Some(assigned) = self.partitions.remove(&tp) else {
                continue;
            };
            self.status.remove(&tp);
            let (reply, rx) = oneshot::channel();
            let drain = Command::Drain {
                cancel_at,
                deadline,
                reply,
            };
            if assigned.commands.send(drain).is_ok() {
                replies.push((tp, rx));
            }
        }
        let mut stored = false;
        for (tp, rx) in replies {
            let Ok(Some(offset)) = rx.await else {
                continue;
            };
            let Some(consumer) = self.consumer.as_mut() else {
                break;
            };
            match consumer.store_offset(&tp, offset) {
                Ok(()) => stored = true,
                Err(error) => warn!(partition = %tp, %error, "storing the final offset failed"),
            }
        }
        if let (true, Some(consumer)) = (stored || self.uncommitted, self.consumer.as_mut()) {
            self.uncommitted = consumer.commit().await.is_err_and(|error| {
                warn!(%error, "final commit failed; the next owner replays from the last commit");
                true
            });
        }
        while self.tasks.try_join_next().is_some() {}
    }
}

/// The consumer's next event; `Closed` once it is closed.
async fn next<C: Consumer>(consumer: &mut Option<C>) -> Result<ConsumerEvent, BrokerError> {
    match consumer {
        Some(consumer) => consumer.poll().await,
        None => Err(BrokerError::Closed),
    }
}

impl<C: Consumer, S> Drop for PollLoop<C, S> {
    /// A crash (the loop dropped before it closed its consumer): the
    /// consumer waits in the lease for the last task that may still run a
    /// handler call.
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            self.lease.park(consumer);
        }
    }
}

/// A deadline that never comes, for timeouts too long to add to now.
fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(86_400 * 365 * 30))
        .unwrap_or(now)
}
