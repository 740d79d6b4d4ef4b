//! Checks of what is stored: records, partitions by key, reads by offset.

use super::driver::Group;
use super::fixture::{Fixture, broker_failure, ensure_eq, outgoing, stored};
use super::{Checked, Failure, Harness};
use bytes::Bytes;
use prosody_contracts::broker::{Broker, OutgoingRecord, Record, partition_for_key};
use prosody_contracts::clock::Timestamp;
use prosody_contracts::event::Headers;
use std::collections::BTreeMap;

/// Produced records come back unchanged: keys, payloads, tombstones, headers
/// (order and duplicates kept), timestamps, and offsets that grow per
/// partition and match the deliveries.
pub async fn round_trip(harness: &impl Harness) -> Checked {
    let fixture = Fixture::new(harness, "round-trip", 3).await?;
    let mut sent: Vec<OutgoingRecord> = (0..8)
        .map(|i| {
            let mut record = outgoing(
                &fixture.topic,
                None,
                &format!("key-{}", i % 3),
                i,
                fixture.base,
            );
            record.headers.push("dup", "first");
            record.headers.push("dup", "second");
            record
        })
        .collect();
    let mut tombstone = OutgoingRecord::tombstone(fixture.topic.clone(), "key-1");
    tombstone.headers = Headers::from_iter([("kind", "tombstone")]);
    tombstone.timestamp = Some(Timestamp::from_millis(fixture.base + 100));
    sent.push(tombstone);
    let mut unkeyed = outgoing(&fixture.topic, Some(2), "", 200, fixture.base);
    unkeyed.key = None;
    sent.push(unkeyed);

    // The member already waits in poll while the records are produced: a
    // send must wake a waiting consumer.
    let mut group = Group::new(vec![fixture.join("member", &fixture.group).await?]);
    let all = fixture.all_partitions();
    group
        .until(
            fixture.deadline(),
            "the member to own every partition",
            |g| g.members.first().is_some_and(|m| m.owned == all),
        )
        .await?;
    let count = sent.len();
    let produce = async {
        let mut expected: BTreeMap<(i32, i64), Record> = BTreeMap::new();
        let mut last_offset: BTreeMap<i32, i64> = BTreeMap::new();
        for record in &sent {
            let delivery = fixture.send(record.clone()).await?;
            if let Some(last) = last_offset.insert(delivery.partition, delivery.offset)
                && delivery.offset <= last
            {
                return Err(Failure(format!(
                    "partition {} acknowledged offset {} after offset {last}",
                    delivery.partition, delivery.offset
                )));
            }
            expected.insert(
                (delivery.partition, delivery.offset),
                stored(record, delivery),
            );
        }
        Ok(expected)
    };
    let consume = group.until(fixture.deadline(), "every produced record", |g| {
        g.received() >= count
    });
    // Polled first, the consumer is waiting before the first send.
    let ((), expected) = tokio::try_join!(consume, produce)?;
    let member = group.member(0)?;
    ensure_eq(
        "the partitions of a lone member",
        &fixture.all_partitions(),
        &member.owned,
    )?;
    ensure_eq(
        "the number of records received",
        &count,
        &member.received.len(),
    )?;
    for record in &member.received {
        let Some(want) = expected.get(&(record.partition, record.offset)) else {
            return Err(Failure(format!(
                "received a record at {}/{} offset {} that was never produced: {record:?}",
                record.topic, record.partition, record.offset
            )));
        };
        ensure_eq("a consumed record", want, record)?;
    }
    Ok(())
}

/// A record without a partition lands on Kafka's partition for its key; an
/// explicit partition wins over the key.
pub async fn keys_choose_partitions(harness: &impl Harness) -> Checked {
    let fixture = Fixture::new(harness, "keys", 6).await?;
    let mut keys: Vec<Vec<u8>> = (0..48)
        .map(|i| format!("customer-{i}").into_bytes())
        .collect();
    keys.extend([
        vec![0xff],
        vec![0x00, 0x80],
        vec![0x12, 0x34, 0x56, 0x78, 0x9a],
    ]);
    for (seq, key) in (0..).zip(&keys) {
        let mut record = outgoing(&fixture.topic, None, "", seq, fixture.base);
        record.key = Some(Bytes::from(key.clone()));
        let delivery = fixture.send(record).await?;
        let want = partition_for_key(key, fixture.partitions);
        ensure_eq(
            &format!("the partition of key {key:?}"),
            &want,
            &delivery.partition,
        )?;
        let read = fixture
            .broker
            .read(&fixture.tp(delivery.partition), delivery.offset)
            .await
            .map_err(broker_failure("reading a record back"))?;
        let read_key = read.and_then(|r| r.key);
        ensure_eq(
            "the key read back at the delivered offset",
            &Some(Bytes::from(key.clone())),
            &read_key,
        )?;
    }
    let hashed = partition_for_key(b"customer-0", fixture.partitions);
    let explicit = (hashed + 1) % fixture.partitions;
    let delivery = fixture
        .send(outgoing(
            &fixture.topic,
            Some(explicit),
            "customer-0",
            100,
            fixture.base,
        ))
        .await?;
    ensure_eq(
        "the partition of a record sent to a fixed partition",
        &explicit,
        &delivery.partition,
    )
}

/// `read` returns exactly the record at an offset, from anywhere in the
/// partition, and nothing where no record was written.
pub async fn read_by_offset(harness: &impl Harness) -> Checked {
    let mut fixture = Fixture::new(harness, "read", 2).await?;
    let records = fixture.produce(10).await?;
    for record in records.iter().rev() {
        let got = fixture
            .broker
            .read(&record.topic_partition(), record.offset)
            .await
            .map_err(broker_failure("reading a record"))?;
        ensure_eq(
            &format!(
                "the record read at {} offset {}",
                record.topic_partition(),
                record.offset
            ),
            &Some(record.clone()),
            &got,
        )?;
    }
    for (partition, offset) in [(0, 10), (1, 10), (1, 1_000)] {
        let got = fixture
            .broker
            .read(&fixture.tp(partition), offset)
            .await
            .map_err(broker_failure("reading past the end"))?;
        ensure_eq(
            &format!(
                "the record read at {} offset {offset}",
                fixture.tp(partition)
            ),
            &None,
            &got,
        )?;
    }
    Ok(())
}
