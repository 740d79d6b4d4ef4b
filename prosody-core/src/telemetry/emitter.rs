//! The producer sink: lifecycle events as JSON records on a topic.

use super::{Lifecycle, TelemetryEvent, TelemetrySink};
use crate::broker::{OutgoingRecord, Producer};
use crate::context::Demand;
use crate::error::Category;
use crate::event::Topic;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// Events queued for sending before new ones are dropped.
const QUEUE: usize = 8192;

/// Sends in flight at once.
const IN_FLIGHT: usize = 256;

/// How long one send may take before it counts as lost.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The sink's task could not start: there is no tokio runtime here.
#[derive(Debug, thiserror::Error)]
#[error("the telemetry sink needs a tokio runtime to run its sending task in")]
pub struct NoRuntime;

/// What the sending task takes off its queue.
enum Item {
    Event(TelemetryEvent),
    /// Answer once everything queued before has been sent.
    Flush(oneshot::Sender<()>),
}

/// Sends lifecycle events to a topic, keyed by the event's key, from a task
/// of its own.
///
/// Invariant: [`TelemetrySink::emit`] never blocks: events go into a queue
/// of 8,192; when it is full (or the task is gone) the event is dropped and
/// counted ([`ProducerSink::dropped`]), and a warning names the count at
/// each power of two. Telemetry never holds up a handler. Sends run
/// concurrently (up to 256), so events of one key may arrive out of order;
/// each carries its time (`at`). Every accepted event is sent, or counted
/// as dropped when its send fails, unless the runtime stops first:
/// [`ProducerSink::flush`] waits until what was queued has gone. The task
/// ends when the last clone of the sink is dropped, after sending what was
/// queued.
#[derive(Clone)]
pub struct ProducerSink {
    queue: mpsc::Sender<Item>,
    dropped: Arc<AtomicU64>,
    /// Events accepted and not yet sent or counted as dropped.
    pending: Arc<AtomicU64>,
}

impl ProducerSink {
    /// A sink producing to `topic` through `producer`, with its sending
    /// task spawned on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`] outside a tokio runtime.
    pub fn spawn<P: Producer>(producer: P, topic: impl Into<Topic>) -> Result<Self, NoRuntime> {
        let runtime = Handle::try_current().map_err(|_| NoRuntime)?;
        let (queue, events) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let pending = Arc::new(AtomicU64::new(0));
        runtime.spawn(send_all(
            producer,
            topic.into(),
            events,
            Counters {
                dropped: Arc::clone(&dropped),
                pending: Arc::clone(&pending),
            },
        ));
        Ok(Self {
            queue,
            dropped,
            pending,
        })
    }

    /// Events dropped so far: the queue was full, or their send failed.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events accepted and not yet sent (nor counted as dropped).
    #[must_use]
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }

    /// Waits until every event emitted before this call has been sent (or
    /// counted as dropped). Bound it with a timeout: a broker that does not
    /// answer holds each send for up to 5 s.
    pub async fn flush(&self) {
        let (done, sent) = oneshot::channel();
        if self.queue.send(Item::Flush(done)).await.is_ok() {
            let _ = sent.await;
        }
    }

    /// [`flush`](Self::flush), giving up at `deadline`, whatever the
    /// producer does: returns at once when `deadline` has passed.
    ///
    /// # Errors
    ///
    /// [`Unflushed`], with the count of events still unsent at the
    /// deadline (they may yet be sent while the runtime lives).
    pub async fn flush_until(&self, deadline: tokio::time::Instant) -> Result<(), Unflushed> {
        match tokio::time::timeout_at(deadline, self.flush()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Unflushed(self.pending())),
        }
    }
}

/// Telemetry events not sent by a flush's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} telemetry events were still unsent at the deadline")]
pub struct Unflushed(pub u64);

/// What the sending task counts.
struct Counters {
    dropped: Arc<AtomicU64>,
    pending: Arc<AtomicU64>,
}

