//! The producer's delivery timeout on librdkafka's mock cluster: a send
//! that the broker never acknowledges fails once librdkafka gives the
//! record up (within the delivery timeout plus [`VERDICT_MARGIN`]), says
//! so ([`Unsent::GivenUp`]), and the record is not written when the broker
//! comes back; a send whose caller allows less than the delivery timeout
//! says the record may still arrive ([`Unsent::MayArrive`]).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_contracts::broker::{
    Broker, BrokerError, Delivery, OutgoingRecord, Producer, TopicPartition, Unsent,
};
use prosody_kafka::{KafkaBroker, KafkaConfig, KafkaProducer, VERDICT_MARGIN};
use rdkafka::mocking::MockCluster;
use std::time::{Duration, Instant};

/// The producer's delivery timeout (librdkafka's `message.timeout.ms`).
const DELIVERY: Duration = Duration::from_secs(2);
/// Time for a busy test machine on top of the producer's own bound.
const SLACK: Duration = Duration::from_secs(1);

/// Sends `payload` to partition 0 of topic `t`, allowing `timeout`.
async fn send(
    producer: &KafkaProducer,
    payload: &str,
    timeout: Duration,
) -> Result<Delivery, BrokerError> {
    let mut record = OutgoingRecord::new("t", "k", payload.to_owned());
    record.partition = Some(0);
    producer.send(record, timeout).await
}

// The mock cluster's handle stays on the thread that made it: a
// current-thread runtime keeps it there.
#[tokio::test]
async fn a_send_the_broker_never_acknowledges_is_given_up_for_good() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("t", 1, 1).unwrap();
    let config = KafkaConfig::new([cluster.bootstrap_servers()])
        .unwrap()
        .delivery_timeout(DELIVERY);
    let broker = KafkaBroker::new(config);
    let producer = broker.producer().unwrap();
    let before = send(&producer, "before", DELIVERY).await.unwrap();

    cluster.broker_down(1).unwrap();
    let started = Instant::now();
    let failed = send(&producer, "lost", DELIVERY).await;
    let took = started.elapsed();
    let held = send(&producer, "held", Duration::from_millis(200)).await;
    cluster.broker_up(1).unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match send(&producer, "after", DELIVERY).await {
            Ok(delivery) => break delivery,
            Err(error) => assert!(Instant::now() < deadline, "no send after: {error}"),
        }
    };
    let tp = TopicPartition::new("t", 0);
    let mut written = Vec::new();
    for offset in before.offset..=after.offset {
        if let Some(record) = broker.read(&tp, offset).await.unwrap() {
            written.push(String::from_utf8(record.payload.unwrap().to_vec()).unwrap());
        }
    }
    assert!(
        !written.iter().any(|payload| payload == "lost"),
        "the send that failed ({failed:?}) was written afterwards: {written:?}"
    );
    assert!(
        matches!(
            failed,
            Err(BrokerError::SendTimeout {
                unsent: Unsent::GivenUp,
                timeout: DELIVERY,
                ..
            })
        ),
        "not a send the producer gave up: {failed:?}"
    );
    let bound = DELIVERY + VERDICT_MARGIN + SLACK;
    assert!(
        took < bound,
        "the send failed after {took:?}, over {bound:?}"
    );
    assert!(
        matches!(
            held,
            Err(BrokerError::SendTimeout {
                unsent: Unsent::MayArrive,
                ..
            })
        ),
        "a send the caller stopped waiting for: {held:?}"
    );
    let text = held.unwrap_err().to_string();
    assert!(text.contains("may still be written"), "{text}");
}
