//! The client: produces, and runs one subscription at a time.

use crate::config::{ConfigError, Options, Settings};
use crate::slot::Subscription;
use prosody_core::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, OutgoingRecord, Producer,
};
use prosody_core::{
    Codec, CodecError, EventHandler, EventService, HandlerService, Headers, JsonCodec, Key,
    Runtime, SOURCE_SYSTEM_HEADER,
};
use prosody_memory::MemoryBroker;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::OnceCell;

/// A client operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client was shut down; it accepts no more work.
    #[error("the client is shut down")]
    ShutDown,
    /// `subscribe` was called while a subscription runs.
    #[error("the client is already subscribed; unsubscribe first")]
    AlreadySubscribed,
    /// The client has no topics to consume.
    #[error("the client has no subscribed_topics, so it cannot subscribe")]
    NotConfigured,
    /// A payload could not be encoded.
    #[error("the payload for topic {topic} cannot be encoded: {source}")]
    Encode {
        /// The topic.
        topic: String,
        /// The codec's error.
        source: CodecError,
    },
    /// The broker failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Where the consumer is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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

/// The in-memory broker every mock client of this process shares, unless
/// the builder names another.
fn shared_mock_broker() -> MemoryBroker {
    static BROKER: OnceLock<MemoryBroker> = OnceLock::new();
    BROKER.get_or_init(MemoryBroker::new).clone()
}

