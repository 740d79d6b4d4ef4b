//! The client on real Kafka and real Cassandra (from `scripts/services`):
//! deferred records, timers and dedup records outlive their member.
//!
//! - A member in a separate OS process (this binary, run again as a
//!   member) defers records and schedules timers, and is killed with
//!   SIGKILL; the next member handles every record, in key order, fires
//!   every timer once and none early, and skips a duplicate of a record
//!   the dead member handled.
//! - A member defers a record, commits past it and hands its partition
//!   over; the next member handles the record (the loss this suite guards
//!   against).
//!
//! Its own harness (`harness = false`), so that it can run as a member:
//! with `DURABLE_MEMBER` set it is one, printing what it handles as JSON
//! lines. Without the servers it prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::store::{DeferStore, TimerStore};
use prosody::{
    AdminClient, Context, EventHandler, Excise, HandlerError, KafkaBroker, KafkaConfig, Message,
    ProsodyClient, Timer, Timestamp, TopicOptions,
};
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_core::clock;
use prosody_core::services;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SUITE: &str = "tests/durable.rs (real Kafka and Cassandra)";
/// Set in a member's environment: its name.
const MEMBER: &str = "DURABLE_MEMBER";
const DEADLINE: Duration = Duration::from_secs(180);

/// What a member saw, one JSON line each.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Seen {
    member: String,
    /// `message`, `failed` or `timer`.
    event: String,
    key: String,
    n: Option<u64>,
    /// A timer's time, in milliseconds.
    time: Option<i64>,
    /// When it ran, in milliseconds.
    at: i64,
}

/// Where a member reports: its stdout (a member process), or a log.
#[derive(Clone)]
enum Out {
    Stdout,
    Log(Arc<Mutex<Vec<Seen>>>),
}

/// Fails the records marked for this member (transiently, so the pipeline
/// defers them); schedules the timers a record asks for; reports the rest.
#[derive(Clone)]
struct Witness {
    member: String,
    out: Out,
}

impl Witness {
    fn report(&self, event: &str, key: &str, n: Option<u64>, time: Option<i64>) {
        let seen = Seen {
            member: self.member.clone(),
            event: event.to_owned(),
            key: key.to_owned(),
            n,
            time,
            at: clock::now().as_millis(),
        };
        match &self.out {
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", serde_json::to_string(&seen).unwrap());
                let _ = out.flush();
            }
            Out::Log(log) => log.lock().unwrap().push(seen),
        }
    }
}