impl Counters {
    /// One accepted event is done with: sent, or counted as dropped.
    fn done(&self, failed: bool) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
        if failed {
            count_drop(&self.dropped, "a telemetry send failed");
        }
    }
}

impl fmt::Debug for ProducerSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerSink")
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl TelemetrySink for ProducerSink {
    fn emit(&self, event: TelemetryEvent) {
        // Counted before it is queued, so the task never counts it down
        // first.
        self.pending.fetch_add(1, Ordering::Relaxed);
        match self.queue.try_send(Item::Event(event)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.pending.fetch_sub(1, Ordering::Relaxed);
                count_drop(&self.dropped, "the telemetry queue is full");
            }
            Err(TrySendError::Closed(_)) => {
                self.pending.fetch_sub(1, Ordering::Relaxed);
                count_drop(&self.dropped, "the telemetry task has stopped");
            }
        }
    }
}

/// Counts one dropped event, warning at each power of two.
fn count_drop(dropped: &AtomicU64, why: &str) {
    let total = dropped.fetch_add(1, Ordering::Relaxed) + 1;
    if total.is_power_of_two() {
        warn!(dropped = total, "{why}; telemetry events dropped");
    }
}

/// The sending task: takes items off the queue while fewer than
/// `IN_FLIGHT` sends run, counts failed sends, answers a flush once the
/// sends before it are done, and ends when the queue closes and the last
/// send is done.
async fn send_all<P: Producer>(
    producer: P,
    topic: Topic,
    mut items: mpsc::Receiver<Item>,
    counters: Counters,
) {
    let mut sending = FuturesUnordered::new();
    let mut open = true;
    while open || !sending.is_empty() {
        tokio::select! {
            item = items.recv(), if open && sending.len() < IN_FLIGHT => match item {
                Some(Item::Event(event)) => {
                    let record = encode(&topic, &event);
                    let producer = producer.clone();
                    sending.push(async move { producer.send(record, SEND_TIMEOUT).await });
                }
                Some(Item::Flush(done)) => {
                    while let Some(sent) = sending.next().await {
                        counters.done(sent.is_err());
                    }
                    let _ = done.send(());
                }
                None => open = false,
            },
            Some(sent) = sending.next(), if !sending.is_empty() => {
                counters.done(sent.is_err());
            }
        }
    }
}

/// The record of one event: keyed by the event's key, a JSON payload.
fn encode(topic: &Topic, event: &TelemetryEvent) -> OutgoingRecord {
    let (lifecycle, elapsed, category) = match event.lifecycle {
        Lifecycle::Dispatched => ("dispatched", None, None),
        Lifecycle::Succeeded { elapsed } => ("succeeded", Some(elapsed), None),
        Lifecycle::Abandoned { elapsed } => ("abandoned", Some(elapsed), None),
        Lifecycle::Failed { category, elapsed } => ("failed", Some(elapsed), Some(category)),
        Lifecycle::Sent { elapsed } => ("sent", Some(elapsed), None),
        Lifecycle::SendFailed { elapsed } => ("send_failed", Some(elapsed), None),
    };
    let wire = Wire {
        lifecycle,
        kind: event.kind,
        topic: &event.topic,
        partition: event.partition,
        offset: event.offset,
        key: event.key.as_str(),
        attempt: event.attempt,
        demand: match event.demand {
            Demand::Normal => "normal",
            Demand::Failure => "failure",
        },
        at: event.at.as_millis(),
        elapsed_ms: elapsed.map(|elapsed| elapsed.as_secs_f64() * 1e3),
        category: category.map(|category| match category {
            Category::Transient => "transient",
            Category::Permanent => "permanent",
            Category::Terminal => "terminal",
        }),
    };
    // Serialising a struct of strings and numbers cannot fail; an empty
    // payload would still be a visible event.
    let payload = serde_json::to_vec(&wire).unwrap_or_default();
    OutgoingRecord::new(
        topic.clone(),
        event.key.as_str().as_bytes().to_vec(),
        payload,
    )
}

