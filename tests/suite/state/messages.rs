//! Message collections: a cell keeps a message's position, and a read
//! brings the whole message back from the log.

use futures_util::StreamExt;
use prosody::state::{Direction, MessageDequeDef, MessageMapDef, MessageValueDef, StateError};
use prosody::{
    Category, Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryStores, Message,
    ProsodyClient, Timer,
};
use prosody_core::broker::TopicPartition;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

static LOG: MessageDequeDef<Value> = MessageDequeDef::new("log");
static LAST: MessageValueDef<Value> = MessageValueDef::new("last");
static BY_KIND: MessageMapDef<Value> = MessageMapDef::new("by_kind");

/// What one record's handler read back, after it stored its message.
#[derive(Debug)]
struct Report {
    /// The message as the handler received it.
    received: Message<Value>,
    /// The key's deque, front to back: a message, or the read's error and
    /// its category.
    log: Vec<Result<Message<Value>, (String, Category)>>,
    /// The key's value.
    last: Option<Message<Value>>,
    /// The map's entry under the message's kind.
    by_kind: Option<Message<Value>>,
}

struct Keeper(mpsc::UnboundedSender<Report>);

impl EventHandler for Keeper {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let kind = message.payload["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let log = context.state(&LOG)?;
        log.push_back(&message).await?;
        context.state(&LAST)?.set(&message).await?;
        let by_kind = context.state(&BY_KIND)?;
        by_kind.set(&kind, &message).await?;
        // Reading a message caches it in the client's loader: a record
        // marked quiet is not read back.
        if message.payload["quiet"] == json!(true) {
            let quiet = Report {
                received: message,
                log: Vec::new(),
                last: None,
                by_kind: None,
            };
            let _ = self.0.send(quiet);
            return Ok(());
        }
        let read = log
            .values(Direction::Forward)
            .map(|item| item.map_err(|error: StateError| (error.to_string(), error.category())))
            .collect()
            .await;
        let report = Report {
            last: context.state(&LAST)?.get().await?,
            by_kind: by_kind.get(&kind).await?,
            log: read,
            received: message,
        };
        let _ = self.0.send(report);
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The parts of a message that must come back as they were received.
fn same(read: &Message<Value>, received: &Message<Value>) -> bool {
    (
        &read.topic,
        read.partition,
        read.offset,
        &read.key,
        &read.payload,
        &read.raw,
        &read.headers,
    ) == (
        &received.topic,
        received.partition,
        received.offset,
        &received.key,
        &received.payload,
        &received.raw,
        &received.headers,
    )
}

async fn client(broker: &MemoryBroker) -> (ProsodyClient, mpsc::UnboundedReceiver<Report>) {
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .stores(MemoryStores::new())
        .group_id("g")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .state_collections([LOG.spec(), LAST.spec(), BY_KIND.spec()])
        .build()
        .await
        .unwrap();
    let (tx, reports) = mpsc::unbounded_channel();
    client.subscribe(Keeper(tx)).await.unwrap();
    (client, reports)
}

async fn next(reports: &mut mpsc::UnboundedReceiver<Report>) -> Report {
    tokio::time::timeout(Duration::from_secs(60), reports.recv())
        .await
        .expect("a record was handled within a minute")
        .expect("the handler is running")
}

/// Every message a value, a map and a deque keep reads back whole (topic,
/// partition, offset, key, payload, bytes and headers), per key, in the
/// order it was pushed.
#[tokio::test(start_paused = true)]
async fn a_message_reads_back_as_it_was_received() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 2).unwrap();
    let (client, mut reports) = client(&broker).await;
    let sent = [
        ("a", "x"),
        ("b", "x"),
        ("c", "y"),
        ("a", "y"),
        ("d", "x"),
        ("a", "x"),
        ("b", "z"),
        ("c", "y"),
    ];
    for (n, &(key, kind)) in sent.iter().enumerate() {
        client
            .send("t", key, &json!({ "kind": kind, "n": n }))
            .await
            .unwrap();
    }
    let mut received: Vec<Message<Value>> = Vec::new();
    for _ in 0..sent.len() {
        let report = next(&mut reports).await;
        received.push(report.received.clone());
        let of_key: Vec<&Message<Value>> = received
            .iter()
            .filter(|m| m.key == report.received.key)
            .collect();
        assert_eq!(report.log.len(), of_key.len(), "{report:?}");
        for (read, expected) in report.log.iter().zip(&of_key) {
            let read = read.as_ref().expect("every message is in the log");
            assert!(same(read, expected), "{read:?} is not {expected:?}");
        }
        assert!(same(report.last.as_ref().unwrap(), &report.received));
        assert!(same(report.by_kind.as_ref().unwrap(), &report.received));
    }
    client.shutdown().await;
    let partitions: std::collections::BTreeSet<i32> =
        received.iter().map(|m| m.partition).collect();
    assert_eq!(partitions.len(), 2, "the keys cover both partitions");
}

/// A message the log no longer holds (deleted, as retention deletes)
/// reads as `MessageGone`, permanent, naming its position; the rest of
/// the scan still reads. (A message the client's loader cached before
/// it was deleted still reads: a position names one message for ever.)
#[tokio::test(start_paused = true)]
async fn a_deleted_message_is_gone_and_the_scan_goes_on() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let (client, mut reports) = client(&broker).await;
    for n in 0..2 {
        client
            .send("t", "a", &json!({ "kind": "x", "n": n, "quiet": true }))
            .await
            .unwrap();
        next(&mut reports).await;
    }
    broker
        .delete_records(&TopicPartition::new("t", 0), 1)
        .unwrap();
    client
        .send("t", "a", &json!({ "kind": "x", "n": 2 }))
        .await
        .unwrap();
    let report = next(&mut reports).await;
    client.shutdown().await;
    let [gone, second, third] = report.log.as_slice() else {
        panic!("the log holds three messages: {report:?}");
    };
    let (said, category) = gone.as_ref().expect_err("offset 0 was deleted");
    assert_eq!(*category, Category::Permanent, "{said}");
    assert!(
        said.contains("offset 0 of t/0 is no longer in the log"),
        "{said}"
    );
    let offsets: Vec<i64> = [second, third]
        .iter()
        .map(|read| read.as_ref().expect("kept").offset)
        .collect();
    assert_eq!(offsets, [1, 2]);
}
