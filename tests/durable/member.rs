//! The members of the durable scenarios: what they report, the world they
//! share (servers, topic, group, keyspace), and a member as a process of
//! its own.

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::state::ValueDef;
use prosody::{
    AdminClient, Context, EventHandler, Excise, HandlerError, KafkaBroker, KafkaConfig, Message,
    ProsodyClient, Timer, Timestamp, TopicOptions,
};
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_conformance::services;
use prosody_core::clock;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SUITE: &str = "tests/durable (real Kafka and Cassandra)";

/// The records a key's members counted (`count` records only).
pub static COUNT: ValueDef<u64> = ValueDef::new("count");
/// Set in a member's environment: its name.
pub const MEMBER: &str = "DURABLE_MEMBER";

/// What a member saw, one JSON line each.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Seen {
    pub member: String,
    /// `message`, `failed` or `timer`.
    pub event: String,
    pub key: String,
    pub n: Option<u64>,
    /// A timer's time, in milliseconds.
    pub time: Option<i64>,
    /// When it ran, in milliseconds.
    pub at: i64,
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
        if let Some(ms) = message.payload["sleep_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let fails = message.payload["fail_at"].as_str() == Some(self.member.as_str());
        if message.payload["count"] == true {
            // Counted before it fails: a failed attempt's count is dropped.
            let count = context.state(&COUNT)?;
            let next = count.get().await?.unwrap_or(0) + 1;
            count.set(&next).await?;
            if !fails {
                self.report("counted", &key, n, None);
            }
        }
        if fails {
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
pub struct World {
    pub servers: String,
    pub topic: String,
    pub group: String,
    pub keyspace: String,
    pub partitions: i32,
}

impl World {
    pub async fn new(name: &str, partitions: i32) -> Option<Self> {
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
    pub async fn member(&self, name: &str, log: &Arc<Mutex<Vec<Seen>>>) -> ProsodyClient {
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
    pub async fn stores(&self) -> CassandraStores {
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

    pub fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        (0..self.partitions).map(|p| TopicPartition::new(self.topic.as_str(), p))
    }

    /// Sends records of (key, payload); returns each partition's end.
    pub async fn send(&self, records: &[(String, Value)]) -> BTreeMap<i32, i64> {
        let mut ends = BTreeMap::new();
        for (partition, offset) in self.deliver(records).await {
            let end: &mut i64 = ends.entry(partition).or_default();
            *end = (*end).max(offset + 1);
        }
        ends
    }

    /// Sends records of (key, payload); returns where each went, in order.
    pub async fn deliver(&self, records: &[(String, Value)]) -> Vec<(i32, i64)> {
        let producer = KafkaBroker::new(self.kafka()).producer().unwrap();
        let mut delivered = Vec::with_capacity(records.len());
        for (key, payload) in records {
            let record = OutgoingRecord::new(self.topic.as_str(), key.clone(), payload.to_string());
            let delivery = producer
                .send(record, Duration::from_secs(30))
                .await
                .unwrap();
            delivered.push((delivery.partition, delivery.offset));
        }
        delivered
    }

    /// Whether the group committed every partition to `ends`, read without
    /// joining the group.
    pub fn committed_to(&self, ends: &BTreeMap<i32, i64>) -> bool {
        let committed = self.committed();
        ends.iter().all(|(p, end)| committed.get(p) == Some(end))
    }

    /// The group's committed offset of each partition that has one.
    pub fn committed(&self) -> BTreeMap<i32, i64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", &self.group)
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..self.partitions {
            list.add_partition(&self.topic, p);
        }
        let Ok(committed) = consumer.committed_offsets(list, Duration::from_secs(10)) else {
            return BTreeMap::new();
        };
        (0..self.partitions)
            .filter_map(
                |p| match committed.find_partition(&self.topic, p)?.offset() {
                    Offset::Offset(offset) => Some((p, offset)),
                    _ => None,
                },
            )
            .collect()
    }
}

/// A builder with what every member here shares.
pub fn builder() -> prosody::ClientBuilder {
    ProsodyClient::builder()
        .state_collections([COUNT.spec()])
        .kafka_property("session.timeout.ms", "6000")
        .kafka_property("heartbeat.interval.ms", "1000")
}

/// A member process, killed (SIGKILL) when dropped: a failing scenario
/// leaves none behind.
pub struct Process(std::process::Child);

impl Process {
    pub fn kill(&mut self) {
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
pub fn spawn_member(world: &World, name: &str, log: &Arc<Mutex<Vec<Seen>>>) -> Process {
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
pub fn member_main(name: String) -> ExitCode {
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
