//! The loops the library is compared with: rdkafka's stream as it comes,
//! and the least a correct consumer does with it.

use futures_util::StreamExt;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, StreamConsumer};
use rdkafka::message::Message as _;
use std::time::{Duration, Instant};

/// Panics unless `topic` holds `records` records over its `partitions`:
/// librdkafka's mock cluster keeps at most 5 MiB a partition and drops
/// the oldest silently, which would leave every loop waiting for ever.
pub fn check_holds(servers: &str, topic: &str, partitions: i32, records: usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .unwrap();
    let held: i64 = (0..partitions)
        .map(|partition| {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, Duration::from_secs(30))
                .unwrap();
            high - low
        })
        .sum();
    assert_eq!(
        usize::try_from(held).unwrap(),
        records,
        "{topic} holds {held} of the {records} records produced (the mock \
         cluster keeps 5 MiB a partition: raise E2E_PARTITIONS)"
    );
}

/// Records per second, and the CPU used (`memory::cpu_line`), of a
/// consumer that reads `records` records of `topic`: as they come with
/// librdkafka's defaults (`correct` false), or with the library's fetch
/// back-off, decoding each payload's JSON, storing its offset and
/// committing every second (`correct`).
pub async fn raw(servers: &str, topic: &str, records: usize, correct: bool) -> (f64, String) {
    let group = format!("raw-{topic}-{correct}");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // As the library's consumer does, for the correct loop: see below.
        .set(
            "fetch.queue.backoff.ms",
            if correct { "10" } else { "1000" },
        )
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut stream = consumer.stream();
    let mut seen = 0;
    let mut start = None;
    let mut committed = Instant::now();
    while seen < records {
        let message = stream.next().await.unwrap().unwrap();
        start.get_or_insert_with(|| (Instant::now(), super::memory::cpu_seconds()));
        if correct {
            let payload = message.payload().unwrap_or_default();
            let value: serde_json::Value = serde_json::from_slice(payload).unwrap();
            std::hint::black_box(&value);
            consumer.store_offset_from_message(&message).unwrap();
            if committed.elapsed() >= Duration::from_secs(1) {
                consumer.commit_consumer_state(CommitMode::Async).unwrap();
                committed = Instant::now();
            }
        } else {
            std::hint::black_box(&message);
        }
        seen += 1;
    }
    let (start, cpu) = start.unwrap();
    let wall = start.elapsed().as_secs_f64();
    let cpu = super::memory::cpu_line(super::memory::cpu_seconds() - cpu, wall, records);
    let rate = records as f64 / wall;
    if correct {
        consumer.commit_consumer_state(CommitMode::Sync).unwrap();
    }
    (rate, cpu)
}
