//! Requests to named subsystems in mock mode: two answering members of two
//! subsystems and a requester that subscribes to nothing, on one in-memory
//! broker, under a paused clock.

#![allow(clippy::expect_used, reason = "test helpers fail the test")]

use proptest::prelude::*;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, Mode, Outcome,
    ProsodyClient, ResponseError, Timer,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(5);
/// Longer than a deferred record's two retries take.
const DEFERRED: Duration = Duration::from_secs(60);
const TOPIC: &str = "orders";

/// Answers `{"by": subsystem, "key": key}`; fails permanently for the key
/// `refuse`, transiently twice for `flaky`; answers an excise with
/// `{"excised": key}`.
struct Answering {
    subsystem: &'static str,
    flaky: AtomicU32,
}

impl EventHandler for Answering {
    type Payload = Value;
    type Output = Value;

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<Value, HandlerError> {
        match &*message.key {
            "refuse" => Err(HandlerError::permanent("orders for refuse are refused")),
            "flaky" if self.flaky.fetch_add(1, Ordering::Relaxed) < 2 => {
                Err(HandlerError::transient("not yet"))
            }
            key => Ok(json!({ "by": self.subsystem, "key": key })),
        }
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, excise: Excise) -> Result<Value, HandlerError> {
        Ok(json!({ "excised": &*excise.key }))
    }
}

async fn answering(broker: &MemoryBroker, subsystem: &'static str) -> ProsodyClient {
    answering_in(broker, subsystem, Mode::Pipeline).await
}

async fn answering_in(broker: &MemoryBroker, subsystem: &'static str, mode: Mode) -> ProsodyClient {
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id(subsystem)
        .subsystem(subsystem)
        .mode(mode)
        .failure_topic("failed")
        .subscribed_topics([TOPIC])
        .build()
        .await
        .expect("answering client");
    client
        .subscribe(Answering {
            subsystem,
            flaky: AtomicU32::new(0),
        })
        .await
        .expect("subscribe");
    client
}

async fn requester(broker: &MemoryBroker) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("caller")
        .build()
        .await
        .expect("requester")
}

/// The members of both subsystems and a requester.
async fn system() -> (ProsodyClient, [ProsodyClient; 2]) {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 4).expect("topic");
    let members = [
        answering(&broker, "billing").await,
        answering(&broker, "inventory").await,
    ];
    (requester(&broker).await, members)
}

fn answer(by: &str, key: &str) -> Outcome<Value> {
    Outcome::Success(json!({ "by": by, "key": key }))
}

