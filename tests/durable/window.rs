//! A deque of messages on real Kafka and Cassandra: the store keeps each
//! message's position, and a read brings the messages back from the real
//! log (the loader's seek), whole and in order, across a hand-off from
//! one member to the next.

use crate::DEADLINE;
use crate::member::{World, builder};
use futures_util::TryStreamExt;
use prosody::state::{Direction, MessageDequeDef};
use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

static PENDING: MessageDequeDef<Value> = MessageDequeDef::new("pending").capacity(100);

/// What a flush read: its key, and the messages as (partition, offset, n).
type Flush = (String, Vec<(i32, i64, u64)>);

/// Pushes every message; a message marked `flush` reads the key's deque
/// back, reports it and clears it.
struct Window(mpsc::UnboundedSender<Flush>);

impl EventHandler for Window {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let pending = context.state(&PENDING)?;
        pending.push_back(&message).await?;
        if message.payload["flush"] != json!(true) {
            return Ok(());
        }
        let read: Vec<Message<Value>> = pending.values(Direction::Forward).try_collect().await?;
        pending.clear().await?;
        let read = read
            .iter()
            .map(|m| {
                (
                    m.partition,
                    m.offset,
                    m.payload["n"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect();
        let _ = self.0.send((message.key.to_string(), read));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn member(world: &World, flushes: mpsc::UnboundedSender<Flush>) -> ProsodyClient {
    let client = builder()
        .state_collections([PENDING.spec()])
        .group_id(world.group.as_str())
        .subscribed_topics([world.topic.as_str()])
        .cassandra_keyspace(world.keyspace.as_str())
        .source_system("producer")
        .disable_probe()
        .build()
        .await
        .unwrap();
    client.subscribe(Window(flushes)).await.unwrap();
    client
}

/// 40 records over 4 keys in two halves; the last record of each key in
/// each half flushes. Member A handles the first half and shuts down; B
/// handles the second. Each flush reads exactly its key's messages of its
/// half, in order, each at the position Kafka gave it.
pub async fn a_message_deque_reads_back_from_the_log() -> Option<()> {
    let world = World::new("window", 2).await?;
    let records: Vec<(String, Value)> = (0..40_u64)
        .map(|n| {
            let payload = json!({"n": n, "flush": (16..20).contains(&n) || n >= 36});
            (format!("key-{}", n % 4), payload)
        })
        .collect();
    let (tx, mut flushes) = mpsc::unbounded_channel();
    let mut positions = BTreeMap::new();
    let mut read = BTreeMap::new();
    for half in [0..20, 20..40] {
        let sent = world.deliver(&records[half.clone()]).await;
        for (n, at) in half.clone().zip(sent) {
            positions.insert(n as u64, at);
        }
        let client = member(&world, tx.clone()).await;
        for _ in 0..4 {
            let (key, messages) = tokio::time::timeout(DEADLINE, flushes.recv())
                .await
                .expect("a flush within the deadline")
                .expect("the handler runs");
            read.insert((half.start, key), messages);
        }
        tokio::time::timeout(Duration::from_secs(60), client.shutdown())
            .await
            .expect("a graceful shutdown");
    }
    for ((start, key), messages) in read {
        let k: u64 = key.trim_start_matches("key-").parse().unwrap();
        let expected: Vec<(i32, i64, u64)> = (start as u64..start as u64 + 20)
            .filter(|n| n % 4 == k)
            .map(|n| (positions[&n].0, positions[&n].1, n))
            .collect();
        assert_eq!(messages, expected, "{key}'s flush of the half from {start}");
    }
    Some(())
}