impl EventHandler for Witness {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let key = message.key.to_string();
        let n = message.payload["n"].as_u64();
        if message.payload["fail_at"].as_str() == Some(self.member.as_str()) {
            self.report("failed", &key, n, None);
            return Err(HandlerError::transient("this member fails it"));
        }
        if let Some(seconds) = message.payload["timer_in"].as_i64() {
            let at = Timestamp::from_millis(clock::now().as_millis() + seconds * 1000);
            context.schedule(at).map_err(HandlerError::permanent)?;
        }
        self.report("message", &key, n, None);
        Ok(())
    }

    async fn on_timer(&self, _: Context, timer: Timer) -> Result<(), HandlerError> {
        self.report(
            "timer",
            timer.key.as_str(),
            None,
            Some(timer.time.as_millis()),
        );
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The servers, and the names one scenario uses.
#[derive(Clone)]
struct World {
    servers: String,
    topic: String,
    group: String,
    keyspace: String,
    partitions: i32,
}

impl World {
    async fn new(name: &str, partitions: i32) -> Option<Self> {
        let servers = services::server(services::KAFKA, SUITE)?;
        services::server(services::CASSANDRA, SUITE)?;
        let world = Self {
            servers,
            topic: services::unique(name),
            group: services::unique(&format!("{name}_group")),
            keyspace: services::unique(name),
            partitions,
        };
        let options = TopicOptions {
            partitions: Some(partitions),
            replication_factor: Some(1),
            ..TopicOptions::default()
        };
        AdminClient::with_config(&world.kafka())
            .unwrap()
            .create_topic(&world.topic, &options)
            .await
            .unwrap();
        Some(world)
    }

    fn kafka(&self) -> KafkaConfig {
        KafkaConfig::new(self.servers.split(',')).unwrap()
    }

    /// The environment that configures a member: everything else (the
    /// servers, the Cassandra login) it reads from `scripts/services env`.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PROSODY_GROUP_ID", self.group.clone()),
            ("PROSODY_SUBSCRIBED_TOPICS", self.topic.clone()),
            ("PROSODY_CASSANDRA_KEYSPACE", self.keyspace.clone()),
            ("PROSODY_SOURCE_SYSTEM", "producer".to_owned()),
            ("PROSODY_DEFER_BASE", "1s".to_owned()),
            ("PROSODY_PROBE_PORT", "none".to_owned()),
        ]
    }

    /// A member in this process, reporting to `log`.
    async fn member(&self, name: &str, log: &Arc<Mutex<Vec<Seen>>>) -> ProsodyClient {
        let client = builder()
            .group_id(self.group.as_str())
            .subscribed_topics([self.topic.as_str()])
            .cassandra_keyspace(self.keyspace.as_str())
            .source_system("producer")
            .defer_base(Duration::from_secs(1))
            .disable_probe()
            .build()
            .await
            .unwrap();
        let witness = Witness {
            member: name.to_owned(),
            out: Out::Log(Arc::clone(log)),
        };
        client.subscribe(witness).await.unwrap();
        client
    }

    /// The group's stores, read as a member would.
    async fn stores(&self) -> CassandraStores {
        let nodes = std::env::var(services::CASSANDRA).unwrap();
        let config = CassandraConfig::new(nodes.split(','))
            .keyspace(self.keyspace.as_str())
            .credentials(
                std::env::var("PROSODY_CASSANDRA_USER").unwrap(),
                std::env::var("PROSODY_CASSANDRA_PASSWORD").unwrap(),
            );
        CassandraStores::connect(&config, &self.group)
            .await
            .unwrap()
    }

    fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        (0..self.partitions).map(|p| TopicPartition::new(self.topic.as_str(), p))
    }

    /// Sends records of (key, payload); returns each partition's end.
    async fn send(&self, records: &[(String, Value)]) -> BTreeMap<i32, i64> {
        let producer = KafkaBroker::new(self.kafka()).producer().unwrap();
        let mut ends = BTreeMap::new();
        for (key, payload) in records {
            let record = OutgoingRecord::new(self.topic.as_str(), key.clone(), payload.to_string());
            let delivery = producer
                .send(record, Duration::from_secs(30))
                .await
                .unwrap();
            let end: &mut i64 = ends.entry(delivery.partition).or_default();
            *end = (*end).max(delivery.offset + 1);
        }
        ends
    }

    /// Whether the group committed every partition to `ends`, read without
    /// joining the group.
    fn committed_to(&self, ends: &BTreeMap<i32, i64>) -> bool {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", &self.group)
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in ends.keys() {
            list.add_partition(&self.topic, *p);
        }
        let Ok(committed) = consumer.committed_offsets(list, Duration::from_secs(10)) else {
            return false;
        };
        ends.iter().all(|(p, end)| {
            committed
                .find_partition(&self.topic, *p)
                .is_some_and(|e| e.offset() == Offset::Offset(*end))
        })
    }
}

/// A builder with what every member here shares.
fn builder() -> prosody::ClientBuilder {
    ProsodyClient::builder()
        .kafka_property("session.timeout.ms", "6000")
        .kafka_property("heartbeat.interval.ms", "1000")
}

/// Waits for `done`, polling, within the deadline.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let wait = async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"));
}

fn handled(log: &[Seen], event: &str) -> BTreeSet<u64> {
    log.iter()
        .filter(|seen| seen.event == event)
        .filter_map(|seen| seen.n)
        .collect()
}

/// A member process, killed (SIGKILL) when dropped: a failing scenario
/// leaves none behind.
struct Process(std::process::Child);

