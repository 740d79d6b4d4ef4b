//! Timers end to end, on the in-memory broker and timer store under a
//! paused clock.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::TopicPartition;
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, MemoryDedupStore, MemoryDeferStore,
    MemoryStores, MemoryTimerStore, Message, ProsodyClient, Timer, Timestamp,
};
use prosody_core::Key;
use prosody_core::clock;
use prosody_core::store::{TimerKind, TimerStore};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

const DEADLINE: Duration = Duration::from_secs(24 * 3600);

fn at(seconds_from_now: i64) -> Timestamp {
    let now = clock::now().as_millis();
    Timestamp::from_millis((now / 1000 + seconds_from_now) * 1000)
}

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Message(String),
    Fired {
        key: String,
        time: Timestamp,
        at: Timestamp,
    },
    TimerFailed {
        at: Timestamp,
    },
}

/// The payload says which timers to schedule (seconds from now) and whether
/// the first attempt fails; on a timer it reports when it ran.
#[derive(Clone)]
struct Scheduler {
    seen: mpsc::UnboundedSender<Seen>,
    busy: Arc<Mutex<Vec<String>>>,
    overlaps: Arc<Mutex<u32>>,
    rearmed: Arc<std::sync::atomic::AtomicU32>,
}

impl Scheduler {
    fn enter(&self, key: &str) {
        let mut busy = self.busy.lock().unwrap();
        if busy.iter().any(|k| k == key) {
            *self.overlaps.lock().unwrap() += 1;
        }
        busy.push(key.to_owned());
    }

    fn leave(&self, key: &str) {
        self.busy.lock().unwrap().retain(|k| k != key);
    }
}

