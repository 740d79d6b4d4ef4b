//! The deferred backlog as an operator sees it, in mock mode with a paused
//! clock: records of two keys that fail transiently are deferred, and the
//! `prosody.defer.keys` and `prosody.defer.records` gauges, the client's
//! `deferred_counts()` and the `/readyz` body all show two keys and every
//! deferred record; once the handler recovers and the retries succeed,
//! all three show zero.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::TopicPartition;
use prosody::store::DeferCounts;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support;

use support::http::fetch;

const DEADLINE: Duration = Duration::from_secs(600);

/// How often the views are read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Fails every record of the keys `a` and `b` until healed; counts the
/// records handled.
#[derive(Clone, Default)]
struct Flaky {
    healed: Arc<AtomicBool>,
    handled: Arc<AtomicUsize>,
}

impl EventHandler for Flaky {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        let failing = ["a", "b"].contains(&message.key.to_string().as_str());
        if failing && !self.healed.load(Ordering::Acquire) {
            return Err(HandlerError::transient("the downstream is away"));
        }
        self.handled.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The value of `family`'s series for partition `t/0` on `/metrics`, if
/// it has one.
async fn gauge(address: SocketAddr, family: &str) -> Option<f64> {
    let (status, _, page) = fetch(address, "/metrics").await;
    assert_eq!(status, 200, "{page}");
    page.lines()
        .filter(|line| line.starts_with(&format!("{family}{{")))
        .filter(|line| line.contains(r#"messaging_consumer_group_name="backlog-svc""#))
        .find(|line| line.contains(r#"messaging_destination_partition_id="0""#))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// What the three views show of partition `t/0`: the client's counts, the
/// two gauges, and the `/readyz` status and body.
async fn views(
    client: &ProsodyClient,
    address: SocketAddr,
) -> (DeferCounts, f64, f64, u16, String) {
    let unseen = DeferCounts {
        keys: u64::MAX,
        records: u64::MAX,
    };
    let counts = client
        .deferred_counts()
        .into_iter()
        .find(|(partition, _)| *partition == TopicPartition::new("t", 0))
        .map_or(unseen, |(_, counts)| counts);
    let keys = gauge(address, "prosody_defer_keys").await.unwrap_or(-1.0);
    let records = gauge(address, "prosody_defer_records")
        .await
        .unwrap_or(-1.0);
    let (status, _, body) = fetch(address, "/readyz").await;
    (counts, keys, records, status, body)
}

/// Waits (within [`DEADLINE`] of the paused clock) until every view shows
/// `keys` and `records`.
async fn until_all_show(client: &ProsodyClient, address: SocketAddr, keys: u64, records: u64) {
    let line = format!("t/0: {keys} deferred keys, {records} deferred records");
    let expected = DeferCounts { keys, records };
    #[allow(clippy::cast_precision_loss, reason = "small counts")]
    let (k, r) = (keys as f64, records as f64);
    // The deadline counts polls of the paused clock, not a timeout: the
    // views are read over real sockets, and a paused clock would jump to
    // a timeout's end while the runtime waits on them.
    let polls = DEADLINE.as_millis() / POLL.as_millis();
    let mut last = None;
    for _ in 0..polls {
        let seen = views(client, address).await;
        let (counts, gauge_keys, gauge_records, status, body) = &seen;
        if *counts == expected
            && (*gauge_keys - k).abs() < f64::EPSILON
            && (*gauge_records - r).abs() < f64::EPSILON
            && *status == 200
            && body.lines().any(|shown| shown == line)
        {
            return;
        }
        last = Some(seen);
        tokio::time::sleep(POLL).await;
    }
    panic!(
        "never {keys} keys and {records} records within {DEADLINE:?}; last seen \
         (client, keys gauge, records gauge, /readyz status and body): {last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn deferred_keys_and_records_show_in_the_gauges_the_client_and_readyz() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let client = ProsodyClient::builder()
        .broker(broker)
        .group_id("backlog-svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .probe_port(0)
        .build()
        .await
        .unwrap();
    let handler = Flaky::default();
    client.subscribe(handler.clone()).await.unwrap();
    let address = client.probe_address().expect("the server runs");

    // Nothing deferred yet: zero, once the partition's stores opened.
    client.send("t", "warm", &json!({})).await.unwrap();
    until_all_show(&client, address, 0, 0).await;

    // Three records of `a` and two of `b` fail: the first of each is
    // deferred after its failure, the others behind it.
    for key in ["a", "b", "a", "b", "a"] {
        client.send("t", key, &json!({})).await.unwrap();
    }
    until_all_show(&client, address, 2, 5).await;
    assert_eq!(handler.handled.load(Ordering::Acquire), 1, "only warm ran");

    // The handler recovers: the retries drain both keys.
    handler.healed.store(true, Ordering::Release);
    until_all_show(&client, address, 0, 0).await;
    assert_eq!(handler.handled.load(Ordering::Acquire), 6);

    client.shutdown().await;
}
