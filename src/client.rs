//! The client: produces, and runs one subscription at a time.

use crate::consume::Consuming;
use crate::error::ClientError;
use crate::gate::Gate;
use crate::health::ConsumerHealth;
use crate::health::ConsumerState;
use crate::observe::{Counts, SERIES};
use crate::published::{ClientReads, Readers};
use crate::request::Requests;
use crate::send::Sender;
use crate::stack::Layers;
use prosody_core::broker::TopicPartition;
use prosody_core::peer::PeerId;
use prosody_core::report::ReportSink;
use prosody_core::store::DeferCounts;
use prosody_core::telemetry::ProducerSink;
use prosody_core::{Codec, Encoded, EventHandler, EventService, JsonCodec, Key};
use prosody_request::{Outcomes, Refusal};
use prosody_state::{CacheLookups, Publishable};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::warn;

/// The client's parts, shared by its handles.
///
/// Invariant: each part holds what it needs and nothing of the others;
/// the probe server and the counters hold it (or its health) weakly, so
/// it lives exactly as long as the last handle.
pub(crate) struct Inner<C> {
    /// Closed when shutdown starts.
    pub(crate) gate: Arc<Gate>,
    pub(crate) shutdown: OnceCell<()>,
    /// The budget of the whole shutdown.
    pub(crate) shutdown_timeout: Duration,
    pub(crate) layers: Layers<C>,
    /// Produces the client's records.
    pub(crate) sender: Sender<C>,
    /// The subscription, its consumer and the probe server.
    pub(crate) consuming: Consuming,
    /// The consumer's health, which the probe reads.
    pub(crate) health: Arc<ConsumerHealth>,
    pub(crate) requests: Requests,
    pub(crate) readers: Readers,
    /// The owners' keyed-state cache's hits and misses, with collections.
    pub(crate) lookups: Option<CacheLookups>,
}

/// Produces records and consumes topics with one handler.
///
/// Clones share one client. Call [`ProsodyClient::shutdown`] before the
/// last clone is dropped: dropping it without shutting down is a crash, in
/// which nothing is drained or committed (the partitions' next owners
/// handle again what was not committed, and the telemetry still queued is
/// lost). Such a drop logs a warning counting what was left: the
/// partitions held, their unsettled records, the telemetry events queued
/// and the answers being sent. A client that was never subscribed (or was
/// unsubscribed) and holds none of these is dropped in silence.
///
/// Invariant: after [`ProsodyClient::shutdown`] starts, every operation fails
/// with [`ClientError::ShutDown`], and at most one subscription runs at a time.
///
/// # Examples
///
/// Each order schedules a reminder a minute after it was placed; the
/// timer brings the key back to `on_timer`. Mock mode needs no server, and
/// the paused clock lets the minute pass at once.
///
/// ```
/// use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer, Timestamp};
/// use serde_json::{Value, json};
/// use std::time::Duration;
/// use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
///
/// struct Reminders(UnboundedSender<String>);
///
/// impl EventHandler for Reminders {
///     type Payload = Value;
///     type Output = ();
///
///     async fn on_message(&self, context: Context, order: Message<Value>) -> Result<(), HandlerError> {
///         // Stored only if this attempt succeeds.
///         context.schedule(Timestamp::from_millis(order.timestamp.as_millis() + 60_000))?;
///         self.0.send(format!("placed {}", order.key))?;
///         Ok(())
///     }
///
///     async fn on_timer(&self, _: Context, timer: Timer) -> Result<(), HandlerError> {
///         self.0.send(format!("remind {}", timer.key))?;
///         Ok(())
///     }
/// #   async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> { Ok(()) }
/// }
///
/// #[tokio::main(flavor = "current_thread", start_paused = true)]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let client = ProsodyClient::builder()
///         .mock(true)
///         .group_id("reminders")
///         .source_system("shop") // records from the group id itself are skipped
///         .subscribed_topics(["orders"])
///         .build()
///         .await?;
///     let (events, mut seen) = unbounded_channel();
///     client.subscribe(Reminders(events)).await?;
///     client.send("orders", "order-7", &json!({ "type": "order.placed" })).await?;
///
///     for expected in ["placed order-7", "remind order-7"] {
///         let event = tokio::time::timeout(Duration::from_secs(300), seen.recv()).await?;
///         assert_eq!(event.as_deref(), Some(expected));
///     }
///     client.shutdown().await;
///     Ok(())
/// }
/// ```
pub struct ProsodyClient<C = JsonCodec> {
    pub(crate) inner: Arc<Inner<C>>,
}

