//! The client builder.

use crate::backend::Backend;
use crate::client::{Inner, ProsodyClient};
use crate::config::Cluster;
use crate::config::{
    ConfigError, GroupProtocol, Mode, Options, ProbePort, SaslMechanism, Secret, SecurityProtocol,
    SpanLink,
};
use crate::connect;
use crate::slot::Subscription;
use crate::stack::Layers;
use crate::stores::ClientStores;
use prosody_core::broker::Broker;
use prosody_core::loader::BrokerLoader;
use prosody_core::store::Stores;
use prosody_core::telemetry::ProducerSink;
use prosody_core::{Codec, JsonCodec};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Builds a [`ProsodyClient`]; every option left unset is read from its
/// `PROSODY_*` environment variable, else takes its default.
#[must_use]
pub struct ClientBuilder<C = JsonCodec> {
    options: Options,
    codec: C,
    /// A broker given to the builder, in memory or the caller's.
    broker: Option<Backend>,
    stores: Option<ClientStores>,
    /// librdkafka properties for the Kafka backend's clients.
    kafka: Vec<(String, String)>,
}

impl<C> ClientBuilder<C> {
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }
}

macro_rules! qos_setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.options.qos.$name = Some(value);
            self
        }
    )*};
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.options.$name = Some(value);
            self
        }
    )*};
}

impl<C: Codec> ClientBuilder<C> {
    pub(crate) fn new(codec: C) -> Self {
        Self {
            options: Options::default(),
            codec,
            broker: None,
            stores: None,
            kafka: Vec::new(),
        }
    }

    /// The options as set, for the configuration tests.
    #[cfg(test)]
    pub(crate) fn into_options(self) -> Options {
        self.options
    }

    setters! {
        /// Whether to use the in-memory broker (`PROSODY_MOCK`; default false).
        mock: bool,
        /// On Kafka without `cassandra_nodes`, keep the stores in memory
        /// (`PROSODY_MEMORY_STORES`; default false). Timers, deferred records
        /// and dedup records are then lost when the process stops or its
        /// partitions move to another member: use it for tests and for
        /// services that schedule no timers and can lose a deferred record.
        memory_stores: bool,
        /// Unsettled records of a partition before it pauses
        /// (`PROSODY_MAX_UNCOMMITTED`; default 64).
        max_uncommitted: usize,
        /// How often settled offsets are committed (`PROSODY_COMMIT_INTERVAL`; default 1s).
        commit_interval: Duration,
        /// Wait after a failed poll (`PROSODY_POLL_INTERVAL`; default 100ms).
        poll_interval: Duration,
        /// Drain budget on revocation and shutdown: on shutdown handlers see
        /// cancellation at 90% of it, on a revocation at once; `shutdown()`
        /// returns within it (`PROSODY_SHUTDOWN_TIMEOUT`; default 30s).
        shutdown_timeout: Duration,
        /// How long a send may wait for the broker (`PROSODY_SEND_TIMEOUT`; default 1s). On Kafka it is also the producer's delivery timeout (`message.timeout.ms`, unless a `kafka_property` sets it): a send returns within it plus 2 s, and one that fails is never delivered afterwards (see `prosody_core::broker::Unsent`).
        send_timeout: Duration,
        /// First delay before retrying a transient failure (`PROSODY_RETRY_BASE`; default 20ms).
        retry_base: Duration,
        /// Longest retry delay (`PROSODY_RETRY_MAX_DELAY`; default 5m).
        max_retry_delay: Duration,
        /// Timer storage granularity; a partition holds about one slab of timers in memory (`PROSODY_SLAB_SIZE`; default 1h).
        /// Fixed per group with Cassandra: `build()` refuses a size other than the one its timers were stored with.
        slab_size: Duration,
    }

