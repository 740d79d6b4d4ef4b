//! Reads by offset on librdkafka's mock cluster: whether a read seeks or
//! reads on from the last one, it returns exactly the record asked for, or
//! `None` where the log holds none.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code fails loudly"
)]

use prosody_contracts::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody_kafka::KafkaBroker;
use prosody_kafka::mock::MockKafka;
use std::time::Duration;

/// Writes records `from..to` to partition `partition` of `topic`, each
/// carrying its number.
async fn write(broker: &KafkaBroker, topic: &str, partition: i32, from: u32, to: u32) {
    let producer = broker.producer().unwrap();
    for n in from..to {
        let mut record = OutgoingRecord::new(topic, format!("k{n}"), n.to_string());
        record.partition = Some(partition);
        producer.send(record, Duration::from_secs(5)).await.unwrap();
    }
}

/// The number in the record at `offset`, `None` if there is none.
async fn number(broker: &KafkaBroker, tp: &TopicPartition, offset: i64) -> Option<u32> {
    let record = broker.read(tp, offset).await.unwrap()?;
    assert_eq!(record.offset, offset);
    let payload = record.payload.expect("payload");
    Some(std::str::from_utf8(&payload).unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_returns_the_record_at_its_offset() {
    let cluster = MockKafka::start(1).unwrap();
    cluster.create_topic("t", 2).unwrap();
    let broker = KafkaBroker::new(cluster.config().unwrap().discard_threshold(100));
    write(&broker, "t", 0, 0, 300).await;
    write(&broker, "t", 1, 1000, 1010).await;
    let zero = TopicPartition::new("t", 0);
    let one = TopicPartition::new("t", 1);

    // Next offsets, a skip within the threshold, a step back, a jump past
    // it, another partition and back.
    for (tp, offset, expected) in [
        (&zero, 0, 0),
        (&zero, 1, 1),
        (&zero, 2, 2),
        (&zero, 60, 60),
        (&zero, 59, 59),
        (&zero, 250, 250),
        (&one, 3, 1003),
        (&zero, 251, 251),
        (&zero, 299, 299),
    ] {
        assert_eq!(
            number(&broker, tp, offset).await,
            Some(expected),
            "{tp} at {offset}"
        );
    }
    // Past the end, within the threshold: nothing there yet.
    assert_eq!(number(&broker, &zero, 305).await, None);
    assert_eq!(number(&broker, &zero, 299).await, Some(299));
    // The queue reached the end after offset 299. Records written since
    // are found all the same.
    write(&broker, "t", 0, 300, 310).await;
    assert_eq!(number(&broker, &zero, 302).await, Some(302));
    assert_eq!(number(&broker, &zero, 309).await, Some(309));
}
