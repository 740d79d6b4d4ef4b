//! The Kafka backend of prosody, on rdkafka: a consumer-group member, an
//! idempotent producer and record reads by offset, implementing the broker
//! contract of `prosody_contracts::broker`. It passes the same conformance suite
//! as the in-memory broker, against librdkafka's in-process mock cluster.

pub mod admin;
mod check;
mod config;
mod consumer;
mod error;
mod member;
#[cfg(feature = "mock")]
pub mod mock;
mod producer;
mod reader;

pub use admin::{AdminClient, AdminError, TopicDescription, TopicOptions};
pub use config::{DEFAULT_DISCARD_THRESHOLD, KafkaConfig};
pub use consumer::KafkaConsumer;
pub use producer::{KafkaProducer, VERDICT_MARGIN};
pub use prosody_contracts::broker::GroupProtocol;

use consumer::CHANNEL;
use error::retriable_failure;
use member::Member;
use prosody_contracts::broker::{Broker, BrokerError, ConsumerConfig, Record, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::FutureProducer;
use reader::Reader;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// The consumer's `fetch.max.bytes` when the client does not set
/// `message.max.bytes`: 8 MiB (librdkafka's default is 50 MiB).
const FETCH_MAX_BYTES: &str = "8388608";

/// A Kafka cluster: makes group members and producers, and reads records
/// back by offset. Clones share one producer and one reader;
/// [`immediate`](Self::immediate) makes a broker with a producer of its
/// own.
#[derive(Clone)]
pub struct KafkaBroker {
    config: KafkaConfig,
    producer: Arc<OnceLock<FutureProducer>>,
    reader: Arc<OnceLock<Arc<Reader>>>,
}

impl std::fmt::Debug for KafkaBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBroker")
            .field("bootstrap_servers", &self.config.bootstrap_servers())
            .finish_non_exhaustive()
    }
}

impl KafkaBroker {
    /// A broker reached with `config`; clients connect when first used.
    #[must_use]
    pub fn new(config: KafkaConfig) -> Self {
        Self {
            config,
            producer: Arc::default(),
            reader: Arc::default(),
        }
    }

    /// The same cluster and settings, with a producer of its own that
    /// sends each record as soon as it can (`linger.ms` 0, unless the
    /// settings set a linger: [`KafkaConfig::linger`], or `linger.ms` or
    /// its alias `queue.buffering.max.ms` through [`KafkaConfig::with`]).
    /// For sends a caller waits on, such as a request, where librdkafka's
    /// default wait of 5 ms for a batch to fill is most of a round trip.
    /// Records still batch while earlier ones are in flight. Clones of the
    /// returned broker share its producer; it shares this broker's reader.
    #[must_use]
    pub fn immediate(&self) -> Self {
        Self {
            config: self.config.immediate(),
            producer: Arc::default(),
            reader: Arc::clone(&self.reader),
        }
    }

    /// Waits until the cluster answers a metadata request from a client
    /// with these settings, for at most `timeout`. A refused login or TLS
    /// handshake fails at once, naming librdkafka's reason; an unreachable
    /// cluster fails at the deadline with the last error seen.
    pub async fn check(&self, timeout: Duration) -> Result<(), BrokerError> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || check::reachable(&config, timeout))
            .await
            .map_err(retriable_failure)?
    }

    fn reader(&self) -> Result<Arc<Reader>, BrokerError> {
        if let Some(reader) = self.reader.get() {
            return Ok(Arc::clone(reader));
        }
        let consumer: BaseConsumer = self
            .config
            .client(&[
                ("group.id", "prosody-reader"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "error"),
                // A read waits for its fetch: keep it short.
                ("fetch.wait.max.ms", "50"),
                // A partition stays assigned after a read: bound what it
                // prefetches meanwhile.
                ("queued.min.messages", "1000"),
                ("queued.max.messages.kbytes", "4096"),
            ])
            .create()
            .map_err(error::backend)?;
        Ok(Arc::clone(self.reader.get_or_init(|| {
            Arc::new(Reader::new(consumer, self.config.discard_distance()))
        })))
    }
}

impl Broker for KafkaBroker {
    type Consumer = KafkaConsumer;
    type Producer = KafkaProducer;

    fn durable(&self) -> bool {
        true
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<KafkaConsumer, BrokerError> {
        let (sender, events) = mpsc::channel(CHANNEL);
        let member = Member::new(sender.clone());
        let statistics = self.config.statistics_millis();
        let mut settings = vec![
            ("group.id", config.group_id.as_str()),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            // A resumed partition waits for the fetch in flight: keep it short.
            ("fetch.wait.max.ms", "50"),
            // A full prefetch queue stops the fetcher until it drains; look
            // again soon, or a fast consumer idles for the default second.
            ("fetch.queue.backoff.ms", "10"),
            // Prefetch about 50 ms of a busy member's work, not 100,000
            // records: the fetcher still runs ahead.
            ("queued.min.messages", "10000"),
            // And large records at most 16 MiB of payload, not 64.
            ("queued.max.messages.kbytes", "16384"),
        ];
        // A prefetched record pins the fetch response it came in until it
        // is polled: one response at most 8 MiB, not 50. A client that sets
        // `message.max.bytes` gets librdkafka's own choice, which fits it.
        if !self.config.sets("message.max.bytes") {
            settings.push(("fetch.max.bytes", FETCH_MAX_BYTES));
        }
        match self.config.protocol() {
            GroupProtocol::Classic => {
                settings.push(("partition.assignment.strategy", "cooperative-sticky"));
            }
            // The broker assigns; librdkafka refuses a client-side assignor.
            GroupProtocol::Consumer => settings.push(("group.protocol", "consumer")),
        }
        if let Some(statistics) = &statistics {
            settings.push(("statistics.interval.ms", statistics.as_str()));
        }
        let consumer: BaseConsumer<Member> = self
            .config
            .client(&settings)
            .create_with_context(member)
            .map_err(error::backend)?;
        let topics: Vec<&str> = config.topics.iter().map(|t| &**t).collect();
        consumer.subscribe(&topics).map_err(error::backend)?;
        KafkaConsumer::start(consumer, events, sender)
    }

    fn producer(&self) -> Result<KafkaProducer, BrokerError> {
        let delivery = self.config.effective_delivery_timeout();
        if let Some(producer) = self.producer.get() {
            return Ok(KafkaProducer {
                producer: producer.clone(),
                delivery,
            });
        }
        let producer: FutureProducer = self.config.producer().create().map_err(error::backend)?;
        Ok(KafkaProducer {
            producer: self.producer.get_or_init(|| producer).clone(),
            delivery,
        })
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        let reader = self.reader()?;
        let partition = partition.clone();
        tokio::task::spawn_blocking(move || reader.read(&partition, offset))
            .await
            .map_err(retriable_failure)?
    }

    /// A metadata request for this one topic, on the reader's consumer,
    /// bounded by the reader's metadata timeout (10 s). The consumer never
    /// asks the cluster to create the topic; an unreachable cluster is a
    /// retriable error at the timeout.
    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        let reader = self.reader()?;
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || reader.partitions(&topic))
            .await
            .map_err(retriable_failure)?
    }
}