/// The JSON form of an event.
#[derive(Serialize)]
struct Wire<'a> {
    lifecycle: &'static str,
    kind: &'static str,
    topic: &'a str,
    partition: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    key: &'a str,
    attempt: u32,
    demand: &'static str,
    /// Milliseconds since the Unix epoch.
    at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    elapsed_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    category: Option<&'static str>,
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "test code fails loudly")]
mod tests {
    use super::{ProducerSink, QUEUE};
    use crate::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
    use crate::clock::Timestamp;
    use crate::context::Demand;
    use crate::error::Category;
    use crate::telemetry::{Lifecycle, TelemetryEvent, TelemetrySink};
    use serde_json::{Value, json};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;
    use tokio::sync::{Notify, Semaphore};

    /// Records what it sends once a permit lets each send through.
    #[derive(Clone)]
    struct Gated {
        sent: Arc<Mutex<Vec<OutgoingRecord>>>,
        gate: Arc<Semaphore>,
        progress: Arc<Notify>,
    }

    impl Gated {
        fn open() -> Self {
            Self {
                sent: Arc::default(),
                gate: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
                progress: Arc::default(),
            }
        }

        fn sent(&self) -> Vec<OutgoingRecord> {
            self.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        async fn wait_for(&self, count: usize) {
            loop {
                let notified = self.progress.notified();
                if self.sent().len() >= count {
                    return;
                }
                notified.await;
            }
        }
    }

    impl Producer for Gated {
        async fn send(
            &self,
            record: OutgoingRecord,
            _timeout: Duration,
        ) -> Result<Delivery, BrokerError> {
            let permit = self.gate.acquire().await.map_err(|_| BrokerError::Closed)?;
            permit.forget();
            self.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record);
            self.progress.notify_waiters();
            Ok(Delivery {
                partition: 0,
                offset: 0,
            })
        }
    }

    fn event(lifecycle: Lifecycle, offset: Option<i64>) -> TelemetryEvent {
        TelemetryEvent {
            lifecycle,
            kind: if offset.is_some() { "message" } else { "timer" },
            topic: "orders".into(),
            partition: 3,
            offset,
            fire_time: None,
            key: "customer-7".into(),
            attempt: 2,
            demand: Demand::Failure,
            at: Timestamp::from_millis(1_700_000_000_000),
        }
    }

