//! The task that owns one assigned partition: per-key queues, the offset
//! tracker, and the handler calls in flight.

use super::alarm::{Alarm, Fire};
use super::attempt::{self, Attempt, Attempts, Fate, Job, Shared};
use super::filter::Filters;
use super::first::{self, First, Slot};
use super::offsets::OffsetTracker;
use super::queues::KeyQueues;
use super::status::PartitionState;
use crate::Backoff;
use crate::access::PartitionStores;
use crate::broker::{Record, TopicPartition};
use crate::codec;
use crate::event::Encoded;
use crate::handler::EventService;
use crate::key::Key;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, error, warn};

/// The longest the stores may take to open a partition.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The waits between tries at opening a partition's stores.
const OPEN_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// Tells the stores the partition is this member's; `false` (logged) if
/// they failed or did not answer in time.
async fn open(timers: &PartitionStores, tp: &TopicPartition) -> bool {
    match tokio::time::timeout(OPEN_TIMEOUT, timers.open()).await {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            warn!(partition = %tp, %error, "opening the partition's stores failed; trying again");
            false
        }
        Err(_) => {
            warn!(partition = %tp, timeout = ?OPEN_TIMEOUT,
                "opening the partition's stores timed out; trying again");
            false
        }
    }
}

/// A message from the poll loop to a partition task.
pub(crate) enum Command {
    /// Records of this partition, in offset order.
    Records(Vec<Record>),
    /// Stop: finish the work held (running and queued) until `cancel_at`,
    /// then cancel what runs, abandon it at `deadline`, and report the
    /// committable offset.
    Drain {
        cancel_at: Instant,
        deadline: Instant,
        reply: oneshot::Sender<Option<i64>>,
    },
}

/// The partition task.
///
/// Invariant: at most one attempt per key exists at a time, whether it
/// finished on its first poll or runs in `running`; a key's next event
/// starts only when its queue completes the one before (`finish`).
pub(crate) struct PartitionTask<S: EventService<Encoded>> {
    pub(crate) tp: TopicPartition,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    pub(crate) state: Arc<PartitionState>,
    pub(crate) resume: mpsc::UnboundedSender<TopicPartition>,
    pub(crate) resume_at: usize,
    pub(crate) filters: Filters,
    /// The stack the first attempt of each event is called on; replaced
    /// by a fresh clone when it is not ready (it goes with its attempt),
    /// fails its readiness or panics.
    pub(crate) service: S,
    /// The box of the last record call that succeeded on its first poll,
    /// for the next call.
    pub(crate) spare: Option<Slot<S::Future>>,
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) tracker: OffsetTracker,
    pub(crate) queues: KeyQueues<Job>,
    pub(crate) running: JoinSet<(Key, Job, Fate)>,
    pub(crate) alarm: Alarm,
    /// A terminal error stopped the partition: nothing more is dispatched.
    pub(crate) halted: bool,
    /// Something settled since the last stamp of progress.
    pub(crate) progressed: bool,
    /// The partition went from idle to busy since the last stamp.
    pub(crate) busy: bool,
}

