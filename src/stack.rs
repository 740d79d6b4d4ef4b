//! The stages of a client, configured, and the stacks of the three modes.

use crate::backend::{Backend, BackendProducer};
use crate::config::{Mode, Qos};
use prosody_core::EventRequest;
use prosody_core::HandlerError;
use prosody_core::dedup::DedupLayer;
use prosody_core::defer::DeferLayer;
use prosody_core::failure::FailureLayer;
use prosody_core::loader::BrokerLoader;
use prosody_core::log::LogLayer;
use prosody_core::monopolization::MonopolizationLayer;
use prosody_core::report::ReportSink;
use prosody_core::retry::{RetryConfig, RetryLayer};
use prosody_core::scheduler::{SchedulerLayer, SchedulerService};
use prosody_core::shutdown::{ShutdownLayer, ShutdownService};
use prosody_core::telemetry::{
    Links, ProducerSink, TelemetryEvent, TelemetryLayer, TelemetryService, TelemetrySink,
};
use prosody_core::timeout::{TimeoutLayer, TimeoutService};
use prosody_core::{
    Codec, Encoded, EventHandler, EventService, HandlerService, JsonCodec, Response,
};
use serde::Serialize;
use tower::{Service, ServiceBuilder};

/// The stages every preset ends with, around a handler.
type Common<H, C> = ShutdownService<
    SchedulerService<TimeoutService<TelemetryService<HandlerService<H, C>, ClientTelemetry>>>,
>;

/// A client's telemetry sinks: lifecycle events as records on the telemetry
/// topic, or none (mock mode, or `telemetry_enabled` false); and failed
/// calls to the error reporter, when one is set
/// ([`ClientBuilder::error_reporter`](crate::ClientBuilder::error_reporter)).
///
/// Invariant: each event reaches each sink that is there and enabled,
/// once; clones share the sinks.
#[derive(Clone, Debug)]
pub struct ClientTelemetry {
    sinks: (Option<ProducerSink>, Option<ReportSink>),
}

impl ClientTelemetry {
    pub(crate) fn new(events: Option<ProducerSink>, reports: Option<ReportSink>) -> Self {
        Self {
            sinks: (events, reports),
        }
    }

    /// The lifecycle-event sink, if there is one.
    pub(crate) fn events(&self) -> Option<&ProducerSink> {
        self.sinks.0.as_ref()
    }

    /// The failure-report sink, if there is one.
    pub(crate) fn reports(&self) -> Option<&ReportSink> {
        self.sinks.1.as_ref()
    }
}

impl TelemetrySink for ClientTelemetry {
    fn enabled(&self) -> bool {
        self.sinks.enabled()
    }

    fn emit(&self, event: TelemetryEvent) {
        self.sinks.emit(event);
    }

    fn failure(&self, event: &TelemetryEvent, error: &HandlerError) {
        self.sinks.failure(event, error);
    }
}

/// A client's defer stage: offsets in the partition's stores, records read
/// back from the client's broker; the records its backlogs retry pass
/// through the client's dedup layer.
pub type ClientDeferLayer = DeferLayer<BrokerLoader<Backend>, DedupLayer>;

/// The configured stages of one client, to build a preset or a custom
/// stack with `tower::ServiceBuilder`.
///
/// Invariant: the stateful stages (dedup cache, defer gate and loader
/// cache, scheduler, monopolization windows) are built once per client, so
/// every subscription and partition of the client shares them, and they
/// outlive a rebalance.
///
/// # Examples
///
/// A stack of some of the client's stages plus two tower middlewares: one
/// that counts the records it sees (before they are decoded), and a limit
/// of two handler calls at once.
///
/// ```
/// use prosody::{Context, Encoded, EventHandler, EventRequest, Excise, HandlerError, Message, ProsodyClient, Timer};
/// use serde_json::{Value, json};
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
/// use tower::ServiceBuilder;
/// use tower::limit::ConcurrencyLimitLayer;
///
/// struct Jobs(UnboundedSender<String>);
///
/// impl EventHandler for Jobs {
///     type Payload = Value;
///     type Output = ();
///
///     async fn on_message(&self, _: Context, job: Message<Value>) -> Result<(), HandlerError> {
///         self.0.send(job.key.to_string())?;
///         Ok(())
///     }
/// #   async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> { Ok(()) }
/// #   async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> { Ok(()) }
/// }
///
/// #[tokio::main(flavor = "current_thread", start_paused = true)]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let client = ProsodyClient::builder()
///         .mock(true)
///         .group_id("workers")
///         .source_system("planner")
///         .subscribed_topics(["jobs"])
///         .build()
///         .await?;
///     let counted = Arc::new(AtomicUsize::new(0));
///     let counter = Arc::clone(&counted);
///     let (done, mut handled) = unbounded_channel();
///     let layers = client.layers();
///     let stack = ServiceBuilder::new()
///         .map_request(move |request: EventRequest<Encoded>| {
///             counter.fetch_add(1, Ordering::Relaxed);
///             request
///         })
///         .layer(layers.dedup())
///         .layer(layers.retry())
///         .layer(ConcurrencyLimitLayer::new(2))
///         .layer(layers.shutdown())
///         .layer(layers.scheduler()) // bounds `max_concurrency`: keep it
///         .layer(layers.timeout())
///         .service(layers.handler(Jobs(done)));
///     client.subscribe_with(stack).await?;
///
///     client.send("jobs", "job-1", &json!({ "type": "job" })).await?;
///     let key = tokio::time::timeout(Duration::from_secs(60), handled.recv()).await?;
///     assert_eq!(key.as_deref(), Some("job-1"));
///     assert_eq!(counted.load(Ordering::Relaxed), 1);
///     client.shutdown().await;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct Layers<C = JsonCodec> {
    mode: Mode,
    retry: RetryConfig,
    max_retries: u32,
    dedup: DedupLayer,
    monopolization: MonopolizationLayer,
    scheduler: SchedulerLayer,
    timeout: TimeoutLayer,
    failure: Option<FailureLayer<BackendProducer>>,
    defer: ClientDeferLayer,
    telemetry: ClientTelemetry,
    links: Links,
    codec: C,
}