impl Process {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A member process: this binary again, as member `name` of `world`, its
/// reports collected into `log` by a reader thread.
fn spawn_member(world: &World, name: &str, log: &Arc<Mutex<Vec<Seen>>>) -> Process {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env(MEMBER, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (variable, value) in world.env() {
        command.env(variable, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let log = Arc::clone(log);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Seen>(&line) {
                Ok(seen) => log.lock().unwrap().push(seen),
                Err(_) => eprintln!("member: {line}"),
            }
        }
    });
    Process(child)
}

/// The member process's life: build from the environment, consume until
/// killed.
fn member_main(name: String) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = match builder().build().await {
            Ok(client) => client,
            Err(error) => {
                eprintln!("member {name} did not build: {error}");
                return ExitCode::from(2);
            }
        };
        let witness = Witness {
            member: name,
            out: Out::Stdout,
        };
        client.subscribe(witness).await.unwrap();
        std::future::pending::<ExitCode>().await
    })
}

/// Per key: a record with a timer 30 s out (even keys), one member A fails
/// (keys 0 to 3), one behind it; and on key-5 a record with an id. Returns
/// the records, every record's number, and those A fails.
fn workload() -> (Vec<(String, Value)>, BTreeSet<u64>, BTreeSet<u64>) {
    let mut records = Vec::new();
    let mut n = 0;
    for k in 0..6 {
        let key = format!("key-{k}");
        let mut first = json!({"n": n});
        if k % 2 == 0 {
            first["timer_in"] = json!(30);
        }
        records.push((key.clone(), first));
        n += 1;
        if k < 4 {
            records.push((key.clone(), json!({"n": n, "fail_at": "A"})));
            n += 1;
        }
        records.push((key.clone(), json!({"n": n})));
        n += 1;
    }
    records.push(("key-5".to_owned(), json!({"n": 100, "id": "order-1"})));
    let all = records
        .iter()
        .filter_map(|(_, p)| p["n"].as_u64())
        .collect();
    let failing = records
        .iter()
        .filter(|(_, p)| p["fail_at"] == "A")
        .filter_map(|(_, p)| p["n"].as_u64())
        .collect();
    (records, all, failing)
}

/// What A and then B handled: everything, the duplicate not, each key in
/// order, each timer once at B and none early.
fn check_killed(by_a: &[Seen], by_b: &[Seen], all: &BTreeSet<u64>) {
    let mut every = handled(by_a, "message");
    every.extend(handled(by_b, "message"));
    assert!(
        all.is_subset(&every),
        "not handled: {:?}",
        all.difference(&every)
    );
    assert!(!every.contains(&200), "the duplicate was handled: {by_b:?}");
    // Per key, the records handled in order: A's, then B's.
    for k in 0..6 {
        let key = format!("key-{k}");
        let sequence: Vec<u64> = by_a
            .iter()
            .chain(by_b)
            .filter(|seen| seen.event == "message" && seen.key == key)
            .filter_map(|seen| seen.n)
            .collect();
        assert!(
            sequence.windows(2).all(|w| w[0] < w[1]),
            "{key}: {sequence:?}"
        );
    }
    let fired: Vec<&Seen> = by_b.iter().filter(|seen| seen.event == "timer").collect();
    assert_eq!(fired.len(), 3, "timers fired: {fired:?}");
    let keys: BTreeSet<&str> = fired.iter().map(|seen| seen.key.as_str()).collect();
    assert_eq!(keys, BTreeSet::from(["key-0", "key-2", "key-4"]));
    for seen in fired {
        let time = seen.time.unwrap();
        assert!(
            seen.at >= time,
            "fired {} ms early: {seen:?}",
            time - seen.at
        );
    }
}