impl<C> fmt::Debug for ProsodyClient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("ProsodyClient")
            .field("group_id", inner.consuming.group_id())
            .field("source_system", &inner.sender.source_system())
            .field("broker", inner.consuming.broker())
            .finish_non_exhaustive()
    }
}

impl<C> Clone for ProsodyClient<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Codec> ProsodyClient<C> {
    /// The identifier written to the `source-system` header.
    #[must_use]
    pub fn source_system(&self) -> &str {
        self.inner.sender.source_system()
    }

    /// Sends a keyed record and waits until the broker has it.
    pub async fn send(
        &self,
        topic: &str,
        key: impl Into<Key>,
        payload: &C::Value,
    ) -> Result<(), ClientError> {
        self.inner.sender.send(topic, key.into(), payload).await
    }

    /// Sends an excise record (a tombstone) for a key: its consumers delete
    /// everything they hold for it.
    pub async fn excise(&self, topic: &str, key: impl Into<Key>) -> Result<(), ClientError> {
        self.inner.sender.excise(topic, key.into()).await
    }

    /// Starts consuming with a handler.
    ///
    /// The handler runs inside the stack of the client's [`Mode`](crate::Mode).
    pub async fn subscribe<H>(&self, handler: H) -> Result<(), ClientError>
    where
        H: EventHandler<Payload = C::Value>,
        H::Output: Serialize,
    {
        self.inner
            .consuming
            .subscribe(&self.inner.layers, handler)
            .await
    }

    /// The configured stages of this client, to build a custom stack with
    /// `tower::ServiceBuilder` for [`ProsodyClient::subscribe_with`].
    #[must_use]
    pub fn layers(&self) -> &Layers<C> {
        &self.inner.layers
    }

    /// Starts consuming with a complete stack: a handler service
    /// ([`Layers::handler`], which decodes with this client's codec)
    /// wrapped in any layers. The stack carries events
    /// as they came off the broker ([`Encoded`]); the handler service
    /// decodes them. Include [`Layers::scheduler`]: it is what bounds
    /// `max_concurrency`.
    pub async fn subscribe_with<S>(&self, stack: S) -> Result<(), ClientError>
    where
        S: EventService<Encoded>,
    {
        self.inner.consuming.subscribe_with(stack).await
    }

    /// Stops consuming: drains within the shutdown timeout, commits, and
    /// leaves the group. The client can subscribe again.
    pub async fn unsubscribe(&self) -> Result<(), ClientError> {
        self.inner.consuming.unsubscribe().await
    }

    /// Failure reports dropped so far because the error reporter's queue
    /// was full (zero without a reporter): see
    /// [`ClientBuilder::error_reporter`](crate::ClientBuilder::error_reporter).
    #[must_use]
    pub fn dropped_reports(&self) -> u64 {
        self.inner.layers.dropped_reports()
    }

