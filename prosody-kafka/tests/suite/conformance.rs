//! The Kafka broker runs the shared broker conformance suite against
//! librdkafka's in-process mock cluster, one test per check, each on a
//! cluster of its own, in real time on two worker threads.

use prosody_conformance::broker::{self as conformance, Failure, Harness};
use prosody_contracts::broker::BrokerError;
use prosody_kafka::KafkaBroker;
use prosody_kafka::mock::MockKafka;
use std::future::Future;
use std::time::Duration;

struct Kafka {
    cluster: MockKafka,
    broker: KafkaBroker,
}

impl Kafka {
    fn start() -> Result<Self, Failure> {
        let cluster = MockKafka::start(1).map_err(|e| Failure::new(e.to_string()))?;
        let config = cluster.config().map_err(|e| Failure::new(e.to_string()))?;
        Ok(Self {
            broker: KafkaBroker::new(config),
            cluster,
        })
    }
}

impl Harness for Kafka {
    type Broker = KafkaBroker;

    fn broker(&self) -> KafkaBroker {
        self.broker.clone()
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        std::future::ready(self.cluster.create_topic(name, partitions))
    }

    fn deadline(&self) -> Duration {
        Duration::from_secs(30)
    }
}

macro_rules! checks {
    ($($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() -> Result<(), Failure> {
            conformance::$check(&Kafka::start()?).await
        }
    )*};
}

checks!(
    round_trip,
    keys_choose_partitions,
    read_by_offset,
    partitions_report_counts,
    group_splits_partitions,
    close_moves_partitions,
    drop_moves_partitions,
    revocation_hands_over_committed_offsets,
    resume_from_committed,
    committed_reads_back,
    pause_and_resume,
    store_offset_requires_assignment,
);

/// Reading from a topic or partition the cluster does not have is an error
/// that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_unknown_topic_or_partition_is_an_error() -> Result<(), Failure> {
    use prosody_contracts::broker::{Broker, TopicPartition};
    let kafka = Kafka::start()?;
    kafka
        .create_topic("known", 2)
        .await
        .map_err(|e| Failure::new(e.to_string()))?;
    let unknown_topic = kafka
        .broker
        .read(&TopicPartition::new("unknown", 0), 0)
        .await;
    let unknown_partition = kafka.broker.read(&TopicPartition::new("known", 7), 0).await;
    if !matches!(unknown_topic, Err(BrokerError::UnknownTopic(_))) {
        return Err(Failure::new(format!("unknown topic: {unknown_topic:?}")));
    }
    if !matches!(unknown_partition, Err(BrokerError::UnknownPartition(_))) {
        return Err(Failure::new(format!(
            "unknown partition: {unknown_partition:?}"
        )));
    }
    Ok(())
}

/// Asking a cluster that cannot be reached for a topic's partition count
/// is a retriable backend error, not `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_of_an_unreachable_cluster_is_a_retriable_error() -> Result<(), Failure> {
    use prosody_contracts::broker::Broker;
    use prosody_kafka::KafkaConfig;
    // Port 1 on the loopback: nothing listens, the connection is refused.
    let config = KafkaConfig::new(["127.0.0.1:1"]).map_err(|e| Failure::new(e.to_string()))?;
    let broker = KafkaBroker::new(config);
    let asked = broker.partitions("anything").await;
    match asked {
        Err(BrokerError::Backend {
            retriable: true, ..
        }) => Ok(()),
        other => Err(Failure::new(format!(
            "partitions of an unreachable cluster: {other:?}"
        ))),
    }
}