/// Member A (a process) defers records and schedules timers, and is killed;
/// member B takes its partitions.
async fn a_killed_member_loses_nothing() -> Option<()> {
    let world = World::new("killed", 2).await?;
    let (records, all, failing) = workload();
    let ends = world.send(&records).await;
    let log_a = Arc::new(Mutex::new(Vec::new()));
    let mut a = spawn_member(&world, "A", &log_a);
    let stores = world.stores().await;
    // A handled what it could, deferred the rest, committed past all of
    // it, and its timers and deferrals are in Cassandra.
    until("A deferred and committed", async || {
        let failed = handled(&log_a.lock().unwrap(), "failed");
        if failed != failing || !world.committed_to(&ends) {
            return false;
        }
        let mut deferred_keys = 0;
        let mut timers = 0;
        for p in world.partitions() {
            deferred_keys += stores.keys(&p).await.unwrap().len();
            timers += stores
                .load(
                    &p,
                    Timestamp::from_millis(0),
                    Timestamp::from_millis(i64::MAX / 2),
                )
                .await
                .unwrap()
                .iter()
                .filter(|t| t.kind == prosody::store::TimerKind::Application)
                .count();
        }
        deferred_keys == 4 && timers == 3
    })
    .await;
    a.kill();
    let by_a = log_a.lock().unwrap().clone();
    assert!(
        by_a.iter().all(|seen| seen.event != "timer"),
        "a timer fired at A, before it was due: {by_a:?}"
    );

    let log_b = Arc::new(Mutex::new(Vec::new()));
    let b = world.member("B", &log_b).await;
    until(
        "B handled the deferred records and fired the timers",
        async || {
            let log = log_b.lock().unwrap();
            failing.is_subset(&handled(&log, "message"))
                && log.iter().filter(|seen| seen.event == "timer").count() >= 3
        },
    )
    .await;
    // A duplicate of the record A handled (same key and id), then a marker.
    world
        .send(&[
            ("key-5".to_owned(), json!({"n": 200, "id": "order-1"})),
            ("key-5".to_owned(), json!({"n": 201})),
        ])
        .await;
    until("B handled the marker", async || {
        handled(&log_b.lock().unwrap(), "message").contains(&201)
    })
    .await;
    b.shutdown().await;

    let by_b = log_b.lock().unwrap().clone();
    check_killed(&by_a, &by_b, &all);
    Some(())
}

/// Member A defers a record and commits past it, then hands the partition
/// over gracefully; member B handles the record.
async fn a_deferred_record_moves_with_its_partition() -> Option<()> {
    let world = World::new("moved", 1).await?;
    let ends = world
        .send(&[("key".to_owned(), json!({"n": 1, "fail_at": "A"}))])
        .await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = world.member("A", &log).await;
    let stores = world.stores().await;
    let p = TopicPartition::new(world.topic.as_str(), 0);
    until("A deferred the record and committed past it", async || {
        world.committed_to(&ends) && !stores.keys(&p).await.unwrap().is_empty()
    })
    .await;
    a.shutdown().await;
    let b = world.member("B", &log).await;
    until("B handled the record A deferred", async || {
        handled(&log.lock().unwrap(), "message").contains(&1)
    })
    .await;
    b.shutdown().await;
    until("the backlog drained", async || {
        stores.keys(&p).await.unwrap().is_empty()
    })
    .await;
    Some(())
}

/// A wrong Cassandra password fails `build()`, naming authentication, and
/// the password shows in neither the error nor its `Debug`.
async fn a_wrong_cassandra_password_fails_the_build() -> Option<()> {
    let world = World::new("login", 1).await?;
    let wrong = "not-the-password-7731";
    let error = builder()
        .group_id(world.group.as_str())
        .cassandra_keyspace(world.keyspace.as_str())
        .cassandra_password(wrong)
        .disable_probe()
        .build()
        .await
        .expect_err("a wrong password is refused");
    let shown = format!("{error} {error:?}");
    assert!(
        matches!(
            error,
            prosody::ConfigError::Cassandra {
                retriable: false,
                ..
            }
        ),
        "{shown}"
    );
    assert!(shown.contains("authentication"), "{shown}");
    assert!(!shown.contains(wrong), "the password shows: {shown}");
    Some(())
}

/// A scenario: `None` when the servers are absent.
type Scenario = fn() -> std::pin::Pin<Box<dyn Future<Output = Option<()>>>>;

fn main() -> ExitCode {
    if let Ok(name) = std::env::var(MEMBER) {
        return member_main(name);
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scenarios: [(&str, Scenario); 3] = [
        ("a_wrong_cassandra_password_fails_the_build", || {
            Box::pin(a_wrong_cassandra_password_fails_the_build())
        }),
        ("a_killed_member_loses_nothing", || {
            Box::pin(a_killed_member_loses_nothing())
        }),
        ("a_deferred_record_moves_with_its_partition", || {
            Box::pin(a_deferred_record_moves_with_its_partition())
        }),
    ];
    let mut failed = 0;
    for (name, scenario) in scenarios {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(scenario())
        }));
        match outcome {
            Ok(Some(())) => println!("test {name} ... ok"),
            Ok(None) => return ExitCode::SUCCESS,
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