    /// A read-only reader of `subsystem`'s published collection
    /// `definition` (the owners' own definition): each read takes the key,
    /// and sees what the owners committed (never a handler's pending
    /// changes), at most `read_cache` (the definition's, else
    /// `state_read_cache`) old. The client needs no subscription, takes no
    /// partition and writes nothing.
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidRequest`] for an invalid subsystem name;
    /// [`ClientError::State`] with [`StateError::Unpublished`] when the
    /// subsystem does not publish the collection, retired it, or publishes
    /// another kind; with [`StateError::Store`] when the directory fails.
    ///
    /// [`StateError::Unpublished`]: prosody_core::state::StateError::Unpublished
    /// [`StateError::Store`]: prosody_core::state::StateError::Store
    pub async fn state<D: Publishable>(
        &self,
        subsystem: &str,
        definition: &D,
    ) -> Result<D::Reader<ClientReads>, ClientError> {
        self.inner.readers.state(subsystem, definition).await
    }

    /// Sends `payload` to `topic` as a request to `subsystems` and waits up
    /// to `timeout` for their answers: one [`Outcome`] per subsystem named
    /// (duplicates count once), keyed by its name. An answer is the
    /// subsystem's handler's return value, decoded as a `T` (its JSON
    /// form); a subsystem that does not answer in time is a
    /// [`ResponseError::Timeout`].
    ///
    /// The client needs no subscription to send requests. A handler that
    /// awaits a request its own group must handle for the same key waits
    /// until the timeout: its key runs one event at a time.
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidRequest`] for no subsystem, an invalid name or
    /// a zero timeout; [`ClientError::Encode`], [`ClientError::Broker`] when
    /// the record cannot be sent; [`ClientError::ShutDown`] after
    /// shutdown; [`ClientError::Peer`] when the peer endpoint cannot start.
    ///
    /// [`Outcome`]: prosody_request::Outcome
    /// [`ResponseError::Timeout`]: prosody_request::ResponseError::Timeout
    pub async fn request<T: DeserializeOwned>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        payload: &C::Value,
        subsystems: &[&str],
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError> {
        self.inner
            .requests
            .request(
                &self.inner.sender,
                topic,
                key.into(),
                payload,
                subsystems,
                timeout,
            )
            .await
    }

    /// How many answers reached this client and were dropped: for a
    /// request it no longer waits for (timed out, or made by an earlier
    /// life of the process), or a second answer of one subsystem.
    #[must_use]
    pub fn dropped_answers(&self) -> u64 {
        self.inner.requests.dropped()
    }

    /// The peer id the answers to this client's requests are addressed to
    /// (it registers in the peer directory under it): `None` until its
    /// first request, then the same for the client's life.
    #[must_use]
    pub fn peer_id(&self) -> Option<PeerId> {
        self.inner.requests.peer()
    }

    /// Sends an excise record for `key` to `topic` as a request to
    /// `subsystems`, answered by their `on_excise`; otherwise as
    /// [`request`](Self::request).
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub async fn request_excise<T: DeserializeOwned>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        subsystems: &[&str],
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError> {
        self.inner
            .requests
            .request_excise(&self.inner.sender, topic, key.into(), subsystems, timeout)
            .await
    }

    /// Stops everything, then sends the telemetry events still queued.
    /// Concurrent and repeated calls wait for the same shutdown; afterwards
    /// every operation fails with [`ClientError::ShutDown`].
    ///
    /// One deadline, `shutdown_timeout` from the call, bounds every step,
    /// each getting what the ones before left of it: the partitions'
    /// drain, the answers still being sent to requesters (abandoned at the
    /// deadline), the deletion of the peer directory entry (at most 5 s; it
    /// runs out with its lease otherwise), the probe server's stop and the
    /// flush of the telemetry still queued (events still unsent are counted
    /// in a warning). Past the deadline come only an offset commit already
    /// under way when it was called, the final offset commit (each at most
    /// 10 s on Kafka) and the consumer's leaving its group (what is left of
    /// the deadline, and at least 2 s).
    pub async fn shutdown(&self) {
        self.inner.shutdown().await;
    }

    /// Where the consumer is in its life.
    #[must_use]
    pub fn consumer_state(&self) -> ConsumerState {
        self.inner.health.consumer_state()
    }

    /// Whether the consumer is not live (what `/livez` reports): it
    /// stopped without being asked to, a partition halted on a terminal
    /// error, or a partition with work pending made no progress for
    /// `stall_threshold`.
    #[must_use]
    pub fn is_stalled(&self) -> bool {
        self.inner.health.is_stalled()
    }

    /// What keeps the consumer from being live, one line each; empty when
    /// live.
    #[must_use]
    pub fn liveness_problems(&self) -> Vec<String> {
        self.inner.health.liveness_problems()
    }

    /// The partitions with work pending and no progress for
    /// `stall_threshold`, in order.
    #[must_use]
    pub fn stalled_partitions(&self) -> Vec<TopicPartition> {
        self.inner.health.stalled_partitions()
    }

    /// The partitions a terminal error stopped, in order: nothing more is
    /// handled or committed on them until they move to another member (or
    /// this one subscribes again).
    #[must_use]
    pub fn halted_partitions(&self) -> Vec<TopicPartition> {
        self.inner.health.halted_partitions()
    }

    /// Where the probe server listens, once the first `subscribe` started
    /// it (`None` when disabled, or when its port could not be bound).
    #[must_use]
    pub fn probe_address(&self) -> Option<std::net::SocketAddr> {
        self.inner.consuming.probe_address()
    }

    /// Each partition this client consumes, in order, with how many of its
    /// keys have deferred records and how many records are deferred (see
    /// the `prosody.defer.keys` and `prosody.defer.records` gauges): read
    /// from the defer store when the partition opened, then kept current
    /// by each commit that changes deferrals. A partition whose stores
    /// have not answered yet is left out; empty when not consuming.
    #[must_use]
    pub fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
        self.inner.health.deferred_counts()
    }

    /// How many partitions this client consumes now.
    #[must_use]
    pub fn assigned_partition_count(&self) -> usize {
        self.inner.health.assigned_partition_count()
    }
}

