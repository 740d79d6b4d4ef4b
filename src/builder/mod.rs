//! The client builder.

mod given;
mod parts;

use crate::backend::{Backend, BackendProducer};
use crate::client::ProsodyClient;
use crate::config::Cluster;
use crate::config::{ConfigError, Mode, Options, ProbePort, Settings};
use crate::connect;
use crate::stack::ClientTelemetry;
use opentelemetry::metrics::Meter;
use parts::Connected;
use prosody_core::broker::{Broker, BrokerError};
use prosody_core::loader::BrokerLoader;
use prosody_core::report::{FailureReport, ReportSink, Reporter};
use prosody_core::store::Stores;
use prosody_core::telemetry::ProducerSink;
use prosody_core::{Codec, JsonCodec};
use std::sync::Arc;

/// Builds a [`ProsodyClient`]; every option left unset is read from its
/// `PROSODY_*` environment variable, else takes its default.
#[must_use]
pub struct ClientBuilder<C = JsonCodec> {
    options: Options,
    codec: C,
    /// A broker given to the builder, in memory or the caller's.
    broker: Option<Backend>,
    stores: Option<connect::Given>,
    /// librdkafka properties for the Kafka backend's clients.
    kafka: Vec<(String, String)>,
    /// The hook of failed handler calls.
    reporter: Option<Box<dyn Reporter>>,
    /// The meter of the client's metrics, if given.
    meter: Option<Meter>,
}

impl ProsodyClient<JsonCodec> {
    /// A builder with JSON payloads.
    pub fn builder() -> ClientBuilder<JsonCodec> {
        ClientBuilder::new(JsonCodec::new())
    }
}

// The option table's setters, one per row (their shapes' types named
// here, where they expand).
mod setters {
    use super::ClientBuilder;
    use crate::config::{GroupProtocol, ReadTtl, SaslMechanism, SecurityProtocol, SpanLink};
    use std::net::SocketAddr;
    use std::time::Duration;

    crate::config::option_rows!(crate::config::schema::setters);
}

impl<C> ClientBuilder<C> {
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }
}

impl<C: Codec> ClientBuilder<C> {
    pub(crate) fn new(codec: C) -> Self {
        Self {
            options: Options::default(),
            codec,
            broker: None,
            stores: None,
            kafka: Vec::new(),
            reporter: None,
            meter: None,
        }
    }

    /// The options as set, for the configuration tests.
    #[cfg(test)]
    pub(crate) fn into_options(self) -> Options {
        self.options
    }

    /// The failure-handling preset (default pipeline; no variable).
    pub fn mode(mut self, value: Mode) -> Self {
        self.options.mode = Some(value);
        self
    }

    /// No probe server (`PROSODY_PROBE_PORT=none`).
    pub fn disable_probe(mut self) -> Self {
        self.options.probe_port = Some(ProbePort::Disabled);
        self
    }

    /// Uses this broker, any implementation of [`Broker`] (an in-memory
    /// broker several clients of a test share, or a test double that
    /// injects faults), and turns `mock` on: no Kafka options are needed.
    /// Behind a broker whose records outlive the process
    /// ([`Broker::durable`]) the client keeps no store in memory unless
    /// told: give it [`stores`](Self::stores), or set
    /// [`memory_stores`](Self::memory_stores).
    pub fn broker(mut self, broker: impl Broker) -> Self {
        self.options.mock = Some(true);
        self.broker = Some(Backend::given(broker));
        self
    }

    /// Keeps timers, deferred records and dedup records in these stores,
    /// whatever the other options say: a backend of the caller's (any
    /// implementation of [`Stores`]), or [`MemoryStores`](crate::MemoryStores) shared by several
    /// clients of a test, as members sharing a persistent store do.
    pub fn stores(mut self, stores: impl Stores) -> Self {
        self.stores = Some(Box::new(move |metrics, settings| {
            connect::compose(stores, metrics, settings)
        }));
        self
    }