    qos_setters! {
        /// The failure-handling preset (default pipeline).
        mode: Mode,
        /// Handler calls running at once, across all partitions
        /// (`PROSODY_MAX_CONCURRENCY`; default 32).
        max_concurrency: usize,
        /// Low-latency retries before the failure topic (`PROSODY_MAX_RETRIES`; default 3).
        max_retries: usize,
        /// The deadline of one handler attempt (`PROSODY_TIMEOUT`; default 80% of
        /// `stall_threshold`).
        timeout: Duration,
        /// No progress for this long is a stall (`PROSODY_STALL_THRESHOLD`; default 5m).
        stall_threshold: Duration,
        /// Dedup records per process (`PROSODY_IDEMPOTENCE_CACHE_SIZE`; default 8192; 0 is rejected).
        idempotence_cache_size: usize,
        /// How long dedup records last in the store (`PROSODY_IDEMPOTENCE_TTL`; default 7d).
        idempotence_ttl: Duration,
        /// Hot-key protection in pipeline mode (`PROSODY_MONOPOLIZATION_ENABLED`; default true).
        monopolization_enabled: bool,
        /// Share of the window one key may use (`PROSODY_MONOPOLIZATION_THRESHOLD`; default 0.9).
        monopolization_threshold: f64,
        /// The monopolization window (`PROSODY_MONOPOLIZATION_WINDOW`; default 5m).
        monopolization_window: Duration,
        /// Keys tracked for monopolization (`PROSODY_MONOPOLIZATION_CACHE_SIZE`; default 8192).
        monopolization_cache_size: usize,
        /// Execution share kept for retries (`PROSODY_SCHEDULER_FAILURE_WEIGHT`; default 0.3).
        scheduler_failure_weight: f64,
        /// A wait this long gets the full priority boost (`PROSODY_SCHEDULER_MAX_WAIT`; default 2m).
        scheduler_max_wait: Duration,
        /// The priority boost for waiting (`PROSODY_SCHEDULER_WAIT_WEIGHT`; default 200.0).
        scheduler_wait_weight: f64,
        /// Keys tracked by the scheduler (`PROSODY_SCHEDULER_CACHE_SIZE`; default 8192).
        scheduler_cache_size: usize,
        /// Whether telemetry events are emitted (`PROSODY_TELEMETRY_ENABLED`; default true).
        telemetry_enabled: bool,
        /// Whether pipeline mode defers new transient failures
        /// (`PROSODY_DEFER_ENABLED`; default true).
        defer_enabled: bool,
        /// Wait before the first retry of a deferred event (`PROSODY_DEFER_BASE`; default 1s).
        defer_base: Duration,
        /// Longest wait between deferred retries (`PROSODY_DEFER_MAX_DELAY`; default 24h).
        defer_max_delay: Duration,
        /// Above this share of failing events, failures are retried in place
        /// instead of deferred (`PROSODY_DEFER_FAILURE_THRESHOLD`; default 0.9).
        defer_failure_threshold: f64,
        /// The span the failure share is measured over
        /// (`PROSODY_DEFER_FAILURE_WINDOW`; default 5m).
        defer_failure_window: Duration,
        /// Records the loader keeps for deferred retries
        /// (`PROSODY_LOADER_CACHE_SIZE`; default 1024).
        loader_cache_size: usize,
        /// How long reading a deferred record back may take
        /// (`PROSODY_LOADER_SEEK_TIMEOUT`; default 30s).
        loader_seek_timeout: Duration,
        /// How many records a read back may skip forward on Kafka instead
        /// of seeking again (`PROSODY_LOADER_DISCARD_THRESHOLD`; default 100).
        loader_discard_threshold: usize,
    }

    /// Where records that fail for good go in low-latency mode
    /// (`PROSODY_FAILURE_TOPIC`; required there).
    pub fn failure_topic(mut self, value: impl Into<String>) -> Self {
        self.options.qos.failure_topic = Some(value.into());
        self
    }

    /// The version mixed into dedup keys; change it to forget every recorded
    /// id (`PROSODY_IDEMPOTENCE_VERSION`; default "1").
    pub fn idempotence_version(mut self, value: impl Into<String>) -> Self {
        self.options.qos.idempotence_version = Some(value.into());
        self
    }

    /// The topic of telemetry events (`PROSODY_TELEMETRY_TOPIC`; default
    /// `prosody.telemetry-events`).
    pub fn telemetry_topic(mut self, value: impl Into<String>) -> Self {
        self.options.qos.telemetry_topic = Some(value.into());
        self
    }

    /// The probe server's port (`PROSODY_PROBE_PORT`, a number or `none`;
    /// default 8000; 0 picks a free port).
    pub fn probe_port(mut self, port: u16) -> Self {
        self.options.observe.probe_port = Some(ProbePort::Port(port));
        self
    }

    /// No probe server (`PROSODY_PROBE_PORT=none`).
    pub fn disable_probe(mut self) -> Self {
        self.options.observe.probe_port = Some(ProbePort::Disabled);
        self
    }

    /// How often librdkafka reports client statistics, between 1ms and 24h
    /// (`PROSODY_STATISTICS_INTERVAL`; default 5s).
    pub fn statistics_interval(mut self, value: Duration) -> Self {
        self.options.observe.statistics_interval = Some(value);
        self
    }

    /// How a message's span relates to its producer's
    /// (`PROSODY_MESSAGE_SPANS`: `child` or `follows_from`; default child).
    pub fn message_spans(mut self, value: SpanLink) -> Self {
        self.options.observe.message_spans = Some(value);
        self
    }