impl<C: Codec> Inner<C> {
    /// Closes the gate, then stops everything under one deadline (see
    /// [`ProsodyClient::shutdown`]); concurrent and repeated calls wait
    /// for the same shutdown.
    async fn shutdown(&self) {
        self.gate.close();
        self.shutdown
            .get_or_init(|| async {
                let stop = |deadline| async move {
                    self.consuming.stop(deadline).await;
                    self.requests.close(deadline).await;
                    self.consuming.stop_probe(deadline).await;
                };
                close(stop, self.layers.telemetry_sink(), self.shutdown_timeout).await;
            })
            .await;
    }
}

impl<C> Drop for Inner<C> {
    /// The last handle went without `shutdown()` (or before it finished):
    /// warns of what was left, counted without blocking.
    fn drop(&mut self) {
        if self.shutdown.initialized() {
            return;
        }
        let running = self
            .consuming
            .running()
            .filter(|runtime| !runtime.is_finished());
        let partitions = running.as_ref().map_or(0, |r| r.assigned_partition_count());
        let unsettled = running.as_ref().map_or(0, |r| r.unsettled_records());
        let telemetry = self
            .layers
            .telemetry_sink()
            .map_or(0, ProducerSink::pending);
        let answers = self.requests.sending();
        if running.is_none() && telemetry == 0 && answers == 0 {
            return;
        }
        warn!(
            subscribed = running.is_some(),
            partitions,
            unsettled,
            telemetry,
            answers,
            "the last ProsodyClient handle was dropped without shutdown(): nothing is drained or \
             committed; the partitions' next owners handle again what was not committed, and \
             the queued telemetry events and the answers being sent are lost"
        );
    }
}

impl<C: Codec> Counts for Inner<C> {
    fn counts(&self) -> [u64; SERIES] {
        let published = self.readers.lookups();
        let refused = Refusal::ALL.map(|reason| self.requests.refused(reason));
        [
            self.layers
                .telemetry_sink()
                .map_or(0, ProducerSink::dropped),
            self.requests.dropped(),
            self.layers.report_sink().map_or(0, ReportSink::dropped),
            self.lookups.as_ref().map_or(0, CacheLookups::hits),
            self.lookups.as_ref().map_or(0, CacheLookups::misses),
            published.hits(),
            published.misses(),
            refused[0],
            refused[1],
            refused[2],
            refused[3],
        ]
    }
}

/// Computes the one deadline, `budget` from now; runs `stop` with it (each
/// of its steps keeps to it), then flushes `telemetry` until it, so
/// everything together takes no longer than `budget` (besides what the
/// steps may take past it: the commits and the group leave),
/// whatever the telemetry producer does.
async fn close<F, S>(stop: S, telemetry: Option<&ProducerSink>, budget: Duration)
where
    S: FnOnce(Instant) -> F,
    F: Future<Output = ()>,
{
    let start = Instant::now();
    let deadline = start.checked_add(budget).unwrap_or(start + YEAR);
    stop(deadline).await;
    if let Some(sink) = telemetry
        && let Err(unflushed) = sink.flush_until(deadline).await
    {
        warn!(
            unsent = unflushed.0,
            "{unflushed} (shutdown_timeout {budget:?}); they are not sent"
        );
    }
}

/// A bound for budgets too long to add to now.
const YEAR: Duration = Duration::from_secs(365 * 86_400);

#[cfg(test)]
mod tests;