impl<C> Layers<C> {
    /// The client's lifecycle-event sink, if it has one.
    pub(crate) fn telemetry_sink(&self) -> Option<&ProducerSink> {
        self.telemetry.events()
    }
}

impl<C: Codec> Layers<C> {
    pub(crate) fn new(
        qos: &Qos,
        producer: &BackendProducer,
        loader: BrokerLoader<Backend>,
        codec: C,
        telemetry: ClientTelemetry,
        links: Links,
    ) -> Self {
        let dedup = DedupLayer::new(qos.dedup.clone());
        Self {
            defer: DeferLayer::new(qos.defer.clone(), loader).drain_through(dedup.clone()),
            codec,
            mode: qos.mode,
            telemetry,
            links,
            retry: qos.retry.clone(),
            max_retries: qos.max_retries,
            dedup,
            monopolization: MonopolizationLayer::new(&qos.monopolization),
            scheduler: SchedulerLayer::new(qos.scheduler.clone()),
            timeout: TimeoutLayer::new(qos.timeout),
            failure: qos
                .failure
                .clone()
                .map(|config| FailureLayer::new(producer.clone(), config)),
        }
    }

    /// The client's mode.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Deduplication by the payload's `id`.
    #[must_use]
    pub fn dedup(&self) -> DedupLayer {
        self.dedup.clone()
    }

    /// Retry of transient failures, forever.
    #[must_use]
    pub fn retry(&self) -> RetryLayer {
        RetryLayer::new(self.retry.clone())
    }

    /// Retry of transient failures, at most `max_retries` times.
    #[must_use]
    pub fn bounded_retry(&self) -> RetryLayer {
        RetryLayer::new(RetryConfig {
            max_retries: Some(self.max_retries),
            ..self.retry.clone()
        })
    }

    /// Deferred retry: a transient failure is set aside and retried by a
    /// timer, so the partition moves on.
    #[must_use]
    pub fn defer(&self) -> ClientDeferLayer {
        self.defer.clone()
    }

    /// Hot-key protection.
    #[must_use]
    pub fn monopolization(&self) -> MonopolizationLayer {
        self.monopolization.clone()
    }

    /// No new attempt once a partition shuts down.
    #[must_use]
    pub fn shutdown(&self) -> ShutdownLayer {
        ShutdownLayer::new()
    }

    /// Fair scheduling and the `max_concurrency` bound.
    #[must_use]
    pub fn scheduler(&self) -> SchedulerLayer {
        self.scheduler.clone()
    }

    /// The per-attempt deadline.
    #[must_use]
    pub fn timeout(&self) -> TimeoutLayer {
        self.timeout
    }

    /// Spans, lifecycle events (mock mode emits no events) and failure
    /// reports (in every mode).
    #[must_use]
    pub fn telemetry(&self) -> TelemetryLayer<ClientTelemetry> {
        TelemetryLayer::new(self.telemetry.clone()).with_links(self.links)
    }

    /// The client's failure-report sink, if it has one.
    pub(crate) fn report_sink(&self) -> Option<&ReportSink> {
        self.telemetry.reports()
    }

    /// Failure reports dropped so far because the report sink's queue was
    /// full (zero without one).
    pub(crate) fn dropped_reports(&self) -> u64 {
        self.report_sink().map_or(0, ReportSink::dropped)
    }

    /// Routing to the failure topic, when one is configured.
    #[must_use]
    pub fn failure(&self) -> Option<FailureLayer<BackendProducer>> {
        self.failure.clone()
    }

