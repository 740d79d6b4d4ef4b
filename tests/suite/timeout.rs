//! The attempt deadline end to end, on the in-memory broker under a paused
//! clock: at `timeout` the handler sees cancellation; one that returns
//! then fails the attempt (its changes discarded) and the event is tried
//! again; one that does not return is dropped after its grace.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::timeout::TimeoutConfig;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryDedupStore, MemoryDeferStore,
    MemoryStores, MemoryTimerStore, Message, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(5);
const DEADLINE: Duration = Duration::from_secs(3600);

/// What the handler saw, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// An attempt started, after this long.
    Started(u32, Duration),
    /// The first attempt saw its deadline (expired, and told to cancel).
    Cancelled(Duration),
    /// The first attempt was dropped.
    Dropped(Duration),
    /// A timer fired.
    Fired,
}

/// Its first attempt schedules a timer and runs past the deadline:
/// cooperative, it returns `Ok` once cancelled; stubborn, it never returns.
#[derive(Clone)]
struct Slow {
    stubborn: bool,
    started: Instant,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Slow {
    fn log(&self, seen: Seen) {
        self.seen.lock().expect("seen").push(seen);
    }
}

/// Logs when the attempt holding it is dropped.
struct OnDrop(Slow);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.log(Seen::Dropped(self.0.started.elapsed()));
    }
}

impl EventHandler for Slow {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        self.log(Seen::Started(context.attempt(), self.started.elapsed()));
        if context.attempt() > 1 {
            return Ok(());
        }
        let at = prosody::Timestamp::from_millis(prosody_core::clock::now().as_millis() + 60_000);
        context.schedule(at).expect("schedule");
        if self.stubborn {
            let _guard = OnDrop(self.clone());
            std::future::pending::<()>().await;
        }
        context.on_cancel().await;
        assert!(context.should_cancel() && context.is_expired());
        self.log(Seen::Cancelled(self.started.elapsed()));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        self.log(Seen::Fired);
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Runs one record through a pipeline client with `handler`, until its
/// second attempt and two minutes more (past the timer the first attempt
/// scheduled); returns what the handler saw and the timers stored.
async fn run(stubborn: bool) -> (Vec<Seen>, usize) {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("topic");
    let timers = MemoryTimerStore::new();
    let client = ProsodyClient::builder()
        .broker(broker.clone())
        .stores(MemoryStores::from_parts(
            timers.clone(),
            MemoryDeferStore::new(),
            MemoryDedupStore::new(),
        ))
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .timeout(TIMEOUT)
        .build()
        .await
        .expect("client");
    let handler = Slow {
        stubborn,
        started: Instant::now(),
        seen: Arc::default(),
    };
    client.subscribe(handler.clone()).await.expect("subscribe");
    client.send("t", "k", &json!({})).await.expect("send");
    let retried = async {
        while !handler
            .seen
            .lock()
            .expect("seen")
            .iter()
            .any(|s| matches!(s, Seen::Started(2, _)))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(DEADLINE, retried)
        .await
        .expect("tried again");
    tokio::time::sleep(Duration::from_secs(120)).await;
    client.shutdown().await;
    let seen = handler.seen.lock().expect("seen").clone();
    (seen, timers.stored_timers())
}

/// A handler that sees its deadline and returns `Ok` does not succeed: the
/// timer it scheduled is discarded, and the event is tried again.
#[tokio::test(start_paused = true)]
async fn a_handler_that_returns_once_cancelled_fails_the_attempt_and_leaves_no_trace() {
    let (seen, stored) = run(false).await;
    assert_eq!(
        seen[..2],
        [Seen::Started(1, Duration::ZERO), Seen::Cancelled(TIMEOUT)]
    );
    assert!(
        matches!(seen[2], Seen::Started(2, at) if at > TIMEOUT),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 3, "the late attempt's timer fired: {seen:?}");
    assert_eq!(stored, 0, "the late attempt's timer was written");
}

/// A handler that ignores its deadline is dropped at the end of its grace,
/// and the event is tried again.
#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_cancellation_is_dropped_after_its_grace() {
    let grace = TimeoutConfig { timeout: TIMEOUT }.grace();
    assert_eq!(grace, Duration::from_millis(500));
    let (seen, stored) = run(true).await;
    assert_eq!(
        seen[..2],
        [
            Seen::Started(1, Duration::ZERO),
            Seen::Dropped(TIMEOUT + grace)
        ]
    );
    assert!(matches!(seen[2], Seen::Started(2, _)), "{seen:?}");
    assert_eq!(seen.len(), 3, "the dropped attempt's timer fired: {seen:?}");
    assert_eq!(stored, 0);
}