    /// How a timer's span relates to the span that scheduled it
    /// (`PROSODY_TIMER_SPANS`: `child` or `follows_from`; default
    /// `follows_from`).
    pub fn timer_spans(mut self, value: SpanLink) -> Self {
        self.options.observe.timer_spans = Some(value);
        self
    }

    /// Cassandra contact points, `host:port` (`PROSODY_CASSANDRA_NODES`,
    /// comma-separated; default none). On Kafka the client then keeps its
    /// timers, deferred offsets and dedup records in Cassandra; `build()`
    /// connects (within `connect_timeout`) and migrates the keyspace. Mock
    /// mode ignores it. An empty list means no Cassandra, whatever the
    /// variable says.
    pub fn cassandra_nodes<I: IntoIterator<Item = T>, T: Into<String>>(mut self, nodes: I) -> Self {
        self.options.cassandra.nodes = Some(nodes.into_iter().map(Into::into).collect());
        self
    }

    /// The Cassandra keyspace (`PROSODY_CASSANDRA_KEYSPACE`; default
    /// `prosody`); created with replication factor 1 if missing (create it
    /// yourself in production).
    pub fn cassandra_keyspace(mut self, value: impl Into<String>) -> Self {
        self.options.cassandra.keyspace = Some(value.into());
        self
    }

    /// The Cassandra user (`PROSODY_CASSANDRA_USER`; default none).
    pub fn cassandra_user(mut self, value: impl Into<String>) -> Self {
        self.options.cassandra.user = Some(value.into());
        self
    }

    /// The Cassandra password (`PROSODY_CASSANDRA_PASSWORD`; default none);
    /// never shown in `Debug` output or logs.
    pub fn cassandra_password(mut self, value: impl Into<String>) -> Self {
        self.options.cassandra.password = Some(Secret::new(value));
        self
    }

    /// The Cassandra datacenter to prefer (`PROSODY_CASSANDRA_DATACENTER`).
    pub fn cassandra_datacenter(mut self, value: impl Into<String>) -> Self {
        self.options.cassandra.datacenter = Some(value.into());
        self
    }

    /// The Cassandra rack to prefer, within the datacenter
    /// (`PROSODY_CASSANDRA_RACK`; needs `cassandra_datacenter`).
    pub fn cassandra_rack(mut self, value: impl Into<String>) -> Self {
        self.options.cassandra.rack = Some(value.into());
        self
    }

    /// How long stored data lives in Cassandra at most, as its TTL
    /// (`PROSODY_CASSANDRA_RETENTION`; default 1y): a timer further out
    /// than this expires unfired.
    pub fn cassandra_retention(mut self, value: Duration) -> Self {
        self.options.cassandra.retention = Some(value);
        self
    }

    /// Keys whose deferral state the Cassandra defer store keeps read
    /// (`PROSODY_DEFER_STORE_CACHE_SIZE`; default 8192).
    pub fn defer_store_cache_size(mut self, value: usize) -> Self {
        self.options.cassandra.defer_store_cache_size = Some(value);
        self
    }

    /// The consumer group, normally the application's name (`PROSODY_GROUP_ID`; required).
    pub fn group_id(mut self, value: impl Into<String>) -> Self {
        self.options.group_id = Some(value.into());
        self
    }

    /// The identifier written to the `source-system` header of sent records
    /// (`PROSODY_SOURCE_SYSTEM`; default the group id). Records carrying the
    /// group id there are skipped, so set another value to consume your own
    /// output.
    pub fn source_system(mut self, value: impl Into<String>) -> Self {
        self.options.source_system = Some(value.into());
        self
    }

    /// Topics to consume (`PROSODY_SUBSCRIBED_TOPICS`, comma-separated).
    /// Without them the client only produces.
    pub fn subscribed_topics<I: IntoIterator<Item = T>, T: Into<String>>(
        mut self,
        topics: I,
    ) -> Self {
        self.options.subscribed_topics = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// Kafka servers (`PROSODY_BOOTSTRAP_SERVERS`, comma-separated).
    pub fn bootstrap_servers<I: IntoIterator<Item = T>, T: Into<String>>(
        mut self,
        servers: I,
    ) -> Self {
        self.options.bootstrap_servers = Some(servers.into_iter().map(Into::into).collect());
        self
    }

    /// Prefixes of the payload's `type` field to handle; others are skipped
    /// (`PROSODY_ALLOWED_EVENTS`, comma-separated; default all).
    pub fn allowed_events<I: IntoIterator<Item = T>, T: Into<String>>(
        mut self,
        prefixes: I,
    ) -> Self {
        self.options.allowed_events = Some(prefixes.into_iter().map(Into::into).collect());
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
        self.stores = Some(ClientStores::new(stores));
        self
    }

    /// Sets a librdkafka property on every Kafka client of this client
    /// (for example `security.protocol`, `sasl.mechanisms`); it wins over
    /// the backend's own settings. Ignored in mock mode.
    pub fn kafka_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.kafka.push((key.into(), value.into()));
        self
    }