    #[tokio::test]
    async fn each_event_is_a_keyed_json_record_on_the_topic() {
        let producer = Gated::open();
        let sink = ProducerSink::spawn(producer.clone(), "lifecycle").expect("a runtime");
        sink.emit(event(Lifecycle::Dispatched, Some(41)));
        sink.emit(event(
            Lifecycle::Failed {
                category: Category::Transient,
                elapsed: Duration::from_millis(12),
            },
            None,
        ));
        tokio::time::timeout(Duration::from_secs(5), sink.flush())
            .await
            .expect("both events sent");
        assert_eq!(producer.sent().len(), 2);
        let mut payloads: Vec<Value> = producer
            .sent()
            .iter()
            .map(|record| {
                assert_eq!(&*record.topic, "lifecycle");
                assert_eq!(record.key.as_deref(), Some(&b"customer-7"[..]));
                serde_json::from_slice(record.payload.as_deref().expect("payload")).expect("JSON")
            })
            .collect();
        payloads.sort_by_key(|payload| payload["lifecycle"].to_string());
        assert_eq!(
            payloads,
            [
                json!({"lifecycle": "dispatched", "kind": "message", "topic": "orders",
                    "partition": 3, "offset": 41, "key": "customer-7", "attempt": 2,
                    "demand": "failure", "at": 1_700_000_000_000_i64}),
                json!({"lifecycle": "failed", "kind": "timer", "topic": "orders",
                    "partition": 3, "key": "customer-7", "attempt": 2,
                    "demand": "failure", "at": 1_700_000_000_000_i64,
                    "elapsed_ms": 12.0, "category": "transient"}),
            ]
        );
        assert_eq!(sink.dropped(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_without_blocking() {
        let producer = Gated::open();
        // Nothing is sent until the gate opens, so the queue fills.
        producer.gate.forget_permits(Semaphore::MAX_PERMITS);
        let sink = ProducerSink::spawn(producer.clone(), "lifecycle").expect("a runtime");
        let extra = 10;
        for offset in 0..QUEUE + super::IN_FLIGHT + extra {
            sink.emit(event(
                Lifecycle::Dispatched,
                Some(i64::try_from(offset).unwrap_or(i64::MAX)),
            ));
        }
        // On this single-threaded runtime the task has not run yet: the
        // queue took exactly its capacity, and the rest were dropped.
        assert_eq!(sink.dropped(), (super::IN_FLIGHT + extra) as u64);
        producer.gate.add_permits(QUEUE);
        tokio::time::timeout(Duration::from_secs(5), producer.wait_for(QUEUE))
            .await
            .expect("every accepted event sent");
    }

    #[tokio::test]
    async fn a_failed_send_is_counted_and_flush_waits_for_it() {
        let producer = Gated::open();
        producer.gate.close();
        let sink = ProducerSink::spawn(producer.clone(), "lifecycle").expect("a runtime");
        sink.emit(event(Lifecycle::Dispatched, Some(1)));
        sink.emit(event(
            Lifecycle::Succeeded {
                elapsed: Duration::ZERO,
            },
            Some(1),
        ));
        tokio::time::timeout(Duration::from_secs(5), sink.flush())
            .await
            .expect("the flush answers");
        assert_eq!(sink.dropped(), 2);
        assert!(producer.sent().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn flush_waits_for_the_sends_before_it() {
        let producer = Gated::open();
        producer.gate.forget_permits(Semaphore::MAX_PERMITS);
        let sink = ProducerSink::spawn(producer.clone(), "lifecycle").expect("a runtime");
        sink.emit(event(Lifecycle::Dispatched, Some(1)));
        sink.emit(event(Lifecycle::Dispatched, Some(2)));
        let flush = sink.flush();
        tokio::pin!(flush);
        // Both sends wait at the gate: the flush must not answer (the
        // paused clock runs the timeout out only once all tasks are idle).
        let early = tokio::time::timeout(Duration::from_secs(1), &mut flush).await;
        assert!(early.is_err(), "the flush answered before the sends");
        producer.gate.add_permits(2);
        flush.await;
        assert_eq!(producer.sent().len(), 2);
    }

    /// A producer that never answers holds a flush only until its
    /// deadline, which reports what is still unsent.
    #[tokio::test(start_paused = true)]
    async fn a_flush_gives_up_at_its_deadline_and_counts_what_is_unsent() {
        let producer = Gated::open();
        producer.gate.forget_permits(Semaphore::MAX_PERMITS);
        let sink = ProducerSink::spawn(producer.clone(), "lifecycle").expect("a runtime");
        for offset in 0..3 {
            sink.emit(event(Lifecycle::Dispatched, Some(offset)));
        }
        let start = tokio::time::Instant::now();
        let deadline = start + Duration::from_secs(2);
        assert_eq!(sink.flush_until(deadline).await, Err(super::Unflushed(3)));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        producer.gate.add_permits(3);
        assert_eq!(sink.flush_until(deadline).await, Err(super::Unflushed(3)));
        let later = tokio::time::Instant::now() + Duration::from_secs(1);
        assert_eq!(sink.flush_until(later).await, Ok(()));
        assert_eq!(sink.pending(), 0);
    }

    #[test]
    fn outside_a_runtime_the_sink_is_an_error() {
        assert!(ProducerSink::spawn(Gated::open(), "lifecycle").is_err());
    }
}
