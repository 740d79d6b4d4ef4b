//! librdkafka's in-process mock cluster, for tests (feature `mock`).
//!
//! The cluster is a real Kafka-protocol broker inside the process. Its
//! handle cannot leave the thread that made it, so [`MockKafka`] keeps it on
//! a thread of its own and forwards topic creation there; the cluster lives
//! until the `MockKafka` is dropped. Its admin API (create or delete topics
//! through a client) does not exist: create topics with
//! [`MockKafka::create_topic`].

use crate::KafkaConfig;
use prosody_contracts::broker::BrokerError;
use rdkafka::mocking::MockCluster;
use std::sync::mpsc;
use std::thread::JoinHandle;

type Reply = mpsc::Sender<Result<(), BrokerError>>;

/// A mock Kafka cluster on its own thread.
pub struct MockKafka {
    bootstrap_servers: String,
    requests: Option<mpsc::Sender<(String, i32, Reply)>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockKafka")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .finish_non_exhaustive()
    }
}

fn failed(reason: impl Into<String>) -> BrokerError {
    BrokerError::Backend {
        retriable: false,
        source: reason.into().into(),
    }
}

impl MockKafka {
    /// Starts a cluster of `brokers` brokers.
    pub fn start(brokers: i32) -> Result<Self, BrokerError> {
        let (requests, incoming) = mpsc::channel::<(String, i32, Reply)>();
        let (ready, started) = mpsc::channel::<Result<String, BrokerError>>();
        let thread = std::thread::Builder::new()
            .name("prosody-mock-kafka".to_owned())
            .spawn(move || {
                let cluster = match MockCluster::new(brokers) {
                    Ok(cluster) => cluster,
                    Err(error) => {
                        let _ = ready.send(Err(crate::error::backend(error)));
                        return;
                    }
                };
                let _ = ready.send(Ok(cluster.bootstrap_servers()));
                for (topic, partitions, reply) in incoming {
                    let created = cluster
                        .create_topic(&topic, partitions, 1)
                        .map_err(crate::error::backend);
                    let _ = reply.send(created);
                }
            })
            .map_err(|e| failed(e.to_string()))?;
        let bootstrap_servers = started
            .recv()
            .map_err(|_| failed("the mock cluster's thread ended"))??;
        Ok(Self {
            bootstrap_servers,
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// The cluster's `host:port` list.
    #[must_use]
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// Settings for clients of this cluster, with the short session timeout
    /// that lets a group rebalance quickly after a member leaves.
    pub fn config(&self) -> Result<KafkaConfig, BrokerError> {
        Ok(KafkaConfig::new([self.bootstrap_servers.clone()])?
            .with("session.timeout.ms", "3000")
            .with("heartbeat.interval.ms", "500"))
    }

    /// Creates a topic with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), BrokerError> {
        let requests = self
            .requests
            .as_ref()
            .ok_or_else(|| failed("the mock cluster is stopped"))?;
        let (reply, answer) = mpsc::channel();
        requests
            .send((name.to_owned(), partitions, reply))
            .map_err(|_| failed("the mock cluster's thread ended"))?;
        answer
            .recv()
            .map_err(|_| failed("the mock cluster's thread ended"))?
    }
}

impl Drop for MockKafka {
    fn drop(&mut self) {
        // Ends the thread's request loop; the cluster goes with it.
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