#[tokio::test(start_paused = true)]
async fn each_subsystem_answers_once_with_its_handlers_result() {
    let (client, _members) = system().await;
    let outcomes = client
        .request::<Value>(
            TOPIC,
            "order-1",
            &json!({}),
            &["billing", "inventory", "billing"],
            TIMEOUT,
        )
        .await
        .expect("request");
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert_eq!(outcomes["billing"], answer("billing", "order-1"));
    assert_eq!(outcomes["inventory"], answer("inventory", "order-1"));

    // A permanent failure carries the handler's message.
    let outcomes = client
        .request::<Value>(TOPIC, "refuse", &json!({}), &["billing"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(
        outcomes["billing"],
        Outcome::Failure(ResponseError::HandlerFailed {
            message: "orders for refuse are refused".into()
        })
    );

    // A transient failure in pipeline mode defers the record: it is
    // answered when its backlog retries it for good (here after two
    // failures), if its caller still waits.
    let outcomes = client
        .request::<Value>(TOPIC, "flaky", &json!({}), &["inventory"], DEFERRED)
        .await
        .expect("request");
    assert_eq!(outcomes["inventory"], answer("inventory", "flaky"));

    // A subsystem nobody answers as is a timeout, never a missing entry.
    let outcomes = client
        .request::<Value>(
            TOPIC,
            "order-2",
            &json!({}),
            &["shipping", "billing"],
            TIMEOUT,
        )
        .await
        .expect("request");
    assert_eq!(
        outcomes["shipping"],
        Outcome::Failure(ResponseError::Timeout)
    );
    assert_eq!(outcomes["billing"], answer("billing", "order-2"));

    // An answer of another shape than asked for.
    let outcomes = client
        .request::<u32>(TOPIC, "order-3", &json!({}), &["billing"], TIMEOUT)
        .await
        .expect("request");
    assert!(matches!(
        outcomes["billing"],
        Outcome::Failure(ResponseError::FormatMismatch { .. })
    ));

    // An excise request is answered by `on_excise`.
    let outcomes = client
        .request_excise::<Value>(TOPIC, "order-4", &["inventory"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(
        outcomes["inventory"],
        Outcome::Success(json!({ "excised": "order-4" }))
    );
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_skipped_by_dedup_is_not_answered() {
    let (client, _members) = system().await;
    let payload = json!({ "id": "payment-7" });
    let first = client
        .request::<Value>(TOPIC, "order-9", &payload, &["billing"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(first["billing"], answer("billing", "order-9"));
    let again = client
        .request::<Value>(TOPIC, "order-9", &payload, &["billing"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(again["billing"], Outcome::Failure(ResponseError::Timeout));
}

/// A failure a stage settles (dropped in best-effort mode, routed to the
/// failure topic in low-latency mode) is answered as a failure carrying
/// the handler's message, as a permanent failure is in pipeline mode.
#[tokio::test(start_paused = true)]
async fn a_dropped_or_routed_failure_is_answered_with_its_message() {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 2).expect("topic");
    broker.create_topic("failed", 1).expect("topic");
    let _members = [
        answering_in(&broker, "audit", Mode::BestEffort).await,
        answering_in(&broker, "ledger", Mode::LowLatency).await,
    ];
    let client = requester(&broker).await;
    let failed = |message: &str| {
        Outcome::<Value>::Failure(ResponseError::HandlerFailed {
            message: message.into(),
        })
    };
    let outcomes = client
        .request::<Value>(TOPIC, "flaky", &json!({}), &["audit"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(outcomes["audit"], failed("not yet"));
    let outcomes = client
        .request::<Value>(TOPIC, "refuse", &json!({}), &["audit", "ledger"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(outcomes["audit"], failed("orders for refuse are refused"));
    assert_eq!(outcomes["ledger"], failed("orders for refuse are refused"));
    let outcomes = client
        .request::<Value>(TOPIC, "order-5", &json!({}), &["audit", "ledger"], TIMEOUT)
        .await
        .expect("request");
    assert_eq!(outcomes["audit"], answer("audit", "order-5"));
    assert_eq!(outcomes["ledger"], answer("ledger", "order-5"));
}

#[tokio::test(start_paused = true)]
async fn invalid_requests_fail_the_call() {
    let (client, _members) = system().await;
    let none: [&str; 0] = [];
    for (subsystems, timeout) in [
        (vec!["billing"], Duration::ZERO),
        (vec!["bad name"], TIMEOUT),
        (none.to_vec(), TIMEOUT),
    ] {
        let result = client
            .request::<Value>(TOPIC, "k", &json!({}), &subsystems, timeout)
            .await;
        assert!(
            matches!(result, Err(prosody::ClientError::InvalidRequest(_))),
            "{result:?}"
        );
    }
    client.shutdown().await;
    let result = client
        .request::<Value>(TOPIC, "k", &json!({}), &["billing"], TIMEOUT)
        .await;
    assert!(
        matches!(result, Err(prosody::ClientError::ShutDown)),
        "{result:?}"
    );
}

fn subsystem() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("billing"), Just("inventory"), Just("shipping")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Invariant 9 over generated requests (keys repeating, subsystems
    /// named twice or by nobody, failing keys, requests in flight at once):
    /// each request gets exactly one outcome per distinct subsystem it
    /// names, its handler's answer from a subsystem that has a member, a
    /// timeout from one that has none.
    #[test]
    fn every_named_subsystem_gets_exactly_one_outcome(
        requests in proptest::collection::vec(
            (prop_oneof![Just("a"), Just("b"), Just("refuse")],
             proptest::collection::vec(subsystem(), 1..4)),
            1..6,
        )
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (client, _members) = system().await;
            let client = Arc::new(client);
            let calls = requests.iter().map(|(key, names)| {
                let client = Arc::clone(&client);
                async move {
                    client
                        .request::<Value>(TOPIC, *key, &json!({}), names, TIMEOUT)
                        .await
                }
            });
            let results = futures_util::future::join_all(calls).await;
            for ((key, names), result) in requests.iter().zip(results) {
                let outcomes = result.expect("request");
                let named: BTreeSet<&str> = names.iter().copied().collect();
                let got: BTreeSet<&str> = outcomes.keys().map(String::as_str).collect();
                assert_eq!(got, named, "one entry per distinct subsystem");
                for (name, outcome) in &outcomes {
                    match (name.as_str(), *key) {
                        ("shipping", _) => {
                            assert_eq!(outcome, &Outcome::Failure(ResponseError::Timeout));
                        }
                        (_, "refuse") => assert!(
                            matches!(outcome, Outcome::Failure(ResponseError::HandlerFailed { .. })),
                            "{outcome:?}"
                        ),
                        (by, key) => assert_eq!(outcome, &answer(by, key)),
                    }
                }
            }
        });
    }
}

/// Each subsystem's outcome is counted, under the subsystem's name and
/// the outcome, and its round trip measured, in the requester's metrics.
#[cfg(feature = "otel")]
#[tokio::test]
async fn request_outcomes_are_counted_per_subsystem() {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 4).expect("topic");
    let _billing = answering(&broker, "billing").await;
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("metered-caller")
        .subscribed_topics([TOPIC])
        .probe_port(0)
        .build()
        .await
        .expect("requester");
    let wait = Duration::from_millis(300);
    let outcomes = client
        .request::<Value>(TOPIC, "order-9", &json!({}), &["billing", "shipping"], wait)
        .await
        .expect("request");
    assert!(outcomes["billing"].is_success(), "{outcomes:?}");
    // The probe server starts with the first subscription.
    let idle = Answering {
        subsystem: "caller",
        flaky: AtomicU32::new(0),
    };
    client.subscribe(idle).await.expect("subscribe");
    let (_, _, page) =
        crate::support::http::fetch(client.probe_address().expect("probe"), "/metrics").await;
    let count = |subsystem: &str, outcome: &str| {
        page.lines()
            .find(|line| {
                line.starts_with("prosody_request_outcomes_total{")
                    && line.contains(r#"messaging_consumer_group_name="metered-caller""#)
                    && line.contains(&format!(r#"prosody_subsystem="{subsystem}""#))
                    && line.contains(&format!(r#"prosody_outcome="{outcome}""#))
            })
            .map(|line| line.rsplit(' ').next().unwrap_or_default().to_owned())
    };
    assert_eq!(count("billing", "success").as_deref(), Some("1"), "{page}");
    assert_eq!(count("shipping", "timeout").as_deref(), Some("1"), "{page}");
    assert!(
        page.contains("prosody_request_duration_seconds_count{"),
        "{page}"
    );
    client.shutdown().await;
}
