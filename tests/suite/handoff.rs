//! A graceful hand-off on the in-memory broker, under a paused clock: a
//! member that unsubscribes finishes the records it already holds (within
//! 90% of its shutdown budget) and commits them, so the partition's next
//! owner handles none of them again; what it cannot finish in time, or what
//! fails meanwhile, it leaves (with the later records of its key) to the
//! next owner, which handles it in key order.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient, Timer,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<(u32, i64)>>>;

/// Takes a second per record; logs (member, offset) of each success. A
/// payload `{"fail": true}` fails its first attempt transiently.
#[derive(Clone)]
struct Slow {
    member: u32,
    log: Log,
}

impl EventHandler for Slow {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if message.payload["fail"] == true && context.attempt() == 1 {
            return Err(HandlerError::transient("first attempt fails"));
        }
        self.log.lock().unwrap().push((self.member, message.offset));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn member(broker: &MemoryBroker, id: u32, log: &Log) -> ProsodyClient {
    member_with(broker, id, log, Duration::from_secs(30)).await
}

async fn member_with(
    broker: &MemoryBroker,
    id: u32,
    log: &Log,
    shutdown_timeout: Duration,
) -> ProsodyClient {
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .subscribed_topics(["t"])
        .max_concurrency(1)
        .shutdown_timeout(shutdown_timeout)
        .build()
        .await
        .unwrap();
    let handler = Slow {
        member: id,
        log: Arc::clone(log),
    };
    client.subscribe(handler).await.unwrap();
    client
}

/// Produces `payloads` on partition 0 of topic `t`, the key of each its own
/// unless `key` names one for all.
async fn produce(broker: &MemoryBroker, key: Option<&str>, payloads: &[&str]) {
    let producer = broker.producer().unwrap();
    for (n, payload) in payloads.iter().enumerate() {
        let key = key.map_or_else(|| format!("key-{n}"), str::to_owned);
        let record = OutgoingRecord::new("t", key, (*payload).to_owned());
        producer.send(record, Duration::from_secs(1)).await.unwrap();
    }
}

fn committed(broker: &MemoryBroker) -> Option<i64> {
    broker.committed_offset("svc", &TopicPartition::new("t", 0))
}

/// Who handled what, in order.
fn handled(log: &Log) -> Vec<(u32, i64)> {
    log.lock().unwrap().clone()
}

/// Ten records wait (for the one permit, or behind their key) when the
/// member unsubscribes: it still handles all ten (10 s, within 90% of the
/// 30 s budget), commits to the end, and the next member receives none.
#[tokio::test(start_paused = true)]
async fn an_unsubscribing_member_finishes_what_it_holds_before_letting_go() {
    for key in [None, Some("one-key")] {
        let broker = MemoryBroker::new();
        broker.create_topic("t", 1).unwrap();
        produce(&broker, key, &["{}"; 10]).await;
        let log = Log::default();
        let first = member(&broker, 1, &log).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        first.unsubscribe().await.unwrap();
        assert_eq!(committed(&broker), Some(10), "{key:?}");
        let next = member(&broker, 2, &log).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        next.shutdown().await;
        first.shutdown().await;
        let log = handled(&log);
        assert!(
            log.iter().all(|(member, _)| *member == 1),
            "{key:?}: {log:?}"
        );
        let mut offsets: Vec<i64> = log.iter().map(|(_, offset)| *offset).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..10).collect::<Vec<_>>(), "{key:?}");
    }
}

/// What a draining member cannot finish by 90% of its budget (4.5 s of 5 s:
/// records of one key, a second each) it leaves to the next owner, which
/// handles the rest in key order; none is handled twice.
#[tokio::test(start_paused = true)]
async fn what_does_not_fit_the_budget_is_left_to_the_next_owner_in_order() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    produce(&broker, Some("one-key"), &["{}"; 10]).await;
    let log = Log::default();
    let first = member_with(&broker, 1, &log, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.unsubscribe().await.unwrap();
    let left = committed(&broker).expect("committed");
    assert!((1..10).contains(&left), "committed {left}");
    let next = member(&broker, 2, &log).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    next.shutdown().await;
    first.shutdown().await;
    let offsets: Vec<i64> = handled(&log).iter().map(|(_, offset)| *offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>(), "each once, in order");
    assert!(
        handled(&log)
            .iter()
            .all(|&(member, offset)| (member == 1) == (offset < left))
    );
}

