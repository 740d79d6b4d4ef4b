//! Behaviour of the memory broker beyond the shared conformance suite.

use prosody_contracts::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, OutgoingRecord, Producer,
    TopicPartition,
};
use prosody_memory::{AUTO_CREATE_PARTITIONS, MemoryBroker, MemoryConsumer};
use std::time::Duration;

const SEND: Duration = Duration::from_secs(1);

/// A test's outcome; broker errors and test failures both fail it.
type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn config(group: &str, topic: &str) -> ConsumerConfig {
    ConsumerConfig {
        group_id: group.to_owned(),
        topics: vec![topic.into()],
    }
}

async fn send_to(broker: &MemoryBroker, topic: &str, partition: i32) -> Result<(), BrokerError> {
    let mut record = OutgoingRecord::new(topic, "k", "v");
    record.partition = Some(partition);
    broker.producer()?.send(record, SEND).await?;
    Ok(())
}

/// Polls once; a poll that never returns fails the test instead of hanging.
async fn poll(consumer: &mut MemoryConsumer) -> TestResult<ConsumerEvent> {
    let event = tokio::time::timeout(Duration::from_secs(30), consumer.poll())
        .await
        .map_err(|_| "poll returned nothing in 30s")??;
    Ok(event)
}

/// Polls until the consumer's first assignment arrives.
async fn assigned(consumer: &mut MemoryConsumer) -> TestResult<Vec<TopicPartition>> {
    match poll(consumer).await? {
        ConsumerEvent::Assigned(list) => Ok(list),
        other => Err(format!("expected an assignment, got {other:?}").into()),
    }
}

async fn next_record(consumer: &mut MemoryConsumer) -> TestResult<(i32, i64)> {
    match poll(consumer).await? {
        ConsumerEvent::Record(record) => Ok((record.partition, record.offset)),
        other => Err(format!("expected a record, got {other:?}").into()),
    }
}

#[tokio::test(start_paused = true)]
async fn producing_to_an_unknown_topic_creates_it() -> TestResult {
    let broker = MemoryBroker::new();
    assert_eq!(broker.partition_count("new"), None);
    broker
        .producer()?
        .send(OutgoingRecord::new("new", "k", "v"), SEND)
        .await?;
    assert_eq!(broker.partition_count("new"), Some(AUTO_CREATE_PARTITIONS));
    let total: i64 = (0..AUTO_CREATE_PARTITIONS)
        .filter_map(|p| broker.end_offset(&TopicPartition::new("new", p)))
        .sum();
    assert_eq!(total, 1);
    assert_eq!(
        broker.end_offset(&TopicPartition::new("new", AUTO_CREATE_PARTITIONS)),
        None
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_consumer_waits_for_its_topic_to_exist() -> TestResult {
    let broker = MemoryBroker::new();
    let mut consumer = broker.consumer(&config("g", "later")).await?;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), consumer.poll())
            .await
            .is_err()
    );
    broker.create_topic("later", 2)?;
    assert_eq!(assigned(&mut consumer).await?.len(), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_waiting_poll_wakes_on_produce() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1)?;
    let mut consumer = broker.consumer(&config("g", "t")).await?;
    assigned(&mut consumer).await?;
    let (record, sent) = tokio::join!(next_record(&mut consumer), async {
        tokio::task::yield_now().await;
        send_to(&broker, "t", 0).await
    });
    sent?;
    assert_eq!(record?, (0, 0));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_dropped_poll_loses_nothing() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1)?;
    let mut consumer = broker.consumer(&config("g", "t")).await?;
    assigned(&mut consumer).await?;
    for _ in 0..3 {
        assert!(
            tokio::time::timeout(Duration::from_millis(10), consumer.poll())
                .await
                .is_err()
        );
    }
    send_to(&broker, "t", 0).await?;
    send_to(&broker, "t", 0).await?;
    assert_eq!(next_record(&mut consumer).await?, (0, 0));
    assert_eq!(next_record(&mut consumer).await?, (0, 1));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn records_are_served_round_robin_across_partitions() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 3)?;
    for partition in [0, 0, 0, 1, 1, 1, 2, 2, 2] {
        send_to(&broker, "t", partition).await?;
    }
    let mut consumer = broker.consumer(&config("g", "t")).await?;
    assigned(&mut consumer).await?;
    let mut order = Vec::new();
    for _ in 0..9 {
        order.push(next_record(&mut consumer).await?);
    }
    let expected: Vec<(i32, i64)> = (0..3).flat_map(|o| (0..3).map(move |p| (p, o))).collect();
    assert_eq!(order, expected);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn close_commits_stored_offsets_and_drop_does_not() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1)?;
    let tp = TopicPartition::new("t", 0);
    let mut closing = broker.consumer(&config("closing", "t")).await?;
    assigned(&mut closing).await?;
    closing.store_offset(&tp, 3)?;
    closing.close().await;
    assert_eq!(broker.committed_offset("closing", &tp), Some(3));

    let mut crashing = broker.consumer(&config("crashing", "t")).await?;
    assigned(&mut crashing).await?;
    crashing.store_offset(&tp, 3)?;
    drop(crashing);
    assert_eq!(broker.committed_offset("crashing", &tp), None);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn invalid_configurations_and_offsets_are_rejected() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1)?;
    assert!(matches!(
        broker.consumer(&config("", "t")).await,
        Err(BrokerError::Invalid(_))
    ));
    let empty = ConsumerConfig {
        group_id: "g".into(),
        topics: Vec::new(),
    };
    assert!(matches!(
        broker.consumer(&empty).await,
        Err(BrokerError::Invalid(_))
    ));
    let mut consumer = broker.consumer(&config("g", "t")).await?;
    let tp = TopicPartition::new("t", 0);
    assert!(matches!(
        consumer.store_offset(&tp, -1),
        Err(BrokerError::Invalid(_))
    ));
    assert!(matches!(
        consumer.pause(&TopicPartition::new("t", 1)),
        Err(BrokerError::NotAssigned(_))
    ));
    assert!(matches!(
        broker.read(&TopicPartition::new("missing", 0), 0).await,
        Err(BrokerError::UnknownTopic(_))
    ));
    Ok(())
}

/// A consumer positioned among deleted records goes on from the first
/// record kept, and a read of a deleted offset finds nothing.
#[tokio::test(start_paused = true)]
async fn a_consumer_skips_deleted_records() -> TestResult {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1)?;
    for _ in 0..5 {
        send_to(&broker, "t", 0).await?;
    }
    let tp = TopicPartition::new("t", 0);
    broker.delete_records(&tp, 3)?;
    assert_eq!(broker.read(&tp, 2).await?, None);
    assert_eq!(broker.read(&tp, 3).await?.map(|r| r.offset), Some(3));
    let mut consumer = broker.consumer(&config("g", "t")).await?;
    assigned(&mut consumer).await?;
    assert_eq!(next_record(&mut consumer).await?, (0, 3));
    assert_eq!(next_record(&mut consumer).await?, (0, 4));
    Ok(())
}
