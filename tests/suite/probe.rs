//! The probe server over real HTTP on a free local port, in mock mode with
//! a paused clock: `/readyz` follows the assignment, `/livez` follows a
//! handler that holds its partition past the stall threshold, and the
//! client's own methods agree with both.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::{
    ConsumerState, Context, EventHandler, Excise, HandlerError, MemoryBroker, Message,
    ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

use crate::support;

use support::http::fetch;

const DEADLINE: Duration = Duration::from_secs(600);

/// Reports each call's start and end; the key `stuck` waits until
/// released, attempt after attempt.
#[derive(Clone)]
struct Gate {
    released: Arc<AtomicBool>,
    release: Arc<Notify>,
    events: mpsc::UnboundedSender<(&'static str, String)>,
}

impl EventHandler for Gate {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        let key = message.key.to_string();
        let _ = self.events.send(("started", key.clone()));
        if key == "stuck" {
            loop {
                let released = self.release.notified();
                if self.released.load(Ordering::Acquire) {
                    break;
                }
                released.await;
            }
        }
        let _ = self.events.send(("handled", key));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The status code and body of `GET path`.
async fn get(address: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = fetch(address, path).await;
    (status, body)
}

async fn wait_for(
    events: &mut mpsc::UnboundedReceiver<(&'static str, String)>,
    what: &'static str,
    key: &str,
) {
    let seen = async {
        while let Some((event, seen)) = events.recv().await {
            if event == what && seen == key {
                return;
            }
        }
        panic!("the handler went away");
    };
    tokio::time::timeout(DEADLINE, seen)
        .await
        .unwrap_or_else(|_| panic!("{what} {key}"));
}

#[tokio::test(start_paused = true)]
async fn readyz_follows_assignment_and_livez_follows_a_stall() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let client = ProsodyClient::builder()
        .broker(broker)
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .probe_port(0)
        .stall_threshold(Duration::from_secs(10))
        // A failing attempt is retried in place, so it holds the partition.
        .defer_enabled(false)
        .build()
        .await
        .unwrap();
    let (events, mut seen) = mpsc::unbounded_channel();
    let gate = Gate {
        released: Arc::default(),
        release: Arc::default(),
        events,
    };
    assert!(
        client.probe_address().is_none(),
        "no server before subscribe"
    );
    client.subscribe(gate.clone()).await.unwrap();
    let address = client.probe_address().expect("the server runs");

    client.send("t", "warm", &json!({"n": 1})).await.unwrap();
    wait_for(&mut seen, "handled", "warm").await;
    assert_eq!(get(address, "/readyz").await.0, 200);
    assert_eq!(client.assigned_partition_count(), 1);
    assert_eq!(client.consumer_state(), ConsumerState::Running);
    assert_eq!(get(address, "/livez").await, (200, "live\n".to_owned()));

    // A handler holds the partition past the stall threshold (each attempt
    // times out and is retried, and no record settles).
    client.send("t", "stuck", &json!({"n": 2})).await.unwrap();
    wait_for(&mut seen, "started", "stuck").await;
    tokio::time::advance(Duration::from_secs(11)).await;
    let (status, body) = get(address, "/livez").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("t/0"), "{body}");
    assert!(client.is_stalled());

    gate.released.store(true, Ordering::Release);
    gate.release.notify_waiters();
    wait_for(&mut seen, "handled", "stuck").await;
    // The record settles once its handler returned: live again then.
    let live = async {
        while get(address, "/livez").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(DEADLINE, live)
        .await
        .expect("live again once the record settled");
    assert!(!client.is_stalled());

    client.unsubscribe().await.unwrap();
    assert_eq!(get(address, "/readyz").await.0, 503);
    assert_eq!(client.assigned_partition_count(), 0);
    assert_eq!(client.consumer_state(), ConsumerState::Configured);

    client.shutdown().await;
    // Under the paused clock, shutdown's bounded wait for the server's own
    // thread can end at once (the clock jumps to its deadline while the
    // runtime idles), and the thread closes the port just after: wait for
    // that, in real time, for at most five seconds.
    let local = SocketAddr::from(([127, 0, 0, 1], address.port()));
    let closing = std::time::Instant::now();
    while TcpStream::connect(local).await.is_ok() {
        assert!(
            closing.elapsed() < Duration::from_secs(5),
            "the port is still open 5 s after shutdown"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Mock mode serves probes only when `probe_port` is set: tests do not
/// take port 8000.
#[tokio::test]
async fn mock_mode_serves_no_probes_unless_asked() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let client = ProsodyClient::builder()
        .broker(broker)
        .group_id("svc")
        .subscribed_topics(["t"])
        .build()
        .await
        .unwrap();
    let (events, _seen) = mpsc::unbounded_channel();
    let gate = Gate {
        released: Arc::default(),
        release: Arc::default(),
        events,
    };
    client.subscribe(gate).await.unwrap();
    assert!(client.probe_address().is_none());
    client.shutdown().await;
}

/// `/metrics` is served beside the probes, from the instruments the OTLP
/// export reads too: a handled record shows in the consumed count and the
/// handler-call histogram, labelled with its group and partition, and the
/// whole page parses as Prometheus text.
#[cfg(feature = "otel")]
#[tokio::test]
async fn metrics_are_served_beside_the_probes() {
    use prosody::broker::{Broker as _, OutgoingRecord, Producer as _};
    let broker = MemoryBroker::new();
    broker.create_topic("metered", 1).unwrap();
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("metered-svc")
        .subscribed_topics(["metered"])
        .probe_port(0)
        .build()
        .await
        .unwrap();
    let (events, mut seen) = mpsc::unbounded_channel();
    let gate = Gate {
        released: Arc::default(),
        release: Arc::default(),
        events,
    };
    client.subscribe(gate).await.unwrap();
    // Sent by the client (a sent count), and by another service: the
    // client skips what it sent itself.
    client.send("metered", "own", &json!({})).await.unwrap();
    let producer = broker.producer().unwrap();
    let record = OutgoingRecord::new("metered", "k", b"{}".to_vec());
    producer.send(record, DEADLINE).await.unwrap();
    let handled = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some((what, _)) = seen.recv().await {
            if what == "handled" {
                return;
            }
        }
    });
    handled.await.expect("the record is handled");
    let address = client.probe_address().expect("the server runs");
    let series = r#"messaging_process_duration_seconds_count{messaging_consumer_group_name="metered-svc",messaging_destination_name="metered",messaging_destination_partition_id="0""#;
    // The call is recorded as it returns, just after the handler's signal.
    let page = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, content_type, body) = fetch(address, "/metrics").await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                content_type.as_deref(),
                Some("text/plain; version=0.0.4; charset=utf-8")
            );
            if body.contains(series) {
                return body;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the handler call is recorded");
    let exposition = openmetrics_parser::prometheus::parse_prometheus(&page)
        .unwrap_or_else(|e| panic!("{e:?} in\n{page}"));
    for family in [
        "target_info",
        "messaging_process_duration_seconds",
        "messaging_client_consumed_messages_total",
        "messaging_client_sent_messages_total",
        "prosody_partition_unsettled",
    ] {
        assert!(
            exposition.families.contains_key(family),
            "{family} in\n{page}"
        );
    }
    let consumed = page
        .lines()
        .find(|line| {
            line.starts_with("messaging_client_consumed_messages_total{")
                && line.contains(r#"messaging_consumer_group_name="metered-svc""#)
        })
        .expect("the consumed count");
    // Both records were received; the client's own was then skipped.
    assert!(consumed.ends_with(" 2"), "{consumed}");
    client.shutdown().await;
}