    /// Sets a librdkafka property on every Kafka client of this client
    /// (for example `security.protocol`, `sasl.mechanisms`); it wins over
    /// the backend's own settings. Ignored in mock mode.
    pub fn kafka_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.kafka.push((key.into(), value.into()));
        self
    }

    /// Hands each failed handler call (each failed attempt, whatever its
    /// category, in every mode, mock mode included) to `hook`, on a thread
    /// of its own: a hook that is slow or panics never holds up handling
    /// (see [`ReportSink`]; reports it could not keep up with are counted
    /// by [`ProsodyClient::dropped_reports`]). A closure taking a
    /// `&FailureReport` is a hook; with the `sentry` feature,
    /// `prosody::sentry::SentryReporter` is one.
    pub fn error_reporter(mut self, hook: impl Reporter) -> Self {
        self.reporter = Some(Box::new(hook));
        self
    }

    /// Records this client's metrics with `meter`, its instruments and
    /// counters its own. Without it the client records on the process's
    /// meter: with the `otel` feature (on by default), the provider of
    /// `prosody::otel::meter_provider`, which `/metrics` and OTLP read,
    /// shared by the clients of a group; without it, the `opentelemetry`
    /// globals' (`opentelemetry::global::meter("prosody")`, which records
    /// nothing until the application sets a global meter provider).
    /// Each client built with a given meter registers its own instruments
    /// and counter callbacks on it, which live as long as the meter: give
    /// a long-lived process one client per meter, or leave the default.
    /// Spans need no such setting: they are `tracing` spans, exported by
    /// whatever OpenTelemetry layer the application's subscriber has
    /// (`prosody::otel::layer`, or its own).
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Encodes and decodes payloads with another codec.
    pub fn codec<D: Codec>(self, codec: D) -> ClientBuilder<D> {
        ClientBuilder {
            options: self.options,
            codec,
            broker: self.broker,
            stores: self.stores,
            kafka: self.kafka,
            reporter: self.reporter,
            meter: self.meter,
        }
    }

    /// Validates the options and makes the clients. On Kafka it waits,
    /// for at most `connect_timeout`, until the cluster answers with these
    /// settings: a wrong password, an unknown certificate authority or an
    /// unreachable cluster fails here, naming the cause
    /// ([`ConfigError::Unreachable`]). Each `PROSODY_*` variable that is
    /// no option is logged as a warning, once per variable per process.
    pub async fn build(self) -> Result<ProsodyClient<C>, ConfigError> {
        // Before the options are checked: a renamed variable may be why
        // one is missing.
        let _ = crate::config::warn_unknown(crate::env::prosody_names());
        let mut settings = self.options.resolve(&crate::env::process())?;
        // Chosen before Kafka is reached: a missing store is a mistake in
        // the options, reported as one however the cluster is doing.
        // (Collections are checked once the broker, their loader, is made.)
        let (backing, directory, rebind) = Box::pin(connect::stores(
            self.stores,
            self.broker.as_ref(),
            &settings,
        ))
        .await?;
        let broker = match (&settings.cluster, self.broker) {
            (_, Some(broker)) => broker,
            (Cluster::Mock, None) => Backend::memory(crate::mock::cluster().broker()),
            (Cluster::Kafka(servers), None) => {
                connect::kafka(servers, &settings, self.kafka).await?
            }
        };
        let metrics = crate::observe::metrics(
            settings.observe.metrics,
            broker.is_kafka(),
            &settings.runtime.group_id,
            self.meter.as_ref(),
        )
        .await?;
        settings.runtime.metrics = metrics.clone();
        let connect::Composed { stores, lookups } = backing.compose(&metrics, &settings)?;
        let loader = BrokerLoader::new(broker.clone(), &settings.qos.loader);
        if !settings.runtime.state.is_empty() {
            settings.runtime.state =
                connect::state(&settings.runtime.state, &stores, loader.clone()).await?;
            crate::published::advertise(
                &settings,
                &settings.runtime.state,
                &stores,
                directory.as_ref(),
            )
            .await?;
        }
        let made = |e: BrokerError| ConfigError::Invalid {
            option: "bootstrap_servers",
            reason: format!("the producer could not be made: {e}"),
        };
        // Lifecycle events and routed failures batch; the client's own
        // sends and requests go out at once.
        let producer = broker.producer().map_err(made)?;
        let sends = broker.immediate_producer().map_err(made)?;
        let sinks = sinks(&settings, &broker, &producer, self.reporter)?;
        let connected = Connected {
            settings,
            broker,
            producers: parts::Producers {
                batching: producer,
                immediate: sends,
            },
            composed: connect::Composed { stores, lookups },
            loader,
            reach: (directory, rebind),
            sinks,
            meter: self.meter,
        };
        Ok(parts::assemble(self.codec, connected))
    }
}

/// The client's lifecycle-event sink (on Kafka only: mock mode emits
/// none) and its failure-report sink (with a hook), each started.
fn sinks(
    settings: &Settings,
    broker: &Backend,
    producer: &BackendProducer,
    reporter: Option<Box<dyn Reporter>>,
) -> Result<ClientTelemetry, ConfigError> {
    // Lifecycle events go to Kafka only: mock mode emits none.
    let telemetry = match &settings.qos.telemetry {
        Some(topic) if broker.is_kafka() => Some(
            ProducerSink::spawn(producer.clone(), Arc::clone(topic)).map_err(|e| {
                ConfigError::Invalid {
                    option: "telemetry_enabled",
                    reason: e.to_string(),
                }
            })?,
        ),
        _ => None,
    };
    let reports = match reporter {
        Some(hook) => Some(
            ReportSink::spawn(move |report: &FailureReport| hook.report(report)).map_err(|e| {
                ConfigError::Invalid {
                    option: "error_reporter",
                    reason: format!("the report thread could not start: {e}"),
                }
            })?,
        ),
        None => None,
    };
    Ok(ClientTelemetry::new(telemetry, reports))
}
