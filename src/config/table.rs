//! The option table: each option of the builder once, with its variable,
//! its default, its rule and its test sample. `schema.rs` says what a row
//! generates; `CONFIGURATION.md` lists the same rows (a test compares).
//!
//! Outside the table: `mode` and `state_collections` (no variable),
//! `disable_probe` (the second setter of `probe_port`), `kafka_property`,
//! `broker` and `stores` (not options: values the environment cannot hold).

#[cfg(test)]
use super::precedence::{address, duration, flag, millis, name, names as items, share, size};
use super::rules::{
    connect, lease, names, non_empty, positive_bytes, positive_duration, positive_size, prefixes,
    small_count, some_path, statistics, subsystem, topics, whole_seconds,
};
use super::schema::options;
use super::{GroupProtocol, Mode, ReadTtl, SaslMechanism, SecurityProtocol, SpanLink};
use prosody_core::state::Spec;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The table's rows, handed to the macro `$then` names: [`options`]
/// here (the fields, their layering and checks), and the builder's
/// `setters` in `builder` (its methods). A row's rule and sample are
/// resolved only where `options` expands them, here.
macro_rules! option_rows {
    ($($then:tt)*) => {
        $($then)*! {
        /// Options as given to the builder; `None` falls back to the
        /// environment, then to the default.
        #[derive(Clone, Debug, Default)]
        pub(crate) struct Options {
            /// The failure-handling preset; no variable (default pipeline).
            mode: Option<Mode>,
            /// The keyed-state collections; no variable.
            state_collections: Vec<Spec>,
        }

        // Core.

        /// Kafka servers, comma-separated in the environment; required unless
        /// `mock`.
        bootstrap_servers: list, "PROSODY_BOOTSTRAP_SERVERS", optional;
        /// The consumer group, normally the application's name.
        group_id: text, "PROSODY_GROUP_ID", required, check non_empty,
            test(name, |s| s.runtime.group_id.to_string());
        /// Topics to consume, comma-separated in the environment. Without them
        /// the client only produces.
        subscribed_topics: list, "PROSODY_SUBSCRIBED_TOPICS", optional, check topics => Vec<Arc<str>>,
            test(items, |s| s.subscribed_topics.as_ref().map(|t| t.join(",")).unwrap_or_default());
        /// Prefixes of the payload's `type` field to handle; others are skipped
        /// (comma-separated in the environment; default all).
        allowed_events: list, "PROSODY_ALLOWED_EVENTS", optional, check prefixes,
            test(items, |s| s.runtime.allowed_events.join(","));
        /// The identifier written to the `source-system` header of sent records
        /// (default the group id). Records carrying the group id there are
        /// skipped, so set another value to consume your own output.
        source_system: text, "PROSODY_SOURCE_SYSTEM", derived("g"), check non_empty,
            test(name, |s| s.source_system.to_string());
        /// Whether to use the in-memory broker.
        mock: bool, "PROSODY_MOCK", default("false");
        /// On Kafka without `cassandra_nodes`, keep the stores in memory.
        /// Timers, deferred records and dedup records are then lost when the
        /// process stops or its partitions move to another member: use it for
        /// tests and for services that schedule no timers and can lose a
        /// deferred record.
        memory_stores: bool, "PROSODY_MEMORY_STORES", default("false"),
            test(flag, |s| s.memory_stores.to_string());

        // Consumer.

        /// Handler calls running at once, across all partitions.
        max_concurrency: usize, "PROSODY_MAX_CONCURRENCY", default("32"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.qos.scheduler.max_concurrency.to_string());
        /// Unsettled records of a partition before it pauses.
        max_uncommitted: usize, "PROSODY_MAX_UNCOMMITTED", default("64"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.runtime.max_uncommitted.to_string());
        /// The deadline of one handler attempt (default 80% of
        /// `stall_threshold`).
        timeout: Duration, "PROSODY_TIMEOUT", derived("4m"), check positive_duration,
            test(|n| millis(n, 1, 240_000), |s| duration(s.qos.timeout.timeout));
        /// No progress for this long is a stall.
        stall_threshold: Duration, "PROSODY_STALL_THRESHOLD", default("5m"), check positive_duration,
            test(|n| millis(n, 1, 86_400_000), |s| duration(s.qos.stall_threshold));
        /// How often settled offsets are committed.
        commit_interval: Duration, "PROSODY_COMMIT_INTERVAL", default("1s"), check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.runtime.commit_interval));
        /// Wait after a failed poll.
        poll_interval: Duration, "PROSODY_POLL_INTERVAL", default("100ms"), check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.runtime.poll_interval));
        /// Drain budget on revocation and shutdown: on shutdown handlers see
        /// cancellation at 90% of it, on a revocation at once; `shutdown()`
        /// returns within it.
        shutdown_timeout: Duration, "PROSODY_SHUTDOWN_TIMEOUT", default("30s"),
            check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.runtime.shutdown_timeout));
        /// The probe server's port (in the environment a number or `none`;
        /// default 8000; 0 picks a free port).
        probe_port: port, "PROSODY_PROBE_PORT", derived("8000"),
            test(|n| if n % 5 == 0 { "none".to_owned() } else { (n % 65_536).to_string() },
                 |s| s.observe.probe_port.to_string());
        /// Whether the client records metrics (served at the probe server's
        /// `/metrics` and exported over OTLP when an endpoint is set).
        metrics_enabled: bool, "PROSODY_METRICS_ENABLED", default("true"),
            test(flag, |s| s.observe.metrics.to_string());
        /// How often librdkafka reports client statistics, between 1ms and 24h.
        statistics_interval: Duration, "PROSODY_STATISTICS_INTERVAL", default("5s"), check statistics,
            test(|n| millis(n, 1, 86_400_000), |s| duration(s.observe.statistics_interval));
        /// Where records that fail for good go in low-latency mode (required
        /// there).
        failure_topic: text, "PROSODY_FAILURE_TOPIC", optional, check non_empty,
            test(name, |s| s.qos.failure.as_ref().map(|f| f.topic.to_string()).unwrap_or_default());
        /// Dedup records kept in memory per client (0 is rejected).
        idempotence_cache_size: usize, "PROSODY_IDEMPOTENCE_CACHE_SIZE", default("8192"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.qos.dedup.cache_size.to_string());
        /// The version mixed into dedup keys; change it to forget every
        /// recorded id.
        idempotence_version: text, "PROSODY_IDEMPOTENCE_VERSION", default("1"), check non_empty,
            test(name, |s| s.qos.dedup.version.clone());
        /// How long dedup records last in the store.
        idempotence_ttl: Duration, "PROSODY_IDEMPOTENCE_TTL", default("7days"),
            test(|n| millis(n, 1000, 864_000_000), |s| duration(s.qos.dedup.ttl));
        /// Timer storage granularity; a partition holds about one slab of
        /// timers in memory. Fixed per group with Cassandra: `build()` refuses
        /// a size other than the one its timers were stored with.
        slab_size: Duration, "PROSODY_SLAB_SIZE", default("1h"), check positive_duration,
            test(|n| millis(n, 1000, 86_400_000), |s| duration(s.runtime.slab_size));
        /// How a message's span relates to its producer's (`child` or
        /// `follows_from` in the environment).
        message_spans: SpanLink, "PROSODY_MESSAGE_SPANS", default("child"),
            test(|n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(),
                 |s| s.observe.message_spans.to_string());
        /// How a timer's span relates to the span that scheduled it (`child`
        /// or `follows_from` in the environment).
        timer_spans: SpanLink, "PROSODY_TIMER_SPANS", default("follows_from"),
            test(|n| if n % 2 == 0 { "child" } else { "follows_from" }.to_owned(),
                 |s| s.observe.timer_spans.to_string());

        // Producer.

        /// How long a send may wait for the broker. On Kafka it is also the
        /// producer's delivery timeout (`message.timeout.ms`, unless a
        /// `kafka_property` sets it): a send returns within it plus 2 s, and
        /// one that fails is never delivered afterwards (see
        /// `prosody_core::broker::Unsent`).
        send_timeout: Duration, "PROSODY_SEND_TIMEOUT", default("1s"), check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.send_timeout));

        // Retry.

        /// Low-latency retries before the failure topic.
        max_retries: usize, "PROSODY_MAX_RETRIES", default("3"), check small_count => u32,
            test(|n| (n % 1000).to_string(), |s| s.qos.max_retries.to_string());
        /// First delay before retrying a transient failure.
        retry_base: Duration, "PROSODY_RETRY_BASE", default("20ms"), check positive_duration,
            test(|n| millis(n, 1, 60_000), |s| duration(s.runtime.retry_base));
        /// Longest retry delay.
        max_retry_delay: Duration, "PROSODY_RETRY_MAX_DELAY", default("5m"),
            test(|n| millis(n, 60_000, 86_400_000), |s| duration(s.runtime.max_retry_delay));

        // Deferral (pipeline mode).

        /// Whether pipeline mode defers new transient failures.
        defer_enabled: bool, "PROSODY_DEFER_ENABLED", default("true"),
            test(flag, |s| s.qos.defer.enabled.to_string());
        /// Wait before the first retry of a deferred event.
        defer_base: Duration, "PROSODY_DEFER_BASE", default("1s"),
            test(|n| millis(n, 1, 3_600_000), |s| duration(s.qos.defer.base));
        /// Longest wait between deferred retries.
        defer_max_delay: Duration, "PROSODY_DEFER_MAX_DELAY", default("1day"),
            test(|n| millis(n, 1000, 864_000_000), |s| duration(s.qos.defer.max_delay));
        /// Above this share of failing events, failures are retried in place
        /// instead of deferred.
        defer_failure_threshold: f64, "PROSODY_DEFER_FAILURE_THRESHOLD", default("0.9"),
            test(share, |s| s.qos.defer.failure_threshold.to_string());
        /// The span the failure share is measured over.
        defer_failure_window: Duration, "PROSODY_DEFER_FAILURE_WINDOW", default("5m"),
            test(|n| millis(n, 1, 86_400_000), |s| duration(s.qos.defer.failure_window));
        /// Keys whose deferral state the Cassandra defer store keeps read.
        defer_store_cache_size: usize, "PROSODY_DEFER_STORE_CACHE_SIZE", default("8192"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.cassandra.defer_store_cache_size.to_string());

        // Kafka message loader.

        /// Records the loader keeps for deferred retries.
        loader_cache_size: usize, "PROSODY_LOADER_CACHE_SIZE", default("1024"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.qos.loader.cache_size.to_string());
        /// How long reading a deferred record back may take.
        loader_seek_timeout: Duration, "PROSODY_LOADER_SEEK_TIMEOUT", default("30s"),
            check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.qos.loader.seek_timeout));
        /// How many records a read back may skip forward on Kafka instead of
        /// seeking again.
        loader_discard_threshold: usize, "PROSODY_LOADER_DISCARD_THRESHOLD", default("100"),
            check positive_size => NonZeroUsize,
            test(|n| (n % 100_000 + 1).to_string(), |s| s.qos.loader.discard_threshold.to_string());

        // Monopolization (pipeline mode).

        /// Hot-key protection in pipeline mode.
        monopolization_enabled: bool, "PROSODY_MONOPOLIZATION_ENABLED", default("true"),
            test(flag, |s| s.qos.monopolization.enabled.to_string());
        /// Share of the window one key may use.
        monopolization_threshold: f64, "PROSODY_MONOPOLIZATION_THRESHOLD", default("0.9"),
            test(share, |s| s.qos.monopolization.threshold.to_string());
        /// The monopolization window.
        monopolization_window: Duration, "PROSODY_MONOPOLIZATION_WINDOW", default("5m"),
            test(|n| millis(n, 1, 86_400_000), |s| duration(s.qos.monopolization.window));
        /// Keys tracked for monopolization.
        monopolization_cache_size: usize, "PROSODY_MONOPOLIZATION_CACHE_SIZE", default("8192"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.qos.monopolization.cache_size.to_string());

        // Fair scheduling.

        /// Execution share kept for retries.
        scheduler_failure_weight: f64, "PROSODY_SCHEDULER_FAILURE_WEIGHT", default("0.3"),
            test(share, |s| s.qos.scheduler.failure_weight.to_string());
        /// A wait this long gets the full priority boost.
        scheduler_max_wait: Duration, "PROSODY_SCHEDULER_MAX_WAIT", default("2m"),
            test(|n| millis(n, 1, 86_400_000), |s| duration(s.qos.scheduler.max_wait));
        /// The priority boost for waiting.
        scheduler_wait_weight: f64, "PROSODY_SCHEDULER_WAIT_WEIGHT", default("200"),
            test(|n| (n % 10_000).to_string(), |s| s.qos.scheduler.wait_weight.to_string());
        /// Keys tracked by the scheduler.
        scheduler_cache_size: usize, "PROSODY_SCHEDULER_CACHE_SIZE", default("8192"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.qos.scheduler.cache_size.to_string());

        // Telemetry.

        /// Whether telemetry events are emitted.
        telemetry_enabled: bool, "PROSODY_TELEMETRY_ENABLED", default("true"),
            test(flag, |s| s.qos.telemetry.is_some().to_string());
        /// The topic of telemetry events.
        telemetry_topic: text, "PROSODY_TELEMETRY_TOPIC", default("prosody.telemetry-events"),
            check non_empty,
            test(name, |s| s.qos.telemetry.as_deref().unwrap_or_default().to_owned());

        // Kafka connection: the SASL and TLS settings need one another, so
        // `tests.rs` covers them instead of the precedence property.

        /// How members join the consumer group: the classic protocol with the
        /// cooperative-sticky assignor, or Kafka 4's consumer protocol
        /// (KIP-848), where the broker assigns partitions.
        group_protocol: GroupProtocol, "PROSODY_GROUP_PROTOCOL", default("classic"),
            test(|n| if n % 2 == 0 { "classic" } else { "consumer" }.to_owned(),
                 |s| s.kafka.group_protocol.to_string());
        /// How long `build()` waits for Kafka to answer. A refused login or TLS
        /// handshake fails at once.
        connect_timeout: Duration, "PROSODY_CONNECT_TIMEOUT", default("10s"), check positive_duration,
            test(|n| millis(n, 1, 600_000), |s| duration(s.kafka.connect_timeout));
        /// How the Kafka clients talk to the brokers.
        security_protocol: SecurityProtocol, "PROSODY_SECURITY_PROTOCOL", default("plaintext"),
            test(|n| if n % 2 == 0 || cfg!(not(feature = "tls")) { "plaintext" } else { "ssl" }.to_owned(),
                 |s| s.kafka.security_protocol.to_string());
        /// The SASL mechanism, required with a SASL security protocol.
        sasl_mechanism: SaslMechanism, "PROSODY_SASL_MECHANISM", optional;
        /// The SASL username.
        sasl_username: text, "PROSODY_SASL_USERNAME", optional, check non_empty;
        /// The SASL password; it shows in no log line and no `Debug` output.
        sasl_password: secret, "PROSODY_SASL_PASSWORD", optional;
        /// A PEM file of the certificate authorities that sign the brokers'
        /// certificates; without it, the system's.
        ssl_ca_location: path, "PROSODY_SSL_CA_LOCATION", optional;

        // Keyed state.

        /// The delay of the recovery sweep (whole seconds, at least 1s): on
        /// Cassandra, a commit larger than one batch that failed before its
        /// commit point stays undecided this long after it was staged (reads of
        /// its keys retry), then is forgotten (the README's Keyed state
        /// section). Every collection's TTL must be longer.
        state_recovery_delay: Duration, "PROSODY_STATE_RECOVERY_DELAY", default("30s"),
            check whole_seconds,
            test(|n| duration(Duration::from_secs(1 + n % 3600)),
                 |s| duration(s.runtime.state.recovery_delay()));
        /// The directory of the partition owners' disk cache of state cells
        /// (default a temporary directory of the client's own). The cache is
        /// used with the Cassandra stores of `cassandra_nodes`, and with any
        /// stores when this is set. Each live client needs its own directory
        /// (it is locked, and emptied when the client starts). Use a mounted
        /// path in production.
        state_cache_dir: dir, "PROSODY_STATE_CACHE_DIR", optional, check some_path,
            test(name, |s| s.state_cache.dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default());
        /// The disk cache's block cache in memory, in bytes (sizes like
        /// `64 MiB` or `500 MB` in the environment; default 32 MiB; positive).
        /// Recent writes not yet flushed take at most 64 MiB more.
        state_owned_cache_size: bytes, "PROSODY_STATE_OWNED_CACHE_SIZE", optional,
            check positive_bytes => u64,
            test(size, |s| s.state_cache.memory.map(|m| m.to_string()).unwrap_or_default());

        /// How long a read of another group's published collection is served
        /// from the readers' cache (`ReadTtl::Off`, `none` or `false` in the
        /// environment, reads the store every time); a definition's
        /// `read_cache` overrides it.
        state_read_cache: ReadTtl, "PROSODY_STATE_READ_CACHE_TTL", default("5s"),
            test(|n| if n % 4 == 0 { "none".to_owned() } else { duration(Duration::from_secs(1 + n % 600)) },
                 |s| match s.reads.ttl { ReadTtl::Off => "none".to_owned(), ReadTtl::For(ttl) => duration(ttl) });
        /// The readers' cache of published cells, in bytes (sizes like `1 MiB`
        /// in the environment; default `state_owned_cache_size` if set, else
        /// 1 MiB; positive).
        state_read_cache_size: bytes, "PROSODY_STATE_READ_CACHE_SIZE", derived("1 MiB"),
            check positive_bytes => u64,
            test(size, |s| s.reads.size.map_or_else(|| "1 MiB".to_owned(), |b| b.to_string()));

        // Requests.

        /// The subsystem this client answers requests as (and publishes its
        /// published collections under): 1 to 128 ASCII letters, digits, `-`,
        /// `_` or `.`. Without it the client answers no request.
        subsystem: text, "PROSODY_SUBSYSTEM", optional, check subsystem,
            test(name, |s| s.peer.subsystem.as_deref().unwrap_or_default().to_owned());
        /// Where the peer endpoint listens for answers to this client's
        /// requests, `host:port` (default the default interface's address,
        /// port 9099; port 0 picks a free one). Give each client on a host its
        /// own port. Bound at the first request.
        peer_bind_address: SocketAddr, "PROSODY_PEER_BIND_ADDRESS", derived("<default interface>:9099"),
            test(|n| format!("127.0.0.1:{}", n % 65_536),
                 |s| s.peer.bind.map_or_else(|| "<default interface>:9099".to_owned(), |a| a.to_string()));
        /// Where peers on another network connect to: `host:port` (a host
        /// name, an IPv4 address or a bracketed IPv6 address such as
        /// `[::1]:9099`) or the connect URI `http://host:port` (a trailing `/`
        /// allowed), kept as `host:port`; anything else is refused at `build()`
        /// (default none).
        peer_advertised_connect: text, "PROSODY_PEER_ADVERTISED_CONNECT", optional, check connect,
            test(address, |s| s.peer.advertised.clone().unwrap_or_default());
        /// The network this client's endpoint is on: peers of the same network
        /// (or both unnamed) connect directly, others to
        /// `peer_advertised_connect` (default none).
        peer_network_name: text, "PROSODY_PEER_NETWORK_NAME", optional, check non_empty,
            test(name, |s| s.peer.network.clone().unwrap_or_default());
        /// Peers whose directory entries and connections are kept, when
        /// answering (positive).
        peer_cache_capacity: usize, "PROSODY_PEER_CACHE_CAPACITY", default("256"),
            check positive_size => NonZeroUsize,
            test(size, |s| s.peer.cache_capacity.to_string());
        /// The lease of this client's directory entry, renewed every third of
        /// it, between 5s and 20 years.
        peer_registration_ttl: Duration, "PROSODY_PEER_REGISTRATION_TTL", default("30s"), check lease,
            test(|n| millis(n, 5000, 864_000_000), |s| duration(s.peer.registration_ttl));

        // Cassandra.

        /// Cassandra contact points, `host:port` (comma-separated in the
        /// environment; default none). On Kafka the client then keeps its
        /// timers, deferred offsets and dedup records in Cassandra; `build()`
        /// connects (within `connect_timeout`) and migrates the keyspace. Mock
        /// mode ignores it. An empty list means no Cassandra, whatever the
        /// variable says.
        cassandra_nodes: list, "PROSODY_CASSANDRA_NODES", optional, check names,
            test(items, |s| s.cassandra.nodes.join(","));
        /// The Cassandra keyspace; created with replication factor 1 if missing
        /// (create it yourself in production).
        cassandra_keyspace: text, "PROSODY_CASSANDRA_KEYSPACE", default("prosody"), check non_empty,
            test(name, |s| s.cassandra.keyspace.clone());
        /// The Cassandra user (default none).
        cassandra_user: text, "PROSODY_CASSANDRA_USER", optional, check non_empty;
        /// The Cassandra password (default none); never shown in `Debug` output
        /// or logs.
        cassandra_password: secret, "PROSODY_CASSANDRA_PASSWORD", optional;
        /// The Cassandra datacenter to prefer.
        cassandra_datacenter: text, "PROSODY_CASSANDRA_DATACENTER", optional, check non_empty,
            test(name, |s| s.cassandra.datacenter.clone().unwrap_or_default());
        /// The Cassandra rack to prefer, within the datacenter (needs
        /// `cassandra_datacenter`).
        cassandra_rack: text, "PROSODY_CASSANDRA_RACK", optional, check non_empty,
            test(name, |s| s.cassandra.rack.clone().unwrap_or_default());
        /// How long stored data lives in Cassandra at most, as its TTL: a timer
        /// further out than this expires unfired.
        cassandra_retention: Duration, "PROSODY_CASSANDRA_RETENTION", default("1year"),
            check positive_duration,
            test(|n| millis(n, 1000, 864_000_000_000), |s| duration(s.cassandra.retention));

        }
    };
}

pub(crate) use option_rows;

option_rows!(options);