impl EventHandler for Scheduler {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let key = message.key.to_string();
        self.enter(&key);
        let first_attempt = context.attempt() == 1;
        let fail_first = message.payload["fail_first"].as_bool().unwrap_or(false);
        let timers = if first_attempt && fail_first {
            "first"
        } else {
            "timers"
        };
        for seconds in message.payload[timers].as_array().into_iter().flatten() {
            context.schedule(at(seconds.as_i64().unwrap()))?;
        }
        for time in message.payload["unschedule_all"]
            .as_bool()
            .into_iter()
            .filter(|u| *u)
        {
            let _ = time;
            context.clear_scheduled()?;
        }
        if let Some(work) = message.payload["work"].as_u64() {
            tokio::time::sleep(Duration::from_secs(work)).await;
        }
        self.leave(&key);
        if first_attempt && fail_first {
            return Err(HandlerError::transient("first attempt fails"));
        }
        let _ = self.seen.send(Seen::Message(key));
        Ok(())
    }

    async fn on_timer(&self, context: Context, timer: Timer) -> Result<(), HandlerError> {
        self.enter(&timer.key);
        // The firing timer no longer counts as scheduled: it is consumed.
        if context.scheduled().await?.contains(&timer.time) {
            let _ = self
                .seen
                .send(Seen::Message("the firing timer is still scheduled".into()));
        }
        self.leave(&timer.key);
        // Keys named "flaky" fail their first two timer calls.
        if timer.key.starts_with("flaky")
            && self
                .rearmed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                < 2
        {
            let _ = self.seen.send(Seen::TimerFailed { at: clock::now() });
            return Err(HandlerError::transient("flaky timer"));
        }
        // Keys named "rearm" schedule a follow-up five seconds later, twice.
        if timer.key.starts_with("rearm")
            && self
                .rearmed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                < 2
        {
            context.schedule(Timestamp::from_millis(timer.time.as_millis() + 5_000))?;
        }
        let _ = self.seen.send(Seen::Fired {
            key: timer.key.to_string(),
            time: timer.time,
            at: clock::now(),
        });
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn handler() -> (Scheduler, mpsc::UnboundedReceiver<Seen>) {
    let (seen, rx) = mpsc::unbounded_channel();
    (
        Scheduler {
            seen,
            busy: Arc::default(),
            overlaps: Arc::default(),
            rearmed: Arc::default(),
        },
        rx,
    )
}

async fn client(broker: &MemoryBroker, timers: &MemoryTimerStore) -> ProsodyClient {
    client_with_slab(broker, timers, Duration::from_secs(3600)).await
}

async fn client_with_slab(
    broker: &MemoryBroker,
    timers: &MemoryTimerStore,
    slab: Duration,
) -> ProsodyClient {
    ProsodyClient::builder()
        .broker(broker.clone())
        .slab_size(slab)
        .stores(MemoryStores::from_parts(
            timers.clone(),
            MemoryDeferStore::new(),
            MemoryDedupStore::new(),
        ))
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
        .build()
        .await
        .expect("client")
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("deadline")
        .expect("open")
}

#[tokio::test(start_paused = true)]
async fn a_timer_fires_once_at_or_after_its_time() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client(&broker, &timers).await;
    let (handler, mut seen) = handler();
    client.subscribe(handler).await.expect("subscribe");
    client
        .send("t", "k", &json!({"timers": [5, 5, 90]}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("k".into()));
    for expected in [5, 90] {
        let Seen::Fired { key, time, at: ran } = next(&mut seen).await else {
            panic!("not a timer")
        };
        assert_eq!(key, "k");
        assert!(ran >= time, "fired at {ran:?}, before its time {time:?}");
        assert!(
            ran.as_millis() - time.as_millis() < 1000,
            "fired {expected}s timer late"
        );
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(seen.try_recv().is_err(), "a timer fired twice");
    assert_eq!(
        timers.stored_timers(),
        0,
        "a fired timer stayed in the store"
    );
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_leaves_no_timer_and_its_retry_exactly_one() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client(&broker, &timers).await;
    let (handler, mut seen) = handler();
    client.subscribe(handler).await.expect("subscribe");
    client
        .send(
            "t",
            "k",
            &json!({"fail_first": true, "first": [10, 20], "timers": [30]}),
        )
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("k".into()));
    // The key's application timers, wherever its partition is (the defer
    // timer that retried the message may still be leaving the store).
    let mut scheduled = Vec::new();
    for p in 0..broker.partition_count("t").expect("topic") {
        let tp = TopicPartition::new("t", p);
        let key = Key::from("k");
        scheduled.extend(
            timers
                .scheduled(&tp, &key, TimerKind::Application)
                .await
                .unwrap(),
        );
    }
    assert_eq!(scheduled.len(), 1, "the failed attempt's timers were kept");
    let Seen::Fired { time, .. } = next(&mut seen).await else {
        panic!("not a timer")
    };
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        seen.try_recv().is_err(),
        "more than the retry's one timer fired"
    );
    assert!(time.as_millis() > 0);
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pending_timers_fire_for_the_next_client_after_a_restart() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let first = client(&broker, &timers).await;
    let (worker, mut seen) = handler();
    first.subscribe(worker).await.expect("subscribe");
    first
        .send("t", "k", &json!({"timers": [60]}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("k".into()));
    first.shutdown().await;
    assert_eq!(timers.stored_timers(), 1);

    let second = client(&broker, &timers).await;
    let (worker, mut seen) = handler();
    second.subscribe(worker).await.expect("subscribe");
    let Seen::Fired { key, time, at: ran } = next(&mut seen).await else {
        panic!("not a timer")
    };
    assert_eq!(key, "k");
    assert!(ran >= time);
    second.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_keys_timer_never_runs_while_its_message_runs() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client(&broker, &timers).await;
    let (worker, mut seen) = handler();
    let overlaps = Arc::clone(&worker.overlaps);
    client.subscribe(worker).await.expect("subscribe");
    // The timer comes due 1 s in, while the handler works for 10 s; a second
    // message of the key schedules more timers while the first fire.
    client
        .send("t", "k", &json!({"timers": [1], "work": 10}))
        .await
        .expect("send");
    client
        .send("t", "k", &json!({"timers": [2, 3], "work": 5}))
        .await
        .expect("send");
    let mut fired = 0;
    let mut handled = 0;
    while fired < 3 || handled < 2 {
        match next(&mut seen).await {
            Seen::Message(_) => handled += 1,
            Seen::Fired { .. } => fired += 1,
            Seen::TimerFailed { .. } => panic!("no timer of this test fails"),
        }
    }
    assert_eq!(
        *overlaps.lock().unwrap(),
        0,
        "a timer and a message of one key overlapped"
    );
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn after_a_rebalance_a_timer_fires_at_the_new_owner_only() {
    use prosody::broker::partition_for_key;
    let broker = MemoryBroker::new();
    broker.create_topic("t", 2).expect("topic");
    let timers = MemoryTimerStore::new();
    // The second member to join is given partition 1: pick a key there.
    let key = (0..1000)
        .map(|n| format!("key-{n}"))
        .find(|key| partition_for_key(key.as_bytes(), 2) == 1)
        .expect("a key");
    let old = client(&broker, &timers).await;
    let (worker, mut old_seen) = handler();
    old.subscribe(worker).await.expect("subscribe");
    old.send("t", key.as_str(), &json!({"timers": [60]}))
        .await
        .expect("send");
    assert_eq!(next(&mut old_seen).await, Seen::Message(key.clone()));

    let new = client(&broker, &timers).await;
    let (worker, mut new_seen) = handler();
    new.subscribe(worker).await.expect("subscribe");
    let joined = async {
        while new.assigned_partition_count() == 0 || old.assigned_partition_count() != 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, joined)
        .await
        .expect("rebalanced");
    let Seen::Fired { key: fired, .. } = next(&mut new_seen).await else {
        panic!("not a timer")
    };
    assert_eq!(fired, key);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        old_seen.try_recv().is_err(),
        "the old owner fired a timer it no longer owns"
    );
    new.shutdown().await;
    old.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_timer_cleared_while_it_waits_behind_its_key_does_not_fire() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client(&broker, &timers).await;
    let (worker, mut seen) = handler();
    client.subscribe(worker).await.expect("subscribe");
    client
        .send("t", "k", &json!({"timers": [3]}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("k".into()));
    // This message runs when the timer comes due, and clears it.
    client
        .send("t", "k", &json!({"work": 10, "unschedule_all": true}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("k".into()));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(seen.try_recv().is_err(), "a cleared timer fired");
    assert_eq!(timers.stored_timers(), 0);
    client.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn timers_beyond_the_first_slab_load_as_time_moves_and_rearming_works() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client_with_slab(&broker, &timers, Duration::from_secs(10)).await;
    let (worker, mut seen) = handler();
    client.subscribe(worker).await.expect("subscribe");
    // 60 s is six slabs ahead: loaded only as the horizon moves. Each firing
    // re-arms five seconds later, twice.
    client
        .send("t", "rearm", &json!({"timers": [60]}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("rearm".into()));
    let mut fired_at = Vec::new();
    for _ in 0..3 {
        let Seen::Fired { time, at: ran, .. } = next(&mut seen).await else {
            panic!("not a timer")
        };
        assert!(ran >= time);
        fired_at.push(time.as_millis());
    }
    assert_eq!(fired_at[1] - fired_at[0], 5_000);
    assert_eq!(fired_at[2] - fired_at[1], 5_000);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(seen.try_recv().is_err(), "a timer fired again");
    assert_eq!(
        timers.stored_timers(),
        0,
        "a fired or re-armed timer was left behind"
    );
    client.shutdown().await;
}

/// A failing `on_timer` is put off (pipeline mode): its timer stays stored
/// and runs again after `defer_base` (1 s), then twice that, while the
/// key's messages keep being handled; once it succeeds it is gone.
#[tokio::test(start_paused = true)]
async fn a_failing_timer_is_put_off_and_its_key_keeps_flowing() {
    let broker = MemoryBroker::new();
    let timers = MemoryTimerStore::new();
    let client = client(&broker, &timers).await;
    let (handler, mut seen) = handler();
    client.subscribe(handler).await.expect("subscribe");
    client
        .send("t", "flaky-k", &json!({"timers": [5]}))
        .await
        .expect("send");
    assert_eq!(next(&mut seen).await, Seen::Message("flaky-k".into()));
    let Seen::TimerFailed { at: first } = next(&mut seen).await else {
        panic!("the timer did not fail first")
    };
    client.send("t", "flaky-k", &json!({})).await.expect("send");
    assert_eq!(
        next(&mut seen).await,
        Seen::Message("flaky-k".into()),
        "the key's message waited for its put-off timer"
    );
    let Seen::TimerFailed { at: second } = next(&mut seen).await else {
        panic!("the timer did not fail twice")
    };
    let Seen::Fired {
        time, at: third, ..
    } = next(&mut seen).await
    else {
        panic!("the timer did not run a third time")
    };
    assert!(first >= time, "ran before its time");
    assert!(
        second.as_millis() - first.as_millis() >= 1000,
        "first delay too short"
    );
    assert!(
        third.as_millis() - second.as_millis() >= 2000,
        "second delay too short"
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(
        seen.try_recv().is_err(),
        "the timer ran again after it succeeded"
    );
    assert_eq!(timers.stored_timers(), 0, "the timer stayed in the store");
    client.shutdown().await;
}