/// A record that fails while its member drains is not retried there: it
/// stays unsettled, and the later record of its key waits with it, so the
/// next owner handles both, in order, and the hand-off does not wait for
/// the retry.
#[tokio::test(start_paused = true)]
async fn a_failure_while_draining_is_left_with_its_key_to_the_next_owner() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    produce(&broker, Some("k"), &[r#"{"fail":true}"#, "{}"]).await;
    let log = Log::default();
    let first = member(&broker, 1, &log).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = tokio::time::Instant::now();
    first.unsubscribe().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the hand-off waited"
    );
    assert_eq!(
        committed(&broker).unwrap_or(0),
        0,
        "the failed record was committed past"
    );
    let next = member(&broker, 2, &log).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    next.shutdown().await;
    first.shutdown().await;
    assert_eq!(handled(&log), [(2, 0), (2, 1)]);
}

/// When each member's handler saw cancellation, and who succeeded on what.
#[derive(Clone, Default)]
struct Seen {
    /// (member, offset, virtual time since the start) of each cancellation.
    cancelled: Arc<Mutex<Vec<(u32, i64, Duration)>>>,
    log: Log,
}

/// Member 1 waits for cancellation (for up to an hour) and then fails
/// transiently; every other member succeeds at once.
#[derive(Clone)]
struct Patient {
    member: u32,
    start: tokio::time::Instant,
    seen: Seen,
}

impl EventHandler for Patient {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        if self.member == 1 {
            tokio::select! {
                () = context.on_cancel() => {}
                () = tokio::time::sleep(Duration::from_secs(3600)) => {}
            }
            let at = self.start.elapsed();
            let seen = (self.member, message.offset, at);
            self.seen.cancelled.lock().unwrap().push(seen);
            return Err(HandlerError::transient("cancelled"));
        }
        self.seen
            .log
            .lock()
            .unwrap()
            .push((self.member, message.offset));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn patient(broker: &MemoryBroker, member: u32, seen: &Seen) -> ProsodyClient {
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .group_id("svc")
        .subscribed_topics(["t"])
        .shutdown_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let handler = Patient {
        member,
        start: tokio::time::Instant::now(),
        seen: seen.clone(),
    };
    client.subscribe(handler).await.unwrap();
    client
}

/// A revocation cancels running handlers at once (not at 90% of the 30 s
/// budget): a member joining at 1 s takes its partition from a member whose
/// handler waits for cancellation, and handles the record within a second
/// or two, not after half a minute.
#[tokio::test(start_paused = true)]
async fn a_revocation_cancels_running_handlers_at_once() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 2).unwrap();
    let producer = broker.producer().unwrap();
    for partition in 0..2 {
        let mut record = OutgoingRecord::new("t", format!("key-{partition}"), "{}");
        record.partition = Some(partition);
        producer.send(record, Duration::from_secs(1)).await.unwrap();
    }
    let seen = Seen::default();
    let first = patient(&broker, 1, &seen).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = patient(&broker, 2, &seen).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.log.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = seen.cancelled.lock().unwrap().clone();
    assert_eq!(
        cancelled.len(),
        1,
        "the revoked handler saw no cancellation within 10 s: {cancelled:?}"
    );
    assert!(
        cancelled[0].2 < Duration::from_secs(2),
        "the revoked handler saw cancellation at {:?}",
        cancelled[0].2
    );
    assert_eq!(handled(&seen.log).len(), 1, "the next owner handled it");
    second.shutdown().await;
    first.shutdown().await;
}

/// On shutdown, by contrast, a running handler runs freely until 90% of
/// the budget (27 s of 30 s) and only then sees cancellation.
#[tokio::test(start_paused = true)]
async fn a_shutdown_cancels_running_handlers_at_ninety_percent() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    produce(&broker, None, &["{}"]).await;
    let seen = Seen::default();
    let first = patient(&broker, 1, &seen).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.shutdown().await;
    let cancelled = seen.cancelled.lock().unwrap().clone();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    let at = cancelled[0].2;
    assert!(
        (Duration::from_secs(27)..Duration::from_secs(29)).contains(&at),
        "cancelled at {at:?}"
    );
    assert_eq!(
        committed(&broker).unwrap_or(0),
        0,
        "the failure was committed past"
    );
}
