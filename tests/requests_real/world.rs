//! What the processes of the request suite and benchmark share: the
//! servers, a topic and keyspace of the run, member processes and their
//! handler.

use prosody::state::MapDef;
use prosody::{
    AdminClient, Context, EventHandler, Excise, HandlerError, KafkaConfig, Message, ProsodyClient,
    Timer, TopicOptions,
};
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SUITE: &str = "tests/requests_real (real Kafka and Cassandra)";
/// Set in a member's environment: the subsystem it answers as.
pub const MEMBER: &str = "REQUESTS_MEMBER";
/// Set in a requester process's environment.
pub const CALLER: &str = "REQUESTS_CALLER";
pub const DEADLINE: Duration = Duration::from_secs(120);
pub const LEASE: Duration = Duration::from_secs(5);

/// What the processes share: the servers, a topic and a keyspace of this
/// run.
pub struct World {
    pub topic: String,
    pub keyspace: String,
}

impl World {
    /// The world of a run, with a topic of `partitions`; `None` (one line
    /// said) without the servers.
    pub async fn new(partitions: i32) -> Option<Self> {
        let servers = services::server(services::KAFKA, SUITE)?;
        services::server(services::CASSANDRA, SUITE)?;
        let world = Self {
            topic: services::unique("requests"),
            keyspace: services::unique("requests"),
        };
        let options = TopicOptions {
            partitions: Some(partitions),
            replication_factor: Some(1),
            ..TopicOptions::default()
        };
        AdminClient::with_config(&KafkaConfig::new(servers.split(',')).unwrap())
            .unwrap()
            .create_topic(&world.topic, &options)
            .await
            .unwrap();
        Some(world)
    }

    /// A process of this binary in `role`, with the world in its
    /// environment; its stdout lines go to the returned channel.
    pub fn spawn(&self, role: (&str, &str)) -> (Process, mpsc::Receiver<String>) {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(role.0, role.1)
            .env("PROSODY_SUBSCRIBED_TOPICS", &self.topic)
            .env("PROSODY_CASSANDRA_KEYSPACE", &self.keyspace)
            .env("PROSODY_PROBE_PORT", "none")
            .env("PROSODY_PEER_BIND_ADDRESS", "127.0.0.1:0")
            .env("PROSODY_PEER_REGISTRATION_TTL", "5s")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        (Process(child), received)
    }

    /// The requester of this process.
    pub async fn requester(&self) -> ProsodyClient {
        self.requester_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// A requester of this process whose endpoint listens on `address`.
    pub async fn requester_on(&self, address: std::net::SocketAddr) -> ProsodyClient {
        ProsodyClient::builder()
            .group_id(services::unique("caller"))
            .cassandra_keyspace(self.keyspace.as_str())
            .peer_bind_address(address)
            .peer_registration_ttl(LEASE)
            .send_timeout(Duration::from_secs(10))
            .disable_probe()
            .build()
            .await
            .unwrap()
    }

    pub async fn directory(&self) -> CassandraStores {
        let nodes = std::env::var(services::CASSANDRA).unwrap();
        let config = CassandraConfig::new(nodes.split(','))
            .keyspace(self.keyspace.as_str())
            .credentials(
                std::env::var("PROSODY_CASSANDRA_USER").unwrap(),
                std::env::var("PROSODY_CASSANDRA_PASSWORD").unwrap(),
            );
        CassandraStores::connect(&config, "directory-reader")
            .await
            .unwrap()
    }
}

/// A child process, killed (SIGKILL) when dropped.
pub struct Process(Child);

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

/// The next line starting with `prefix`, within the deadline.
pub fn line(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    let until = Instant::now() + DEADLINE;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {prefix:?} line within {DEADLINE:?}"));
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
}

/// How many records of each key a member handled, published under its
/// subsystem.
pub static HANDLED: MapDef<u64> = MapDef::new("handled").published(true);

/// The member's group for `subsystem` in this run.
pub fn group(subsystem: &str, keyspace: &str) -> String {
    format!("{subsystem}_{keyspace}")
}

/// Answers `{"by", "key", "pid"}` and counts each order it handled;
/// fails permanently for `refuse`; takes four seconds over keys starting
/// with `slow`, ten with `slower`.
pub struct Answering {
    pub subsystem: String,
}

impl EventHandler for Answering {
    type Payload = Value;
    type Output = Value;

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<Value, HandlerError> {
        if &*message.key == "refuse" {
            return Err(HandlerError::permanent("refused by policy"));
        }
        // Orders are counted in published state; other keys (the
        // benchmark's) write nothing, so they measure the requests alone.
        if message.key.starts_with("order-") {
            let handled = context.state(&HANDLED)?;
            let count = handled.get("count").await?.unwrap_or(0);
            handled.set("count", &(count + 1)).await?;
            // Held pending a while: no reader may see it before the commit.
            if message.key.starts_with("order-hold") {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
        if message.key.starts_with("slower") {
            tokio::time::sleep(Duration::from_secs(10)).await;
        } else if message.key.starts_with("slow") {
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        Ok(json!({ "by": self.subsystem, "key": &*message.key, "pid": std::process::id() }))
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, excise: Excise) -> Result<Value, HandlerError> {
        Ok(json!({ "excised": &*excise.key }))
    }
}

/// A member process: answers as its subsystem until killed; prints
/// `ready` once it owns partitions.
pub async fn member(subsystem: String) -> ExitCode {
    let client = ProsodyClient::builder()
        .group_id(group(
            &subsystem,
            &std::env::var("PROSODY_CASSANDRA_KEYSPACE").unwrap(),
        ))
        .subsystem(subsystem.as_str())
        .source_system("members")
        // Answers are sends too (see the caller's).
        .send_timeout(Duration::from_secs(30))
        .state_collections([HANDLED.spec()])
        .kafka_property("session.timeout.ms", "6000")
        .kafka_property("heartbeat.interval.ms", "1000")
        .build()
        .await
        .unwrap();
    client.subscribe(Answering { subsystem }).await.unwrap();
    while client.assigned_partition_count() == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("ready");
    std::future::pending::<ExitCode>().await
}
