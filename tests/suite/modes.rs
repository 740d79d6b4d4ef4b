//! The mode presets end to end, on the in-memory broker under a paused
//! clock.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::failure::{
    CATEGORY_HEADER, ERROR_HEADER, SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
};
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, Mode, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(3600);

/// Fails every message whose payload says so; counts the calls per key.
#[derive(Clone, Default)]
struct Scripted {
    calls: Arc<Mutex<Vec<String>>>,
}

impl EventHandler for Scripted {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        self.calls
            .lock()
            .expect("calls")
            .push(message.key.to_string());
        match message.payload.get("fail").and_then(Value::as_str) {
            Some("panic") => panic!("scripted panic"),
            Some("block") => {
                std::future::pending::<()>().await;
                Ok(())
            }
            Some("permanent") => Err(HandlerError::permanent("bad order")),
            Some("transient") => Err(HandlerError::transient("downstream busy")),
            _ => Ok(()),
        }
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn wait_committed(broker: &MemoryBroker, group: &str, tp: &TopicPartition) {
    let wait = async {
        while broker.committed_offset(group, tp) != broker.end_offset(tp) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("committed to the end");
}

#[tokio::test(start_paused = true)]
async fn low_latency_routes_a_failed_record_once_and_moves_on() {
    let broker = MemoryBroker::new();
    broker.create_topic("orders", 1).expect("topic");
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["orders"])
        .mode(Mode::LowLatency)
        .failure_topic("failures")
        .max_retries(2)
        .build()
        .await
        .expect("client");
    let handler = Scripted::default();
    client.subscribe(handler.clone()).await.expect("subscribe");
    let bad = json!({"id": "o-1", "fail": "permanent"});
    let busy = json!({"id": "o-2", "fail": "transient"});
    client.send("orders", "bad", &bad).await.expect("send");
    client.send("orders", "busy", &busy).await.expect("send");
    client
        .send("orders", "good", &json!({"id": "o-3"}))
        .await
        .expect("send");
    wait_committed(&broker, "svc", &TopicPartition::new("orders", 0)).await;
    client.shutdown().await;

    let calls = handler.calls.lock().expect("calls").clone();
    assert_eq!(
        calls.iter().filter(|k| *k == "bad").count(),
        1,
        "permanent: no retry"
    );
    assert_eq!(
        calls.iter().filter(|k| *k == "busy").count(),
        3,
        "transient: 1 + max_retries"
    );
    assert_eq!(calls.iter().filter(|k| *k == "good").count(), 1);

    let routed = broker.records("failures");
    assert_eq!(routed.len(), 2, "each failed record routed exactly once");
    let by_key = |key: &str| {
        routed
            .iter()
            .find(|r| r.key.as_deref() == Some(key.as_bytes()))
            .unwrap_or_else(|| panic!("{key} not routed"))
    };
    let record = by_key("bad");
    assert_eq!(record.payload.as_deref(), Some(bad.to_string().as_bytes()));
    assert_eq!(record.headers.get_str("source-system"), Some("upstream"));
    assert_eq!(record.headers.get_str(ERROR_HEADER), Some("bad order"));
    assert_eq!(record.headers.get_str(CATEGORY_HEADER), Some("permanent"));
    assert_eq!(record.headers.get_str(SOURCE_TOPIC_HEADER), Some("orders"));
    assert_eq!(record.headers.get_str(SOURCE_PARTITION_HEADER), Some("0"));
    assert_eq!(record.headers.get_str(SOURCE_OFFSET_HEADER), Some("0"));
    assert_eq!(
        by_key("busy").headers.get_str(CATEGORY_HEADER),
        Some("transient")
    );
}

#[tokio::test(start_paused = true)]
async fn low_latency_without_a_failure_topic_is_rejected_at_build() {
    let error = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .group_id("svc")
        .mode(Mode::LowLatency)
        .build()
        .await
        .expect_err("rejected");
    assert!(error.to_string().contains("failure_topic"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn pipeline_handles_a_duplicate_id_once_and_best_effort_drops_failures() {
    for mode in [Mode::Pipeline, Mode::BestEffort] {
        let broker = MemoryBroker::new();
        broker.create_topic("t", 1).expect("topic");
        let client = ProsodyClient::builder()
            .broker(broker.clone())
            .group_id("svc")
            .source_system("upstream")
            .subscribed_topics(["t"])
            .mode(mode)
            .build()
            .await
            .expect("client");
        let handler = Scripted::default();
        client.subscribe(handler.clone()).await.expect("subscribe");
        client
            .send("t", "k", &json!({"id": "same"}))
            .await
            .expect("send");
        client
            .send("t", "k", &json!({"id": "same"}))
            .await
            .expect("send");
        client
            .send("t", "f", &json!({"id": "x", "fail": "permanent"}))
            .await
            .expect("send");
        wait_committed(&broker, "svc", &TopicPartition::new("t", 0)).await;
        client.shutdown().await;
        let calls = handler.calls.lock().expect("calls").clone();
        assert_eq!(
            calls,
            ["k", "f"],
            "{mode:?}: the duplicate was handled again"
        );
    }
}

async fn client(broker: &MemoryBroker, mode: Mode) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .mode(mode)
        .failure_topic("failures")
        .max_concurrency(1)
        .shutdown_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("client")
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_was_dropped_does_not_mark_its_id_handled() {
    for mode in [Mode::BestEffort, Mode::LowLatency] {
        let broker = MemoryBroker::new();
        broker.create_topic("t", 1).expect("topic");
        let client = client(&broker, mode).await;
        let handler = Scripted::default();
        client.subscribe(handler.clone()).await.expect("subscribe");
        client
            .send("t", "k", &json!({"id": "x", "fail": "permanent"}))
            .await
            .expect("send");
        client
            .send("t", "k", &json!({"id": "x"}))
            .await
            .expect("send");
        wait_committed(&broker, "svc", &TopicPartition::new("t", 0)).await;
        client.shutdown().await;
        let calls = handler.calls.lock().expect("calls").len();
        assert_eq!(
            calls, 2,
            "{mode:?}: the retry of a dropped id was skipped as a duplicate"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_fails_like_any_error() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = client(&broker, Mode::BestEffort).await;
    let handler = Scripted::default();
    client.subscribe(handler.clone()).await.expect("subscribe");
    client
        .send("t", "boom", &json!({"fail": "panic"}))
        .await
        .expect("send");
    client.send("t", "fine", &json!({})).await.expect("send");
    wait_committed(&broker, "svc", &TopicPartition::new("t", 0)).await;
    client.shutdown().await;
    assert_eq!(*handler.calls.lock().expect("calls"), ["boom", "fine"]);
}

#[tokio::test(start_paused = true)]
async fn calls_turned_away_by_a_shutdown_are_neither_dropped_nor_routed() {
    use prosody::broker::partition_for_key;
    let stuck = "stuck";
    let stuck_partition = partition_for_key(stuck.as_bytes(), 2);
    // Keys of the other partition: their calls wait for the one permit.
    let waiting: Vec<String> = (0..)
        .map(|n| format!("waiting-{n}"))
        .filter(|key| partition_for_key(key.as_bytes(), 2) != stuck_partition)
        .take(5)
        .collect();
    let other = TopicPartition::new("t", 1 - stuck_partition);
    for mode in [Mode::BestEffort, Mode::LowLatency] {
        let broker = MemoryBroker::new();
        broker.create_topic("t", 2).expect("topic");
        let client = client(&broker, mode).await;
        let handler = Scripted::default();
        client.subscribe(handler.clone()).await.expect("subscribe");
        client
            .send("t", stuck, &json!({"fail": "block"}))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_secs(1)).await;
        for key in &waiting {
            client.send("t", key, &json!({})).await.expect("send");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        client.shutdown().await;
        assert_eq!(*handler.calls.lock().expect("calls"), [stuck], "{mode:?}");
        let committed = broker.committed_offset("svc", &other).unwrap_or(0);
        assert_eq!(committed, 0, "{mode:?}: committed calls that never ran");
        assert!(
            broker.records("failures").is_empty(),
            "{mode:?}: routed calls that never ran"
        );
    }
}

/// A record that does not decode (a payload that is not JSON, a key that is
/// not UTF-8) never reaches the handler and takes the mode's path for a
/// permanent failure: low-latency routes it to the failure topic once, as
/// it arrived, with the error headers; pipeline and best-effort log it.
/// Either way the partition moves on to the next record of the key.
#[tokio::test(start_paused = true)]
async fn an_undecodable_record_takes_the_failure_path_of_its_mode() {
    for mode in [Mode::LowLatency, Mode::Pipeline, Mode::BestEffort] {
        let broker = MemoryBroker::new();
        broker.create_topic("t", 1).expect("topic");
        let client = client(&broker, mode).await;
        let handler = Scripted::default();
        client.subscribe(handler.clone()).await.expect("subscribe");
        let producer = broker.producer().expect("producer");
        let mut not_json = OutgoingRecord::new("t", "k", "this is not json");
        not_json.headers.push("origin", "test");
        let bad_key = OutgoingRecord::new("t", vec![0xFF, b'k'], "{}");
        for record in [not_json.clone(), bad_key.clone()] {
            producer
                .send(record, Duration::from_secs(1))
                .await
                .expect("send");
        }
        client.send("t", "k", &json!({})).await.expect("send");
        wait_committed(&broker, "svc", &TopicPartition::new("t", 0)).await;
        client.shutdown().await;
        assert_eq!(
            *handler.calls.lock().expect("calls"),
            ["k"],
            "{mode:?}: only the good record reaches the handler"
        );
        let routed = broker.records("failures");
        if mode != Mode::LowLatency {
            assert!(routed.is_empty(), "{mode:?} routed {routed:?}");
            continue;
        }
        assert_eq!(routed.len(), 2, "each routed exactly once: {routed:?}");
        for (record, sent, offset, error) in [
            (&routed[0], &not_json, "0", "the payload does not decode"),
            (&routed[1], &bad_key, "1", "the record key is not UTF-8"),
        ] {
            assert_eq!(record.key, sent.key, "the original key bytes");
            assert_eq!(record.payload, sent.payload, "the original payload bytes");
            let headers = &record.headers;
            for (name, value) in sent.headers.iter() {
                assert_eq!(headers.get(name), Some(value), "the original headers");
            }
            assert_eq!(headers.get_str(CATEGORY_HEADER), Some("permanent"));
            assert!(
                headers
                    .get_str(ERROR_HEADER)
                    .is_some_and(|e| e.contains(error)),
                "{headers:?}"
            );
            assert_eq!(headers.get_str(SOURCE_TOPIC_HEADER), Some("t"));
            assert_eq!(headers.get_str(SOURCE_OFFSET_HEADER), Some(offset));
        }
    }
}

/// A codec that panics on a payload fails the record permanently, as one
/// that does not decode, rather than unwinding through the stack.
#[tokio::test(start_paused = true)]
async fn a_codec_that_panics_fails_the_record_as_undecodable() {
    #[derive(Clone)]
    struct Fragile;

    impl prosody::Codec for Fragile {
        type Value = Value;

        fn decode(&self, bytes: &[u8]) -> Result<Value, prosody::CodecError> {
            assert!(bytes != b"boom", "the codec broke");
            serde_json::from_slice(bytes).map_err(prosody::CodecError::new)
        }

        fn encode(&self, value: &Value) -> Result<Vec<u8>, prosody::CodecError> {
            serde_json::to_vec(value).map_err(prosody::CodecError::new)
        }
    }

    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let client = ProsodyClient::builder()
        .codec(Fragile)
        .broker(broker.clone())
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .mode(Mode::LowLatency)
        .failure_topic("failures")
        .build()
        .await
        .expect("client");
    let handler = Scripted::default();
    client.subscribe(handler.clone()).await.expect("subscribe");
    let producer = broker.producer().expect("producer");
    let boom = OutgoingRecord::new("t", "k", "boom");
    producer
        .send(boom, Duration::from_secs(1))
        .await
        .expect("send");
    client.send("t", "k", &json!({})).await.expect("send");
    wait_committed(&broker, "svc", &TopicPartition::new("t", 0)).await;
    client.shutdown().await;
    assert_eq!(*handler.calls.lock().expect("calls"), ["k"]);
    let routed = broker.records("failures");
    assert_eq!(routed.len(), 1, "{routed:?}");
    assert_eq!(routed[0].payload.as_deref(), Some(&b"boom"[..]));
    let error = routed[0].headers.get_str(ERROR_HEADER);
    assert!(
        error.is_some_and(|e| e.contains("codec panicked")),
        "{error:?}"
    );
}