    /// Best-effort's log-and-settle.
    #[must_use]
    pub fn log(&self) -> LogLayer {
        LogLayer::new()
    }

    /// Whether the client's codec takes a payload's JSON parse (the
    /// runtime then parses each JSON object once).
    pub(crate) fn takes_parsed(&self) -> bool {
        self.codec.takes_parsed()
    }

    /// The innermost service of a stack: `handler`, with the client's codec
    /// to decode what it is given.
    #[must_use]
    pub fn handler<H: EventHandler<Payload = C::Value>>(&self, handler: H) -> HandlerService<H, C> {
        HandlerService::with_codec(handler, self.codec.clone())
    }

    /// The stages every preset ends with: shutdown, scheduler, timeout,
    /// telemetry, around the handler.
    fn common<H: EventHandler<Payload = C::Value>>(&self, handler: H) -> Common<H, C> {
        ServiceBuilder::new()
            .layer(self.shutdown())
            .layer(self.scheduler())
            .layer(self.timeout())
            .layer(self.telemetry())
            .service(self.handler(handler))
    }

    /// Pipeline: dedup, retry (forever), defer, monopolization, shutdown,
    /// scheduler, timeout, telemetry, handler.
    pub fn pipeline<H>(
        &self,
        handler: H,
    ) -> impl EventService<Encoded>
    + Service<EventRequest<Encoded>, Response = Response<H::Output>>
    + use<H, C>
    where
        H: EventHandler<Payload = C::Value, Output: Serialize>,
    {
        ServiceBuilder::new()
            .layer(self.dedup())
            .layer(self.retry())
            .layer(self.defer())
            .layer(self.monopolization())
            .service(self.common(handler))
    }

    /// Low-latency: dedup, retry (forever, for the failure-topic send),
    /// failure topic, retry (`max_retries`), shutdown, scheduler, timeout,
    /// telemetry, handler. `None` without a failure topic.
    pub fn low_latency<H>(
        &self,
        handler: H,
    ) -> Option<
        impl EventService<Encoded>
        + Service<EventRequest<Encoded>, Response = Response<H::Output>>
        + use<H, C>,
    >
    where
        H: EventHandler<Payload = C::Value, Output: Serialize>,
    {
        let failure = self.failure()?;
        Some(
            ServiceBuilder::new()
                .layer(self.dedup())
                .layer(self.retry())
                .layer(failure)
                .layer(self.bounded_retry())
                .service(self.common(handler)),
        )
    }

    /// Best-effort: dedup, log, shutdown, scheduler, timeout, telemetry,
    /// handler.
    pub fn best_effort<H>(
        &self,
        handler: H,
    ) -> impl EventService<Encoded>
    + Service<EventRequest<Encoded>, Response = Response<H::Output>>
    + use<H, C>
    where
        H: EventHandler<Payload = C::Value, Output: Serialize>,
    {
        ServiceBuilder::new()
            .layer(self.dedup())
            .layer(self.log())
            .service(self.common(handler))
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::Noop;
    use crate::{MemoryBroker, Mode, ProsodyClient};

    /// The stages of a stack, outermost first, read off its type: each
    /// service wraps the next as its first type parameter, down to the
    /// handler (the defer service's drain path follows and is not read).
    fn stages<T>(_: &T) -> Vec<String> {
        let name = std::any::type_name::<T>();
        let mut stages: Vec<String> = Vec::new();
        for stage in name
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter_map(|word| word.strip_suffix("Service"))
            .filter(|stage| !stage.is_empty())
        {
            stages.push(stage.to_owned());
            if stage == "Handler" {
                break;
            }
        }
        stages
    }

    #[tokio::test]
    async fn each_preset_stacks_the_stages_in_the_designed_order()
    -> Result<(), Box<dyn std::error::Error>> {
        let client = ProsodyClient::builder()
            .broker(MemoryBroker::new())
            .group_id("g")
            .failure_topic("failures")
            .mode(Mode::LowLatency)
            .build()
            .await?;
        let layers = client.layers();
        assert_eq!(
            stages(&layers.pipeline(Noop)),
            [
                "Dedup",
                "Retry",
                "Defer",
                "Monopolization",
                "Shutdown",
                "Scheduler",
                "Timeout",
                "Telemetry",
                "Handler"
            ]
        );
        assert_eq!(
            stages(&layers.low_latency(Noop).ok_or("no failure topic")?),
            [
                "Dedup",
                "Retry",
                "Failure",
                "Retry",
                "Shutdown",
                "Scheduler",
                "Timeout",
                "Telemetry",
                "Handler"
            ]
        );
        assert_eq!(
            stages(&layers.best_effort(Noop)),
            [
                "Dedup",
                "Log",
                "Shutdown",
                "Scheduler",
                "Timeout",
                "Telemetry",
                "Handler"
            ]
        );
        Ok(())
    }
}