    /// How members join the consumer group (`group_protocol`, default
    /// classic; `PROSODY_GROUP_PROTOCOL`): the classic protocol with the
    /// cooperative-sticky assignor, or Kafka 4's consumer protocol
    /// (KIP-848), where the broker assigns partitions.
    pub fn group_protocol(mut self, value: GroupProtocol) -> Self {
        self.options.kafka.group_protocol = Some(value);
        self
    }

    /// How long `build()` waits for Kafka to answer (`connect_timeout`,
    /// default 10s; `PROSODY_CONNECT_TIMEOUT`). A refused login or TLS
    /// handshake fails at once.
    pub fn connect_timeout(mut self, value: Duration) -> Self {
        self.options.kafka.connect_timeout = Some(value);
        self
    }

    /// How the Kafka clients talk to the brokers (`security_protocol`,
    /// default plaintext; `PROSODY_SECURITY_PROTOCOL`).
    pub fn security_protocol(mut self, value: SecurityProtocol) -> Self {
        self.options.kafka.security_protocol = Some(value);
        self
    }

    /// The SASL mechanism (`sasl_mechanism`; `PROSODY_SASL_MECHANISM`),
    /// required with a SASL security protocol.
    pub fn sasl_mechanism(mut self, value: SaslMechanism) -> Self {
        self.options.kafka.sasl_mechanism = Some(value);
        self
    }

    /// The SASL username (`sasl_username`; `PROSODY_SASL_USERNAME`).
    pub fn sasl_username(mut self, value: impl Into<String>) -> Self {
        self.options.kafka.sasl_username = Some(value.into());
        self
    }

    /// The SASL password (`sasl_password`; `PROSODY_SASL_PASSWORD`); it
    /// shows in no log line and no `Debug` output.
    pub fn sasl_password(mut self, value: impl Into<String>) -> Self {
        self.options.kafka.sasl_password = Some(Secret::new(value));
        self
    }

    /// A PEM file of the certificate authorities that sign the brokers'
    /// certificates (`ssl_ca_location`; `PROSODY_SSL_CA_LOCATION`); without
    /// it, the system's.
    pub fn ssl_ca_location(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.options.kafka.ssl_ca_location = Some(path.into());
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
        }
    }

    /// Validates the options and makes the clients. On Kafka it waits,
    /// for at most `connect_timeout`, until the cluster answers with these
    /// settings: a wrong password, an unknown certificate authority or an
    /// unreachable cluster fails here, naming the cause
    /// ([`ConfigError::Unreachable`]).
    pub async fn build(self) -> Result<ProsodyClient<C>, ConfigError> {
        let mut settings = self.options.resolve(&crate::env::process())?;
        // Chosen before Kafka is reached: a missing store is a mistake in
        // the options, reported as one however the cluster is doing.
        // (Collections are checked once the broker, their loader, is made.)
        let stores = Box::pin(connect::stores(
            self.stores,
            self.broker.as_ref(),
            &settings,
        ))
        .await?;
        let broker = match (&settings.cluster, self.broker) {
            (_, Some(broker)) => broker,
            (Cluster::Mock, None) => Backend::memory(connect::shared_mock_broker()),
            (Cluster::Kafka(servers), None) => {
                connect::kafka(servers, &settings, self.kafka).await?
            }
        };
        let loader = BrokerLoader::new(broker.clone(), &settings.qos.loader);
        if !settings.runtime.state.is_empty() {
            settings.runtime.state =
                connect::state(&settings.runtime.state, &stores, loader.clone()).await?;
            settings.runtime.state_cache = connect::state_cache(&settings, &stores)?;
        }
        let producer = broker.producer().map_err(|e| ConfigError::Invalid {
            option: "bootstrap_servers",
            reason: format!("the producer could not be made: {e}"),
        })?;
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
        let layers = Layers::new(
            &settings.qos,
            &stores,
            &producer,
            loader,
            self.codec.clone(),
            (telemetry, settings.observe.links()),
        );
        Ok(ProsodyClient {
            inner: Arc::new(Inner {
                layers,
                settings,
                codec: self.codec,
                broker,
                producer,
                stores,
                subscription: Subscription::new(),
                closed: AtomicBool::new(false),
                shutdown: OnceCell::new(),
                probe: crate::probe::Probe::default(),
            }),
        })
    }
}