impl<S> PartitionTask<S>
where
    S: EventService<Encoded>,
{
    /// Runs until drained or until the poll loop goes away.
    pub(crate) async fn run(mut self) {
        let Some(waiting) = self.open_stores().await else {
            return;
        };
        self.alarm.start().await;
        self.halt_if_refused();
        for record in waiting {
            self.accept(record);
        }
        loop {
            self.stamp();
            tokio::select! {
                command = self.commands.recv() => match command {
                    Some(Command::Records(records)) => {
                        self.shared.scope.meter.consumed(records.len());
                        for record in records {
                            self.accept(record);
                        }
                    }
                    Some(Command::Drain { cancel_at, deadline, reply }) => {
                        self.drain(cancel_at, deadline).await;
                        self.shared.stores.close();
                        let _ = reply.send(self.tracker.committable());
                        return;
                    }
                    None => {
                        self.shared.scope.cancel.cancel();
                        self.running.abort_all();
                        self.shared.stores.close();
                        return;
                    }
                },
                Some(done) = self.running.join_next(), if !self.running.is_empty() => {
                    self.complete(done, true);
                }
                Some(notice) = self.alarm.notices.recv() => self.alarm.notice(notice),
                () = &mut self.alarm.wake, if !self.halted => {
                    for fire in self.alarm.ring().await {
                        let key = fire.due.key.clone();
                        if let Some(job) = self.queues.arrive(key.clone(), Job::Timer(fire)) {
                            self.start(key, job);
                        }
                    }
                    self.halt_if_refused();
                }
            }
        }
    }

    /// Opens the partition's stores before anything of it runs, trying
    /// again (after 1 s, doubling to 30 s) while they fail: the stores take
    /// ownership there (a backend may fence earlier owners), so nothing of
    /// the partition is handled or written before. Records that arrive
    /// meanwhile wait, and are returned; `None` when a drain or the end of
    /// the poll loop stopped the wait.
    async fn open_stores(&mut self) -> Option<Vec<Record>> {
        let mut waiting = Vec::new();
        let mut tries = 0;
        loop {
            tries += 1;
            let delay = OPEN_BACKOFF.delay(tries);
            let (stores, tp) = (Arc::clone(&self.shared.stores), self.tp.clone());
            let attempt = async move {
                let opened = open(&stores, &tp).await;
                if !opened {
                    tokio::time::sleep(delay).await;
                }
                opened
            };
            tokio::pin!(attempt);
            loop {
                tokio::select! {
                    opened = &mut attempt => {
                        if opened {
                            return Some(waiting);
                        }
                        break;
                    }
                    command = self.commands.recv() => match command {
                        Some(Command::Records(records)) => {
                            self.shared.scope.meter.consumed(records.len());
                            waiting.extend(records);
                        }
                        Some(Command::Drain { reply, .. }) => {
                            // Nothing ran: nothing of it is settled.
                            self.shared.stores.close();
                            let _ = reply.send(self.tracker.committable());
                            return None;
                        }
                        None => {
                            self.shared.stores.close();
                            return None;
                        }
                    },
                }
            }
        }
    }

    fn accept(&mut self, record: Record) {
        if let Err(stale) = self
            .tracker
            .track(record.offset, record.timestamp.as_millis())
        {
            warn!(partition = %self.tp, offset = stale.offset, next = stale.next,
                "record below an offset already seen; ignored");
            self.release();
            return;
        }
        if self.halted {
            return;
        }
        if let Some(skip) = self.filters.check(&record) {
            debug!(partition = %self.tp, offset = record.offset, ?skip, "record skipped");
            self.settle(record.offset);
            return;
        }
        // A key that is not UTF-8 queues under its lossy rendering; the
        // handler service refuses it, and the mode's failure path takes it.
        let key = codec::record_key(&record);
        if let Some(job) = self.queues.arrive(key.clone(), Job::Record(record)) {
            self.start(key, job);
        }
    }

    /// Starts `job` of `key`, whose queue made it next, and whatever
    /// becomes next by that: an attempt that completes on its first poll
    /// is settled at once (no task), and its key's next event starts in
    /// the same loop, not by recursion.
    fn start(&mut self, key: Key, job: Job) {
        let mut next = Some((key, job));
        while let Some((key, job)) = next.take() {
            next = self.launch(key, job);
        }
    }

    /// Starts one attempt where it is: a record whose first call succeeds
    /// on its first poll is settled at once, with no attempt future, and
    /// one whose call is still pending goes on in a task of its own; any
    /// other attempt is polled once here, and goes on in a task if it
    /// waits. Returns the key's next event when this one is done with at
    /// once.
    fn launch(&mut self, key: Key, job: Job) -> Option<(Key, Job)> {
        if let Job::Timer(fire) = &job {
            // Changes the handler ahead of it just committed are noticed
            // before its completion is; apply them first.
            while let Ok(notice) = self.alarm.notices.try_recv() {
                self.alarm.notice(notice);
            }
            if !self.alarm.still_scheduled(&fire.due) {
                // Unscheduled or cleared while it waited behind its key.
                return self.queues.complete(&key).map(|next| (key, next));
            }
        }
        if self.running.is_empty() {
            // An idle partition starts a busy period: stalls count from now.
            self.busy = true;
        }
        let attempts = Attempts::new(&self.shared, key.clone(), &job);
        let mut first = first::call(
            &mut self.service,
            &mut self.spare,
            &self.shared,
            &attempts,
            &job,
        );
        let mut pending = false;
        if let Job::Record(_) = job {
            // A record done on its first poll needs no attempt future.
            match first::succeeded_at_once(&attempts, first) {
                Ok((slot, response)) => {
                    self.spare = Some(slot);
                    attempts.answer(&self.shared, &Attempt::of(response));
                    return self.finish(key, job, Fate::Settled, true);
                }
                Err(rest) => {
                    pending = matches!(rest, First::Called(_));
                    first = rest;
                }
            }
        }
        let shared = Arc::clone(&self.shared);
        let mut attempt = Box::pin(async move {
            let outcome = attempt::run(shared, attempts, &job, first).await;
            (key, job, outcome)
        });
        if pending {
            // Its call was polled once already: its task polls it next.
            self.spawn(attempt);
            return None;
        }
        // A waker that goes nowhere: an attempt still pending is spawned,
        // and a spawned task is polled at once, with its own waker.
        let mut cx = TaskContext::from_waker(Waker::noop());
        match std::panic::catch_unwind(AssertUnwindSafe(|| attempt.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready((key, job, outcome))) => self.finish(key, job, outcome, true),
            Ok(Poll::Pending) => {
                self.spawn(attempt);
                None
            }
            Err(_) => {
                error!(partition = %self.tp, "a handler attempt panicked outside its stack; the partition stops");
                self.halt("a handler attempt panicked outside its stack".into());
                None
            }
        }
    }

    /// Goes on with an attempt in a task of its own.
    fn spawn(&mut self, attempt: impl Future<Output = (Key, Job, Fate)> + Send + 'static) {
        self.running.spawn(attempt);
        self.state
            .running
            .store(self.running.len(), Ordering::Release);
    }

    /// An attempt's task ended: settles it, and starts its key's next event.
    fn complete(&mut self, done: Result<(Key, Job, Fate), tokio::task::JoinError>, dispatch: bool) {
        self.state
            .running
            .store(self.running.len(), Ordering::Release);
        match done {
            Ok((key, job, outcome)) => {
                if let Some((key, next)) = self.finish(key, job, outcome, dispatch) {
                    self.start(key, next);
                }
            }
            Err(e) => {
                error!(partition = %self.tp, error = %e, "a handler task was lost; the partition stops");
                self.halt(format!("a handler task was lost: {e}").into());
            }
        }
    }

    /// Settles an attempt's outcome; returns its key's next event when
    /// `dispatch` and the partition goes on.
    fn finish(&mut self, key: Key, job: Job, outcome: Fate, dispatch: bool) -> Option<(Key, Job)> {
        match (outcome, job) {
            (Fate::Settled, Job::Record(record)) => self.settle(record.offset),
            (Fate::Delayed(second), Job::Timer(fire)) => {
                let fire = Fire {
                    deferrals: fire.deferrals.saturating_add(1),
                    ..fire
                };
                self.alarm.delay(fire, second);
            }
            // A settled timer was removed from the store by its attempt; an
            // unsettled one stays there for the next owner.
            (Fate::Settled, Job::Timer(fire)) => {
                self.progressed = true;
                self.alarm.finish(&fire.due);
            }
            (Fate::Unsettled, Job::Timer(fire)) => {
                self.alarm.finish(&fire.due);
                return None;
            }
            (Fate::Delayed(_), Job::Record(_)) => {}
            // Left for the next owner (only a draining partition does so):
            // the key's later records wait for it there, in order.
            (Fate::Unsettled, Job::Record(_)) => return None,
            (Fate::Terminal(reason), job) => {
                if let Job::Timer(fire) = job {
                    self.alarm.finish(&fire.due);
                }
                self.halt(reason);
            }
        }
        if self.halted || !dispatch {
            return None;
        }
        self.queues.complete(&key).map(|next| (key, next))
    }

    /// Halts if the store refused to load the partition's timers: they
    /// could never fire, so the partition must not look healthy.
    fn halt_if_refused(&mut self) {
        if let Some(reason) = self.alarm.refused.take() {
            self.halt(reason);
        }
    }

    /// Stops dispatching for good: a terminal error, or a lost task.
    fn halt(&mut self, reason: Arc<str>) {
        self.halted = true;
        *self
            .state
            .halt_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason);
        self.state.halted.store(true, Ordering::Release);
    }

    /// Stamps the partition's progress once for everything that settled
    /// (or started an idle partition) since the last stamp: one clock read
    /// per turn of the task, not per record.
    fn stamp(&mut self) {
        if std::mem::take(&mut self.progressed) | std::mem::take(&mut self.busy) {
            self.state.stamp();
        }
        self.state.publish(
            self.queues.busy(),
            self.queues.waiting(),
            self.tracker.oldest(),
            self.alarm.next_due(),
        );
    }

    fn settle(&mut self, offset: i64) {
        self.progressed = true;
        if !self.tracker.settle(offset) {
            return;
        }
        if let Some(watermark) = self.tracker.committable() {
            self.state.watermark.store(watermark, Ordering::Release);
        }
        self.release();
    }

    /// One record handed over by the poll loop is done with: count it off,
    /// and ask for a resume if the partition is paused and has drained.
    /// `SeqCst` pairs with the poll loop's mark-then-look in `route`: of the
    /// two sides, at least one sees the other's write.
    fn release(&mut self) {
        let left = self.state.unsettled.fetch_sub(1, Ordering::SeqCst) - 1;
        if left <= self.resume_at && self.state.paused.swap(false, Ordering::SeqCst) {
            let _ = self.resume.send(self.tp.clone());
        }
    }

    /// Finishes what the partition holds, then lets it go. The shutdown
    /// fires at once: no failure is retried, deferred or routed any more;
    /// it stays unsettled, and so do the later records of its key. The
    /// records and timers already handed over keep running, each key in
    /// order, until none is left or `cancel_at` passes: so a graceful
    /// hand-off commits every record it received that succeeds, and the next
    /// owner redelivers none of them. At `cancel_at` the partition stops (no
    /// new attempt starts; what still waits is left to the next owner) and
    /// running calls see cancellation; what still runs at `deadline` is
    /// abandoned.
    async fn drain(&mut self, cancel_at: Instant, deadline: Instant) {
        debug!(partition = %self.tp, running = self.running.len(), "draining");
        self.shared.scope.shutdown.cancel();
        while !self.running.is_empty() {
            self.stamp();
            tokio::select! {
                Some(done) = self.running.join_next() => self.complete(done, true),
                () = tokio::time::sleep_until(cancel_at) => break,
            }
        }
        self.shared.scope.cancel.cancel();
        let dropped = self.queues.drop_waiting();
        if self.running.is_empty() {
            return;
        }
        debug!(partition = %self.tp, dropped, running = self.running.len(),
            "still running at the cancellation point");
        loop {
            tokio::select! {
                done = self.running.join_next() => match done {
                    Some(done) => self.complete(done, false),
                    None => return,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        warn!(partition = %self.tp, running = self.running.len(),
            "handlers still running at the shutdown deadline; abandoned");
        self.running.abort_all();
        // Wait until they are gone, so none overlaps the partition's next
        // owner.
        while self.running.join_next().await.is_some() {}
    }
}

impl<S: EventService<Encoded>> Drop for PartitionTask<S> {
    fn drop(&mut self) {
        self.shared.scope.cancel.cancel();
    }
}
