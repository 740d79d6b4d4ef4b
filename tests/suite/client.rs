//! The client facade on the in-memory broker under a paused clock: its
//! lifecycle, filters, bad input, error categories and shutdown.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::{
    ClientError, ConsumerState, Context, EventHandler, Excise, HandlerError, MemoryBroker, Message,
    ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

const DEADLINE: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Message(String, Value),
    Excise(String),
    Cancelled(String),
    Abandoned(String),
}

/// Reports when the handler future holding it is dropped unfinished.
struct OnDrop(Option<(mpsc::UnboundedSender<Seen>, String)>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some((seen, key)) = self.0.take() {
            let _ = seen.send(Seen::Abandoned(key));
        }
    }
}

/// Reports every call; a payload's `action` field scripts the outcome.
#[derive(Clone)]
struct Recorder {
    seen: mpsc::UnboundedSender<Seen>,
}

impl EventHandler for Recorder {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let key = message.key.to_string();
        match message.payload.get("action").and_then(Value::as_str) {
            Some("permanent") => return Err(HandlerError::permanent("scripted")),
            Some("terminal") => return Err(HandlerError::terminal("scripted")),
            Some("ignore-cancel") => {
                let _guard = OnDrop(Some((self.seen.clone(), key.clone())));
                std::future::pending::<()>().await;
            }
            Some("block") => {
                context.on_cancel().await;
                let _ = self.seen.send(Seen::Cancelled(key));
                return Err(HandlerError::transient("cancelled"));
            }
            _ => {}
        }
        let _ = self.seen.send(Seen::Message(key, message.payload));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, excise: Excise) -> Result<(), HandlerError> {
        let _ = self.seen.send(Seen::Excise(excise.key.to_string()));
        Ok(())
    }
}

fn recorder() -> (Recorder, mpsc::UnboundedReceiver<Seen>) {
    let (seen, rx) = mpsc::unbounded_channel();
    (Recorder { seen }, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("deadline")
        .expect("handler alive")
}

async fn client(broker: &MemoryBroker, topics: &[&str]) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(topics.iter().copied())
        .build()
        .await
        .expect("client")
}

async fn committed_to_end(broker: &MemoryBroker, topic: &str, partitions: i32) {
    let wait = async {
        loop {
            let all = (0..partitions).all(|p| {
                let tp = TopicPartition::new(topic, p);
                broker.committed_offset("svc", &tp).unwrap_or(0)
                    == broker.end_offset(&tp).unwrap_or(0)
            });
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("committed to the end");
}

#[tokio::test(start_paused = true)]
async fn lifecycle_subscribe_unsubscribe_shutdown() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 4).expect("topic");
    let client = client(&broker, &["t"]).await;
    assert_eq!(client.consumer_state(), ConsumerState::Configured);
    assert_eq!(client.source_system(), "svc-test");

    let (handler, mut seen) = recorder();
    client.subscribe(handler.clone()).await.expect("subscribe");
    assert_eq!(client.consumer_state(), ConsumerState::Running);
    assert!(matches!(
        client.subscribe(handler.clone()).await,
        Err(ClientError::AlreadySubscribed)
    ));

    client.send("t", "a", &json!({"n": 1})).await.expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("a".into(), json!({"n": 1}))
    );
    assert_eq!(client.assigned_partition_count(), 4);

    client.unsubscribe().await.expect("unsubscribe");
    assert_eq!(client.consumer_state(), ConsumerState::Configured);
    assert_eq!(client.assigned_partition_count(), 0);

    client.subscribe(handler).await.expect("subscribe again");
    client.send("t", "b", &json!({"n": 2})).await.expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("b".into(), json!({"n": 2}))
    );

    tokio::join!(client.shutdown(), client.shutdown());
    client.shutdown().await;
    assert_eq!(client.consumer_state(), ConsumerState::Configured);
    assert!(matches!(
        client.send("t", "c", &json!({})).await,
        Err(ClientError::ShutDown)
    ));
    assert!(matches!(
        client.excise("t", "c").await,
        Err(ClientError::ShutDown)
    ));
    assert!(matches!(
        client.unsubscribe().await,
        Err(ClientError::ShutDown)
    ));
    let (handler, _seen) = recorder();
    assert!(matches!(
        client.subscribe(handler).await,
        Err(ClientError::ShutDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_producer_only_client_is_unconfigured_and_cannot_subscribe() {
    let broker = MemoryBroker::new();
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .build()
        .await
        .expect("client");
    assert_eq!(client.consumer_state(), ConsumerState::Unconfigured);
    let (handler, _seen) = recorder();
    assert!(matches!(
        client.subscribe(handler).await,
        Err(ClientError::NotConfigured)
    ));
    client
        .send("anywhere", "k", &json!({}))
        .await
        .expect("send auto-creates the topic");
    let record = broker
        .read(
            &TopicPartition::new("anywhere", prosody::broker::partition_for_key(b"k", 4)),
            0,
        )
        .await;
    let record = record.expect("read").expect("record");
    assert_eq!(record.headers.get_str("source-system"), Some("svc"));
}

#[tokio::test(start_paused = true)]
async fn own_records_are_skipped_and_allowed_events_filter_by_type_prefix() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .subscribed_topics(["t"])
        .allowed_events(["user."])
        .build()
        .await
        .expect("client");
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    // Sent by this client: its source-system is the group id, so skipped.
    client
        .send("t", "own", &json!({"type": "user.created"}))
        .await
        .expect("send");
    let producer = broker.producer().expect("producer");
    let other =
        |key: &str, payload: Value| OutgoingRecord::new("t", key.to_owned(), payload.to_string());
    for record in [
        other("skipped", json!({"type": "order.created"})),
        other("untyped", json!({"n": 1})),
        other("typed", json!({"type": "user.deleted"})),
    ] {
        producer
            .send(record, Duration::from_secs(1))
            .await
            .expect("send");
    }
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("untyped".into(), json!({"n": 1}))
    );
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("typed".into(), json!({"type": "user.deleted"}))
    );
    committed_to_end(&broker, "t", 1).await;
    client.shutdown().await;
    assert!(
        seen.try_recv().is_err(),
        "a skipped record reached the handler"
    );
}

