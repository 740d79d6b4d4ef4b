//! A rebalance on a real Apache Kafka (`KRaft`, from `scripts/services`)
//! cancels the handlers of the partitions it takes away at once: a member
//! whose handlers wait for cancellation hands a partition to a joining
//! member in seconds, well inside `shutdown_timeout` (30 s), and the record
//! it was handling is handled by the new owner. Without
//! `PROSODY_BOOTSTRAP_SERVERS` the suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer};
use prosody::{
    AdminClient, Context, EventHandler, Excise, GroupProtocol, HandlerError, KafkaBroker,
    KafkaConfig, MemoryStores, Message, ProsodyClient, Timer, TopicOptions,
};
use prosody_conformance::services;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const SUITE: &str = "tests/suite/rebalance.rs (real Kafka)";
const DEADLINE: Duration = Duration::from_secs(120);

/// What both members saw.
#[derive(Default)]
struct Log {
    /// Member 1's calls that started waiting.
    waiting: usize,
    /// When member 1's handlers saw cancellation.
    cancelled: Vec<Instant>,
    /// Partitions member 2 handled a record of.
    handled: Vec<i32>,
}

/// Member 1 waits for cancellation (or the end of the test), then fails
/// transiently; member 2 succeeds at once.
#[derive(Clone)]
struct Handler {
    member: u32,
    log: Arc<Mutex<Log>>,
    release: watch::Receiver<bool>,
}

impl EventHandler for Handler {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        if self.member != 1 {
            self.log.lock().unwrap().handled.push(message.partition);
            return Ok(());
        }
        self.log.lock().unwrap().waiting += 1;
        let mut release = self.release.clone();
        tokio::select! {
            () = context.on_cancel() => {
                self.log.lock().unwrap().cancelled.push(Instant::now());
            }
            _ = release.wait_for(|released| *released) => {}
        }
        Err(HandlerError::transient("cancelled"))
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn until(log: &Mutex<Log>, what: &str, done: impl Fn(&Log) -> bool) {
    let wait = async {
        while !done(&log.lock().unwrap()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("{what} within {DEADLINE:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_classic_protocol() {
    a_rebalance_cancels_waiting_handlers_well_inside_the_shutdown_budget(GroupProtocol::Classic)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_consumer_protocol() {
    a_rebalance_cancels_waiting_handlers_well_inside_the_shutdown_budget(GroupProtocol::Consumer)
        .await;
}

async fn a_rebalance_cancels_waiting_handlers_well_inside_the_shutdown_budget(
    protocol: GroupProtocol,
) {
    let Some(servers) = services::server(services::KAFKA, SUITE) else {
        return;
    };
    let config = KafkaConfig::new(servers.split(',')).unwrap();
    let topic = services::unique("rebalance");
    let group = services::unique("rebalance_group");
    let options = TopicOptions {
        partitions: Some(2),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    AdminClient::with_config(&config)
        .unwrap()
        .create_topic(&topic, &options)
        .await
        .unwrap();
    let producer = KafkaBroker::new(config).producer().unwrap();
    for partition in 0..2 {
        let mut record = OutgoingRecord::new(topic.as_str(), format!("key-{partition}"), "{}");
        record.partition = Some(partition);
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let log = Arc::new(Mutex::new(Log::default()));
    let (release, released) = watch::channel(false);
    let member = |id: u32| {
        let handler = Handler {
            member: id,
            log: Arc::clone(&log),
            release: released.clone(),
        };
        let (servers, topic, group) = (servers.clone(), topic.clone(), group.clone());
        async move {
            let client = ProsodyClient::builder()
                .bootstrap_servers([servers.as_str()])
                .group_id(group.as_str())
                .subscribed_topics([topic.as_str()])
                .group_protocol(protocol)
                .shutdown_timeout(Duration::from_secs(30))
                .disable_probe()
                .stores(MemoryStores::new())
                .build()
                .await
                .unwrap();
            client.subscribe(handler).await.unwrap();
            client
        }
    };
    let first = member(1).await;
    until(&log, "member 1 handles both records", |log| {
        log.waiting == 2
    })
    .await;
    let joined = Instant::now();
    let second = member(2).await;
    until(&log, "member 2 handles a record", |log| {
        !log.handled.is_empty()
    })
    .await;
    let handed_over = joined.elapsed();
    let cancelled: Vec<Duration> = log
        .lock()
        .unwrap()
        .cancelled
        .iter()
        .map(|at| at.duration_since(joined))
        .collect();
    println!("{protocol}: handed over in {handed_over:?}; cancelled at {cancelled:?}");
    release.send_replace(true);
    second.shutdown().await;
    first.shutdown().await;
    assert!(
        handed_over < Duration::from_secs(15),
        "{protocol}: the rebalance took {handed_over:?} of a 30 s budget"
    );
    assert!(
        !cancelled.is_empty() && cancelled.iter().all(|at| *at < Duration::from_secs(15)),
        "{protocol}: member 1's handlers saw cancellation at {cancelled:?} after the join"
    );
}
