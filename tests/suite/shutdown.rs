//! Shutdown past the drain, on the in-memory broker under a paused clock:
//! a consumer's leave bounded by the deadline (and its floor), and the
//! warning of a client dropped without shutdown. (Apart from the library's
//! own tests: these set a `tracing` subscriber, which a test of the
//! process's global subscriber must not see.)

#![allow(clippy::expect_used, reason = "test code fails loudly")]

use crate::support;
use prosody::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Record, TopicPartition,
};
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient, Timer,
};
use prosody_memory::{MemoryConsumer, MemoryProducer};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A mock client consuming `t` with `budget` to shut down.
async fn consuming(budget: Duration) -> ProsodyClient {
    let broker = Tweaked {
        broker: MemoryBroker::new(),
        never_leaves: false,
        slow_commit: None,
    };
    tweaked(broker, budget).await
}

/// An in-memory broker whose members misbehave as told.
#[derive(Clone)]
struct Tweaked {
    broker: MemoryBroker,
    /// Their close never finishes.
    never_leaves: bool,
    /// Their first commit takes 5 s, told here when it starts.
    slow_commit: Option<mpsc::UnboundedSender<()>>,
}

/// A member of a [`Tweaked`] broker.
struct Tweak {
    member: MemoryConsumer,
    never_leaves: bool,
    slow_commit: Option<mpsc::UnboundedSender<()>>,
}

impl Broker for Tweaked {
    type Consumer = Tweak;
    type Producer = MemoryProducer;

    fn durable(&self) -> bool {
        false
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<Tweak, BrokerError> {
        Ok(Tweak {
            member: self.broker.consumer(config).await?,
            never_leaves: self.never_leaves,
            slow_commit: self.slow_commit.clone(),
        })
    }

    fn producer(&self) -> Result<MemoryProducer, BrokerError> {
        self.broker.producer()
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.broker.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.broker.partitions(topic).await
    }
}

impl Consumer for Tweak {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        self.member.poll().await
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.member.store_offset(partition, offset)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        if let Some(committing) = self.slow_commit.take() {
            let _ = committing.send(());
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        self.member.commit().await
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.member.pause(partition)
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.member.resume(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        self.member.committed(partition).await
    }

    async fn close(self) {
        if self.never_leaves {
            let _member = self;
            std::future::pending::<()>().await;
        } else {
            self.member.close().await;
        }
    }
}

/// A mock client on `broker` consuming `t`, with `budget` to shut down.
async fn tweaked(broker: Tweaked, budget: Duration) -> ProsodyClient {
    broker.broker.create_topic("t", 1).expect("a topic");
    ProsodyClient::builder()
        .broker(broker)
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(["t"])
        .shutdown_timeout(budget)
        .build()
        .await
        .expect("a client")
}

/// Handles the records of key `done` at once; starts each other record's
/// handling, tells of it, and never ends it.
struct Hangs(mpsc::UnboundedSender<()>);

impl EventHandler for Hangs {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        if message.key.as_ref() == "done" {
            return Ok(());
        }
        let _ = self.0.send(());
        std::future::pending().await
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Everything logged while it is the default subscriber, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("the log")).into_owned()
    }

    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A drain that takes the whole budget, then a consumer that never
/// finishes leaving: shutdown stops waiting for the leave 2 s past the
/// budget (the floor the leave gets however late it starts), and says
/// what that means for the group.
#[tokio::test(start_paused = true)]
async fn a_consumer_that_never_leaves_holds_shutdown_up_only_to_its_floor() {
    let logs = Logs::default();
    let _default = support::capture(logs.subscriber());
    let budget = Duration::from_secs(10);
    let broker = Tweaked {
        broker: MemoryBroker::new(),
        never_leaves: true,
        slow_commit: None,
    };
    let client = tweaked(broker, budget).await;
    let (started, mut handling) = mpsc::unbounded_channel();
    client
        .subscribe(Hangs(started))
        .await
        .expect("a subscription");
    client
        .send("t", "k", &serde_json::json!({}))
        .await
        .expect("a send");
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");

    let start = Instant::now();
    tokio::time::timeout(budget * 10, client.shutdown())
        .await
        .expect("shutdown returned");
    assert_eq!(start.elapsed(), budget + Duration::from_secs(2));
    let logged = logs.text();
    assert!(
        logged.contains("did not leave its group")
            && logged.contains("session.timeout.ms")
            && logged.contains("the offsets were committed before"),
        "{logged}"
    );
}

/// Dropping the last handle of a consuming client without shutdown warns,
/// counting the partitions held and their unsettled records; after
/// shutdown, or for a client never subscribed, a drop says nothing.
#[tokio::test(start_paused = true)]
async fn a_client_dropped_unshut_says_what_it_left() {
    let logs = Logs::default();
    let _default = support::capture(logs.subscriber());
    let client = consuming(Duration::from_secs(10)).await;
    let (started, mut handling) = mpsc::unbounded_channel();
    client
        .subscribe(Hangs(started))
        .await
        .expect("a subscription");
    for n in 0..3 {
        client
            .send("t", "k", &serde_json::json!({ "n": n }))
            .await
            .expect("a send");
    }
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");
    let clone = client.clone();
    drop(client);
    assert_eq!(logs.text(), "", "a clone still holds the client");
    drop(clone);
    let logged = logs.text();
    assert!(
        logged.contains("dropped without shutdown()")
            && logged.contains("subscribed=true partitions=1 unsettled=3 telemetry=0 answers=0"),
        "{logged}"
    );

    let logs = Logs::default();
    let _default = support::capture(logs.subscriber());
    let shut = consuming(Duration::from_secs(10)).await;
    let (started, mut handling) = mpsc::unbounded_channel();
    shut.subscribe(Hangs(started))
        .await
        .expect("a subscription");
    shut.send("t", "k", &serde_json::json!({}))
        .await
        .expect("a send");
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");
    shut.shutdown().await;
    drop(shut);
    let never = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .group_id("svc")
        .source_system("svc-test")
        .build()
        .await
        .expect("a client");
    drop(never);
    let logged = logs.text();
    assert!(!logged.contains("dropped without shutdown()"), "{logged}");
}

/// Shutdown called while a commit is under way drains until
/// `shutdown_timeout` from the call, not from when the commit ends: the
/// drain keeps to the one deadline too.
#[tokio::test(start_paused = true)]
async fn the_drain_keeps_to_the_deadline_of_the_call() {
    let budget = Duration::from_secs(10);
    let (committing, mut commit_started) = mpsc::unbounded_channel();
    let broker = Tweaked {
        broker: MemoryBroker::new(),
        never_leaves: false,
        slow_commit: Some(committing),
    };
    let client = tweaked(broker, budget).await;
    let (started, mut handling) = mpsc::unbounded_channel();
    client
        .subscribe(Hangs(started))
        .await
        .expect("a subscription");
    for key in ["done", "stuck"] {
        client
            .send("t", key, &serde_json::json!({}))
            .await
            .expect("a send");
    }
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");
    tokio::time::timeout(Duration::from_secs(60), commit_started.recv())
        .await
        .expect("a commit started in time");

    let start = Instant::now();
    client.shutdown().await;
    assert_eq!(start.elapsed(), budget);
}
