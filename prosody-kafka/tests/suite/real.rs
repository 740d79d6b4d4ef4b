//! The Kafka broker against a real Apache Kafka (`KRaft`, from
//! `scripts/services`): the shared broker conformance suite, one test per
//! check, with the classic group protocol and (the checks of membership
//! and offsets) with Kafka 4's consumer protocol. Without
//! `PROSODY_BOOTSTRAP_SERVERS` the suite prints one line and does not run.

use prosody_conformance::broker::{self as conformance, Failure, Harness};
use prosody_conformance::services;
use prosody_contracts::broker::BrokerError;
use prosody_kafka::{
    AdminClient, AdminError, GroupProtocol, KafkaBroker, KafkaConfig, TopicOptions,
};
use std::time::Duration;

const SUITE: &str = "prosody-kafka/tests/suite/real.rs (real Kafka)";

struct Kafka {
    broker: KafkaBroker,
    admin: AdminClient,
}

impl Kafka {
    /// The harness, or `None` when no real Kafka is configured.
    fn start(protocol: GroupProtocol) -> Result<Option<Self>, Failure> {
        let Some(servers) = services::server(services::KAFKA, SUITE) else {
            return Ok(None);
        };
        let failed = |e: &dyn std::fmt::Display| Failure::new(e.to_string());
        let config = KafkaConfig::new(servers.split(','))
            .map_err(|e| failed(&e))?
            .group_protocol(protocol);
        Ok(Some(Self {
            admin: AdminClient::with_config(&config).map_err(|e| failed(&e))?,
            broker: KafkaBroker::new(config),
        }))
    }
}

/// Creates a topic and waits until the broker describes all its partitions.
async fn create(admin: &AdminClient, name: &str, partitions: i32) -> Result<(), AdminError> {
    let options = TopicOptions {
        partitions: Some(partitions),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    admin.create_topic(name, &options).await?;
    loop {
        match admin.describe_topic(name).await {
            Ok(topic) if topic.partitions == partitions => return Ok(()),
            Ok(_) | Err(AdminError::UnknownTopic(_)) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

impl Harness for Kafka {
    type Broker = KafkaBroker;

    fn broker(&self) -> KafkaBroker {
        self.broker.clone()
    }

    async fn create_topic(&self, name: &str, partitions: i32) -> Result<(), BrokerError> {
        let created = create(&self.admin, name, partitions);
        match tokio::time::timeout(Duration::from_secs(30), created).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(BrokerError::Invalid(error.to_string())),
            Err(_) => Err(BrokerError::Invalid(format!("topic {name} never appeared"))),
        }
    }

    /// A real group coordinator takes seconds to rebalance.
    fn deadline(&self) -> Duration {
        Duration::from_secs(60)
    }
}

macro_rules! checks {
    ($protocol:expr; $($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() -> Result<(), Failure> {
            let Some(kafka) = super::Kafka::start($protocol)? else { return Ok(()) };
            conformance::$check(&kafka).await
        }
    )*};
}

mod classic {
    use super::{Failure, GroupProtocol, conformance};

    checks!(GroupProtocol::Classic;
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
}

mod consumer {
    use super::{Failure, GroupProtocol, conformance};

    checks!(GroupProtocol::Consumer;
        group_splits_partitions,
        close_moves_partitions,
        drop_moves_partitions,
        revocation_hands_over_committed_offsets,
        resume_from_committed,
        pause_and_resume,
        store_offset_requires_assignment,
    );
}
