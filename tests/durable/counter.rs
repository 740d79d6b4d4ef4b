//! A counter per key on real Kafka and Cassandra: a member killed while
//! busy, and a rebalance, leave exactly one count per record.

use crate::member::{Seen, World, spawn_member};
use crate::{DEADLINE, handled, until};
use prosody::broker::TopicPartition;
use prosody::store::StateStore;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const KEYS: u64 = 10;

/// 300 `count` records over 10 keys, each taking 30 ms; five of the 50th
/// to 99th fail at A after counting (so A defers them, their counts
/// dropped, and their keys' later records wait behind them). Member A (a
/// process) is killed (`SIGKILL`) once it counted 100, with commits to Kafka and
/// Cassandra in flight; B takes over, C joins (a rebalance), and once the
/// group committed every record each key's stored count is its number of
/// records: none counted twice (redelivered after the kill, or by a failed
/// attempt), none lost. The deferred records are drained from the stores
/// by B and C, after their offsets were committed.
pub async fn a_counter_counts_each_record_once() -> Option<()> {
    let world = World::new("counter", 4).await?;
    let records: Vec<_> = (0..300_u64)
        .map(|n| {
            let mut payload = json!({"n": n, "count": true, "sleep_ms": 30});
            if (50..100).contains(&n) && n % 9 == 4 {
                payload["fail_at"] = json!("A");
            }
            (format!("key-{}", n % KEYS), payload)
        })
        .collect();
    let delivered = world.deliver(&records).await;
    let mut expected: BTreeMap<(i32, String), u64> = BTreeMap::new();
    for ((key, _), (partition, _)) in records.iter().zip(&delivered) {
        *expected.entry((*partition, key.clone())).or_default() += 1;
    }
    let ends = {
        let mut ends = BTreeMap::new();
        for (partition, offset) in &delivered {
            let end: &mut i64 = ends.entry(*partition).or_default();
            *end = (*end).max(offset + 1);
        }
        ends
    };
    let log_a = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let mut a = spawn_member(&world, "A", &log_a);
    until("A counted 100 records", async || {
        handled(&log_a.lock().unwrap(), "counted").len() >= 100
    })
    .await;
    a.kill();
    let log = Arc::new(Mutex::new(Vec::new()));
    let b = world.member("B", &log).await;
    until("B counted more", async || {
        handled(&log.lock().unwrap(), "counted").len() >= 20
    })
    .await;
    let c = world.member("C", &log).await;
    // A deferred record's offset is committed before its backlog drains:
    // the group is done once every record ran to success somewhere.
    until("every record handled", async || {
        let mut every = handled(&log_a.lock().unwrap(), "message");
        every.extend(handled(&log.lock().unwrap(), "message"));
        every.len() == records.len()
    })
    .await;
    until("the group committed every record", async || {
        world.committed_to(&ends)
    })
    .await;
    b.shutdown().await;
    c.shutdown().await;
    let cassandra = world.stores().await;
    for ((partition, key), records) in expected {
        let p = TopicPartition::new(world.topic.as_str(), partition);
        let count = tokio::time::timeout(
            DEADLINE,
            cassandra.cell(&p, "count", &key.as_str().into(), &[]),
        )
        .await
        .unwrap()
        .unwrap()
        .map(|bytes| serde_json::from_slice::<u64>(&bytes).unwrap());
        assert_eq!(count, Some(records), "{key}'s count");
    }
    Some(())
}