/// Builds a [`ProsodyClient`]; every option left unset is read from its
/// `PROSODY_*` environment variable, else takes its default.
#[must_use]
pub struct ClientBuilder<C = JsonCodec> {
    options: Options,
    codec: C,
    memory: Option<MemoryBroker>,
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
    setters! {
        /// Whether to use the in-memory broker (`PROSODY_MOCK`; default false).
        mock: bool,
        /// Handler calls running at once (`PROSODY_MAX_CONCURRENCY`; default 32).
        max_concurrency: usize,
        /// Unsettled records of a partition before it pauses
        /// (`PROSODY_MAX_UNCOMMITTED`; default 64).
        max_uncommitted: usize,
        /// How often settled offsets are committed (`PROSODY_COMMIT_INTERVAL`; default 1s).
        commit_interval: Duration,
        /// Wait after a failed poll (`PROSODY_POLL_INTERVAL`; default 100ms).
        poll_interval: Duration,
        /// Drain budget on revocation and shutdown; handlers see cancellation
        /// near its end (`PROSODY_SHUTDOWN_TIMEOUT`; default 30s).
        shutdown_timeout: Duration,
        /// How long a send may wait for the broker (`PROSODY_SEND_TIMEOUT`; default 1s).
        send_timeout: Duration,
        /// First delay before retrying a transient failure (`PROSODY_RETRY_BASE`; default 20ms).
        retry_base: Duration,
        /// Longest retry delay (`PROSODY_RETRY_MAX_DELAY`; default 5m).
        max_retry_delay: Duration,
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

    /// Uses this in-memory broker (and turns `mock` on), so several clients
    /// of a test share one broker of their own.
    pub fn memory_broker(mut self, broker: MemoryBroker) -> Self {
        self.options.mock = Some(true);
        self.memory = Some(broker);
        self
    }

    /// Encodes and decodes payloads with another codec.
    pub fn codec<D: Codec>(self, codec: D) -> ClientBuilder<D> {
        ClientBuilder {
            options: self.options,
            codec,
            memory: self.memory,
        }
    }

    /// Validates the options and connects.
    #[allow(clippy::unused_async, reason = "a network backend connects here")]
    pub async fn build(self) -> Result<ProsodyClient<C>, ConfigError> {
        let settings = self.options.resolve(&crate::env::process())?;
        let broker = match self.memory {
            Some(broker) => broker,
            None => shared_mock_broker(),
        };
        let producer = broker.producer().map_err(|e| ConfigError::Invalid {
            option: "mock",
            reason: e.to_string(),
        })?;
        Ok(ProsodyClient {
            inner: Arc::new(Inner {
                settings,
                codec: self.codec,
                broker,
                producer,
                subscription: Subscription::new(),
                closed: AtomicBool::new(false),
                shutdown: OnceCell::new(),
            }),
        })
    }
}

type Backend = MemoryBroker;

struct Inner<C> {
    settings: Settings,
    codec: C,
    broker: Backend,
    producer: <Backend as Broker>::Producer,
    subscription: Subscription,
    closed: AtomicBool,
    shutdown: OnceCell<()>,
}

/// Produces records and consumes topics with one handler.
///
/// Invariant: after [`ProsodyClient::shutdown`] starts, every operation fails
/// with [`ClientError::ShutDown`], and at most one subscription runs at a time.
pub struct ProsodyClient<C = JsonCodec> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for ProsodyClient<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl ProsodyClient<JsonCodec> {
    /// A builder with JSON payloads.
    pub fn builder() -> ClientBuilder<JsonCodec> {
        ClientBuilder {
            options: Options::default(),
            codec: JsonCodec::new(),
            memory: None,
        }
    }
}

impl<C: Codec> ProsodyClient<C> {
    fn check_open(&self) -> Result<(), ClientError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::ShutDown);
        }
        Ok(())
    }

    /// The identifier written to the `source-system` header.
    #[must_use]
    pub fn source_system(&self) -> &str {
        &self.inner.settings.source_system
    }

    /// Sends a keyed record and waits until the broker has it.
    pub async fn send(
        &self,
        topic: &str,
        key: impl Into<Key>,
        payload: &C::Value,
    ) -> Result<(), ClientError> {
        self.check_open()?;
        let bytes = self
            .inner
            .codec
            .encode(payload)
            .map_err(|source| ClientError::Encode {
                topic: topic.to_owned(),
                source,
            })?;
        let key: Key = key.into();
        let record = OutgoingRecord::new(topic, key.as_bytes().to_vec(), bytes);
        self.produce(record).await
    }

    /// Sends an excise record (a tombstone) for a key: its consumers delete
    /// everything they hold for it.
    pub async fn excise(&self, topic: &str, key: impl Into<Key>) -> Result<(), ClientError> {
        self.check_open()?;
        let key: Key = key.into();
        self.produce(OutgoingRecord::tombstone(topic, key.as_bytes().to_vec()))
            .await
    }

    async fn produce(&self, mut record: OutgoingRecord) -> Result<(), ClientError> {
        let mut headers = Headers::new();
        headers.push(
            SOURCE_SYSTEM_HEADER,
            self.source_system().as_bytes().to_vec(),
        );
        record.headers = headers;
        self.inner
            .producer
            .send(record, self.inner.settings.send_timeout)
            .await?;
        Ok(())
    }

    /// Starts consuming with a handler.
    pub async fn subscribe<H>(&self, handler: H) -> Result<(), ClientError>
    where
        H: EventHandler<Payload = C::Value>,
    {
        self.subscribe_with(HandlerService::new(handler)).await
    }

    /// Starts consuming with a complete stack: a handler wrapped in any
    /// layers.
    pub async fn subscribe_with<S: EventService<C::Value>>(
        &self,
        stack: S,
    ) -> Result<(), ClientError> {
        self.check_open()?;
        let settings = &self.inner.settings;
        let Some(topics) = settings.subscribed_topics.clone() else {
            return Err(ClientError::NotConfigured);
        };
        let claim = self
            .inner
            .subscription
            .claim()
            .ok_or(ClientError::AlreadySubscribed)?;
        let consumer = self
            .inner
            .broker
            .consumer(&ConsumerConfig {
                group_id: settings.runtime.group_id.to_string(),
                topics,
            })
            .await?;
        if self.check_open().is_err() {
            // Shut down while joining: leave again rather than run after
            // shutdown returned.
            drop(claim);
            consumer.close().await;
            return Err(ClientError::ShutDown);
        }
        claim.install(Runtime::spawn(
            consumer,
            stack,
            self.inner.codec.clone(),
            settings.runtime.clone(),
        ));
        Ok(())
    }

    /// Stops consuming: drains within the shutdown timeout, commits, and
    /// leaves the group. The client can subscribe again.
    pub async fn unsubscribe(&self) -> Result<(), ClientError> {
        self.check_open()?;
        self.inner.subscription.stop().await;
        Ok(())
    }

    /// Stops everything. Concurrent and repeated calls wait for the same
    /// shutdown; afterwards every operation fails with
    /// [`ClientError::ShutDown`].
    pub async fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner
            .shutdown
            .get_or_init(|| self.inner.subscription.stop())
            .await;
    }

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

    /// How many partitions this client consumes now.
    #[must_use]
    pub fn assigned_partition_count(&self) -> usize {
        self.inner
            .subscription
            .running()
            .map_or(0, |runtime| runtime.assigned_partition_count())
    }
}
