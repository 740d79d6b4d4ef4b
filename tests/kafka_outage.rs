//! A send across a real Kafka outage (`KRaft`, from `scripts/services`): a
//! send made while the broker is down fails within `send_timeout` plus the
//! producer's [`VERDICT_MARGIN`](prosody_kafka::VERDICT_MARGIN), says the
//! producer gave the record up, and that record never reaches the topic,
//! not even once the broker is back on its data and the same client sends
//! again (its producer reconnects, and would deliver the record if it
//! still held it).
//!
//! This binary stops the shared broker and starts it again
//! (`scripts/services stop kafka`, then `resume kafka`), so it holds this
//! one test only: cargo runs test binaries one at a time. It needs the
//! `PROSODY_SERVICES_DIR` the servers were started with. Without
//! `PROSODY_BOOTSTRAP_SERVERS` the suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Unsent};
use prosody::{
    AdminClient, ClientError, KafkaBroker, KafkaConfig, MemoryStores, ProsodyClient, TopicOptions,
};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const SUITE: &str = "tests/kafka_outage.rs (real Kafka)";
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a busy test machine on top of the producer's own bound.
const SLACK: Duration = Duration::from_secs(1);

/// Runs `scripts/services <command> kafka`: its output, or why it failed.
fn services(command: &str) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services");
    let output = Command::new(script)
        .args([command, "kafka"])
        .output()
        .map_err(|e| format!("{script} {command} kafka: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(text)
    } else {
        let errors = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "{script} {command} kafka: {}: {text}{errors}",
            output.status
        ))
    }
}

/// Kafka stopped; resumed on its data when ended or dropped, so a failing
/// test leaves it running for the suites after it.
struct Outage {
    over: bool,
}

impl Outage {
    fn begin() -> Self {
        let said = services("stop").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            said.contains("kafka: stopped"),
            "no running Kafka was stopped ({said:?}): set PROSODY_SERVICES_DIR to the \
             directory `scripts/services start` used"
        );
        Self { over: false }
    }

    fn end(mut self) {
        self.over = true;
        services("resume").unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.over
            && let Err(error) = services("resume")
        {
            // No panic while a failed assertion unwinds.
            eprintln!("{SUITE}: Kafka not resumed: {error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_failed_in_an_outage_is_never_delivered_afterwards() {
    let Some(servers) = services::server(services::KAFKA, SUITE) else {
        return;
    };
    let whole = Instant::now();
    let config = KafkaConfig::new(servers.split(',')).unwrap();
    let topic = services::unique("outage");
    // One partition: the producer keeps a partition's records in order, so
    // a record it still held would land before the one sent after it.
    let options = TopicOptions {
        partitions: Some(1),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    AdminClient::with_config(&config)
        .unwrap()
        .create_topic(&topic, &options)
        .await
        .unwrap();
    let client = ProsodyClient::builder()
        .bootstrap_servers([servers.as_str()])
        .group_id(services::unique("outage_group").as_str())
        .send_timeout(SEND_TIMEOUT)
        .stores(MemoryStores::new())
        .disable_probe()
        .build()
        .await
        .unwrap();
    // A warm connection: the producer knows the partition's leader.
    client
        .send(&topic, "k", &json!({"n": "before"}))
        .await
        .unwrap();

    let outage = Outage::begin();
    let started = Instant::now();
    let failed = client.send(&topic, "k", &json!({"n": "lost"})).await;
    let took = started.elapsed();
    println!("the send failed after {took:?}: {failed:?}");
    let error = match failed {
        Err(ClientError::Broker(error)) => error,
        other => panic!("a send while Kafka was down: {other:?}"),
    };
    outage.end();

    // The same client's producer reconnects: a send goes through (the
    // broker may need a moment after it answers its first request).
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(error) = client.send(&topic, "k", &json!({"n": "after"})).await {
        assert!(
            Instant::now() < deadline,
            "no send after the outage: {error}"
        );
    }

    let broker = KafkaBroker::new(config);
    let mut reader = broker
        .consumer(&ConsumerConfig {
            group_id: services::unique("outage_reader"),
            topics: vec![topic.as_str().into()],
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let read = async {
        while !seen.iter().any(|n| n == "after") {
            if let ConsumerEvent::Record(record) = reader.poll().await.unwrap() {
                let payload: Value = serde_json::from_slice(&record.payload.unwrap()).unwrap();
                seen.push(payload["n"].as_str().unwrap().to_owned());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap_or_else(|_| panic!("the topic held {seen:?}"));
    reader.close().await;
    client.shutdown().await;
    println!(
        "the topic held {seen:?}; the test took {:?}",
        whole.elapsed()
    );
    assert!(
        !seen.iter().any(|n| n == "lost"),
        "the send that failed ({error}) was delivered afterwards: the topic holds {seen:?}"
    );
    assert_eq!(
        seen.first().map(String::as_str),
        Some("before"),
        "Kafka lost its data across the outage: {seen:?}"
    );
    assert!(
        matches!(
            error,
            BrokerError::SendTimeout {
                unsent: Unsent::GivenUp,
                ..
            }
        ),
        "not a send the producer gave up: {error:?}"
    );
    let bound = SEND_TIMEOUT + prosody_kafka::VERDICT_MARGIN + SLACK;
    assert!(
        took < bound,
        "the send failed after {took:?}, over {bound:?}"
    );
}