#[tokio::test(start_paused = true)]
async fn bad_payloads_and_permanent_errors_settle_and_excise_reaches_on_excise() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = client(&broker, &["t"]).await;
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    let producer = broker.producer().expect("producer");
    producer
        .send(
            OutgoingRecord::new("t", "k", "{not json"),
            Duration::from_secs(1),
        )
        .await
        .expect("send");
    let mut bad_key = OutgoingRecord::new("t", vec![0xff, 0xfe], "{}");
    bad_key.partition = Some(0);
    producer
        .send(bad_key, Duration::from_secs(1))
        .await
        .expect("send");
    client
        .send("t", "k", &json!({"action": "permanent"}))
        .await
        .expect("send");
    client.excise("t", "k").await.expect("excise");
    client.send("t", "k", &json!({"n": 2})).await.expect("send");
    assert_eq!(next(&mut seen).await, Seen::Excise("k".into()));
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("k".into(), json!({"n": 2}))
    );
    committed_to_end(&broker, "t", 1).await;
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_terminal_error_stops_its_partition_short_of_the_failed_record() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = client(&broker, &["t"]).await;
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    client.send("t", "k", &json!({"n": 1})).await.expect("send");
    client
        .send("t", "k", &json!({"action": "terminal"}))
        .await
        .expect("send");
    client.send("t", "k", &json!({"n": 3})).await.expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("k".into(), json!({"n": 1}))
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Another key of the same partition, sent after the terminal error.
    client
        .send("t", "other", &json!({"n": 4}))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Liveness names the partition as halted, not as stalled.
    let t0 = TopicPartition::new("t", 0);
    assert_eq!(client.halted_partitions(), [t0]);
    assert!(client.stalled_partitions().is_empty());
    assert_eq!(
        client.liveness_problems(),
        ["partition t/0 halted: terminal error: scripted"]
    );
    client.shutdown().await;
    assert!(
        seen.try_recv().is_err(),
        "a record after the terminal error was handled"
    );
    let committed = broker.committed_offset("svc", &TopicPartition::new("t", 0));
    assert_eq!(committed, Some(1), "committed past the terminal record");
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_blocked_handlers_near_the_deadline_and_commits_settled_work() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(["t"])
        .shutdown_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("client");
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    client
        .send("t", "done", &json!({"n": 1}))
        .await
        .expect("send");
    client
        .send("t", "stuck", &json!({"action": "block"}))
        .await
        .expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("done".into(), json!({"n": 1}))
    );
    let started = tokio::time::Instant::now();
    client.shutdown().await;
    let took = started.elapsed();
    assert_eq!(next(&mut seen).await, Seen::Cancelled("stuck".into()));
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let committed = broker.committed_offset("svc", &TopicPartition::new("t", 0));
    assert_eq!(
        committed,
        Some(1),
        "the settled record is committed, the cancelled one is not"
    );
}

async fn blocking_client(broker: &MemoryBroker) -> ProsodyClient {
    broker.create_topic("t", 1).expect("topic");
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(["t"])
        .shutdown_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("client")
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_unsubscribe_waits_for_the_same_drain() {
    let broker = MemoryBroker::new();
    let client = blocking_client(&broker).await;
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    client
        .send("t", "stuck", &json!({"action": "block"}))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = tokio::time::Instant::now();
    let shutdown_done = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        client.shutdown().await;
        started.elapsed()
    };
    let (unsubscribed, shutdown_took) = tokio::join!(client.unsubscribe(), shutdown_done);
    unsubscribed.expect("unsubscribe");
    assert!(
        shutdown_took >= Duration::from_secs(9),
        "shutdown returned mid-drain after {shutdown_took:?}"
    );
    assert_eq!(seen.try_recv().ok(), Some(Seen::Cancelled("stuck".into())));
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_cancellation_is_abandoned_at_the_deadline_and_not_committed() {
    let broker = MemoryBroker::new();
    let client = blocking_client(&broker).await;
    let (handler, mut seen) = recorder();
    client.subscribe(handler).await.expect("subscribe");
    client.send("t", "a", &json!({"n": 1})).await.expect("send");
    client
        .send("t", "stuck", &json!({"action": "ignore-cancel"}))
        .await
        .expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("a".into(), json!({"n": 1}))
    );
    let started = tokio::time::Instant::now();
    client.shutdown().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(10),
        "returned after {took:?}, before the deadline"
    );
    assert_eq!(
        seen.try_recv().ok(),
        Some(Seen::Abandoned("stuck".into())),
        "handler still running"
    );
    let committed = broker.committed_offset("svc", &TopicPartition::new("t", 0));
    assert_eq!(committed, Some(1));
}
