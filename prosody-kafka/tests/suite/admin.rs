//! Topic administration against a real Apache Kafka (from
//! `scripts/services`): librdkafka's mock cluster has no admin API. Without
//! `PROSODY_BOOTSTRAP_SERVERS` the suite prints one line and does not run.

use prosody_conformance::services;
use prosody_kafka::{AdminClient, AdminError, KafkaConfig, TopicOptions};
use std::time::Duration;

/// Creating a topic with every option, reading it back from the broker,
/// and deleting it; an existing topic and an absent one give typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_described_and_deleted() -> Result<(), AdminError> {
    let Some(servers) = services::server(services::KAFKA, "prosody-kafka/tests/suite/admin.rs")
    else {
        return Ok(());
    };
    let admin = AdminClient::with_config(&KafkaConfig::new(servers.split(','))?)?;
    let name = services::unique("admin");
    let options = TopicOptions {
        partitions: Some(3),
        replication_factor: Some(1),
        cleanup_policy: Some("compact".to_owned()),
        retention: Some(Duration::from_secs(2 * 3600)),
    };
    admin.create_topic(&name, &options).await?;
    // Creation reaches the metadata shortly after the request returns, as
    // deletion does below.
    let created = async {
        loop {
            match admin.describe_topic(&name).await {
                Err(AdminError::UnknownTopic(_)) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                described => return described,
            }
        }
    };
    let topic = tokio::time::timeout(Duration::from_secs(30), created)
        .await
        .map_err(|_| AdminError::Invalid {
            option: "describe_topic",
            reason: "the created topic did not appear".into(),
        })??;
    assert_eq!((topic.partitions, topic.replication_factor), (3, 1));
    assert_eq!(
        topic.configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert_eq!(
        topic.configs.get("retention.ms").map(String::as_str),
        Some("7200000")
    );

    let again = admin.create_topic(&name, &options).await;
    assert!(
        matches!(&again, Err(AdminError::TopicExists(t)) if *t == name),
        "{again:?}"
    );

    admin.delete_topic(&name).await?;
    // Deletion reaches the metadata shortly after the request returns.
    let gone = async {
        loop {
            match admin.describe_topic(&name).await {
                Err(AdminError::UnknownTopic(_)) => return,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .map_err(|_| AdminError::Invalid {
            option: "describe_topic",
            reason: "the deleted topic stayed".into(),
        })?;
    let never = services::unique("absent");
    let absent = admin.delete_topic(&never).await;
    assert!(
        matches!(&absent, Err(AdminError::UnknownTopic(t)) if *t == never),
        "{absent:?}"
    );
    Ok(())
}
